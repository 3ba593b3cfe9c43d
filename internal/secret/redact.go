package secret

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
)

// MinRedactLen is the shortest value a Redactor scrubs: shorter values would
// redact ordinary text everywhere, so Add ignores them.
const MinRedactLen = 4

// Redactor scrubs every registered secret value from text and streams. Each
// stretch of text covered by occurrences of registered values becomes one
// "[redacted]"; occurrences that overlap (of one value or of several) merge
// into a single "[redacted]", so no fragment of a value survives, while
// occurrences that merely touch stay separate. It is safe for concurrent use,
// and a nil *Redactor scrubs nothing.
type Redactor struct {
	mu sync.Mutex
	// counts is guarded by mu: how many times each value was Added, so a
	// value shared by two secrets stays registered until both are removed.
	counts map[string]int

	// set is the immutable pattern set built from counts; readers load it
	// without locking.
	set atomic.Pointer[patternSet]
}

// patternSet is an immutable snapshot of the registered values.
type patternSet struct {
	// byFirst holds, per first byte, the values starting with it, longest
	// first, so the first prefix match at a position is the longest.
	byFirst [256][][]byte
	maxLen  int
}

// NewRedactor returns a Redactor that knows no value yet.
func NewRedactor() *Redactor { return &Redactor{} }

// Add registers v; values shorter than MinRedactLen bytes are ignored.
func (r *Redactor) Add(v Value) {
	b := v.bytes()
	if r == nil || len(b) < MinRedactLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = make(map[string]int)
	}
	r.counts[string(b)]++
	r.rebuildLocked()
}

// Remove unregisters one Add of v.
func (r *Redactor) Remove(v Value) {
	b := v.bytes()
	if r == nil || len(b) < MinRedactLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := string(b)
	if r.counts[k] == 0 {
		return
	}
	r.counts[k]--
	if r.counts[k] == 0 {
		delete(r.counts, k)
	}
	r.rebuildLocked()
}

// rebuildLocked publishes a new pattern set.
// Preconditions: r.mu is held.
func (r *Redactor) rebuildLocked() {
	ps := &patternSet{}
	for k := range r.counts {
		p := []byte(k)
		ps.byFirst[p[0]] = append(ps.byFirst[p[0]], p)
		ps.maxLen = max(ps.maxLen, len(p))
	}
	for i := range ps.byFirst {
		slices.SortFunc(ps.byFirst[i], func(a, b []byte) int {
			if len(a) != len(b) {
				return len(b) - len(a)
			}
			return bytes.Compare(a, b)
		})
	}
	r.set.Store(ps)
}

func (r *Redactor) patterns() *patternSet {
	if r == nil {
		return nil
	}
	return r.set.Load()
}

// String returns s with every registered value replaced by "[redacted]".
func (r *Redactor) String(s string) string {
	ps := r.patterns()
	if ps == nil || ps.maxLen == 0 {
		return s
	}
	var sc scanner
	out, _ := sc.scan(ps, nil, []byte(s), true)
	return string(out)
}

// Bytes returns a new slice holding b with every registered value replaced
// by "[redacted]".
func (r *Redactor) Bytes(b []byte) []byte {
	ps := r.patterns()
	if ps == nil || ps.maxLen == 0 {
		return append([]byte(nil), b...)
	}
	var sc scanner
	out, _ := sc.scan(ps, nil, b, true)
	return out
}

// longest returns the length of the longest value that b starts with, or 0.
// The caller guarantees b is either at least ps.maxLen long or the end of
// the input, so the answer cannot change with more input.
func (ps *patternSet) longest(b []byte) int {
	for _, p := range ps.byFirst[b[0]] {
		if bytes.HasPrefix(b, p) {
			return len(p)
		}
	}
	return 0
}

// scanner is the state of a scrub that may continue with more input: the
// number of bytes at the start of the next input that are still covered by
// a "[redacted]" already emitted.
type scanner struct{ cover int }

// scan appends to out the scrubbed form of the decidable prefix of in and
// returns it with the number of bytes of in consumed. A position is
// decidable when at least maxLen bytes follow it or final is set; the rest
// (fewer than maxLen bytes) must be passed again with more input.
func (sc *scanner) scan(ps *patternSet, out, in []byte, final bool) ([]byte, int) {
	i := 0
	for ; i < len(in); i++ {
		if !final && len(in)-i < ps.maxLen {
			break
		}
		n := ps.longest(in[i:])
		switch {
		case i < sc.cover:
			// Inside a redacted stretch: an overlapping value extends it.
			sc.cover = max(sc.cover, i+n)
		case n > 0:
			out = append(out, redacted...)
			sc.cover = i + n
		default:
			out = append(out, in[i])
		}
	}
	sc.cover = max(sc.cover-i, 0)
	return out, i
}

// Writer returns a writer that scrubs the stream written to it before
// passing it to w, including values split across Write calls. It holds back
// fewer bytes than the longest registered value until Close, which writes
// them (scrubbed) but does not close w. Output equals String applied to the
// whole stream as long as the registered values do not change meanwhile.
func (r *Redactor) Writer(w io.Writer) io.WriteCloser {
	return &redactWriter{r: r, w: w}
}

type redactWriter struct {
	r    *Redactor
	w    io.Writer
	sc   scanner
	held []byte
	out  []byte
	err  error
}

// Write scrubs p and passes on everything that is decided.
func (rw *redactWriter) Write(p []byte) (int, error) {
	if rw.err != nil {
		return 0, rw.err
	}
	if err := rw.process(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what was held back. It does not close the underlying writer.
func (rw *redactWriter) Close() error {
	if rw.err != nil {
		if errors.Is(rw.err, errClosed) {
			return nil
		}
		return rw.err
	}
	err := rw.process(nil, true)
	if err == nil {
		rw.err = errClosed
	}
	return err
}

var errClosed = io.ErrClosedPipe

func (rw *redactWriter) process(p []byte, final bool) error {
	ps := rw.r.patterns()
	if ps == nil || ps.maxLen == 0 {
		// Nothing to scrub: but bytes held under an earlier pattern set go
		// first, unscrubbed-by-nothing, in order.
		ps = &patternSet{}
	}
	rw.held = append(rw.held, p...)
	var n int
	rw.out, n = rw.sc.scan(ps, rw.out[:0], rw.held, final)
	rw.held = append(rw.held[:0], rw.held[n:]...)
	if len(rw.out) > 0 {
		if _, err := rw.w.Write(rw.out); err != nil {
			rw.err = err
			return err
		}
	}
	return nil
}

// Reader returns a reader that scrubs the stream it reads from src, with
// the same handling of values split across reads as Writer.
func (r *Redactor) Reader(src io.Reader) io.Reader {
	return &redactReader{r: r, src: src}
}

type redactReader struct {
	r    *Redactor
	src  io.Reader
	sc   scanner
	held []byte
	out  []byte // scrubbed, not yet returned
	off  int    // read offset into out
	err  error  // from src, returned once out is drained
}

const readChunk = 32 << 10

// Read returns scrubbed bytes.
func (rr *redactReader) Read(p []byte) (int, error) {
	for rr.off == len(rr.out) {
		if rr.err != nil {
			return 0, rr.err
		}
		rr.fill()
	}
	n := copy(p, rr.out[rr.off:])
	rr.off += n
	return n, nil
}

// fill reads once from src and scrubs what became decidable.
func (rr *redactReader) fill() {
	rr.out, rr.off = rr.out[:0], 0
	start := len(rr.held)
	rr.held = slices.Grow(rr.held, readChunk)[:start+readChunk]
	n, err := rr.src.Read(rr.held[start:])
	rr.held = rr.held[:start+n]
	ps := rr.r.patterns()
	if ps == nil {
		ps = &patternSet{}
	}
	var used int
	rr.out, used = rr.sc.scan(ps, rr.out, rr.held, err != nil)
	rr.held = append(rr.held[:0], rr.held[used:]...)
	if err != nil {
		rr.err = err
	}
}
