package secret

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

func newRedactor(vals ...string) *Redactor {
	r := NewRedactor()
	for _, v := range vals {
		r.Add(NewValue([]byte(v)))
	}
	return r
}

func TestRedactorString(t *testing.T) {
	tests := []struct {
		name string
		vals []string
		in   string
		want string
	}{
		{"none registered", nil, "hello world", "hello world"},
		{"simple", []string{"hunter2x"}, "pw=hunter2x;", "pw=[redacted];"},
		{"twice", []string{"hunter2x"}, "hunter2x hunter2x", "[redacted] [redacted]"},
		{"adjacent stay separate", []string{"tok1"}, "tok1tok1", "[redacted][redacted]"},
		{"self overlap merges", []string{"aaaa"}, "xaaaaay", "x[redacted]y"},
		{"longest first", []string{"abcd", "abcdefgh"}, "-abcdefgh-", "-[redacted]-"},
		{"shorter alone", []string{"abcd", "abcdefgh"}, "-abcdefg-", "-[redacted]efg-"},
		{"overlapping values", []string{"abcdef", "defghi"}, "xabcdefghiy", "x[redacted]y"},
		{"value inside value", []string{"bcde", "abcdefg"}, "abcdefg", "[redacted]"},
		{"chain of overlaps", []string{"abcd", "cdef", "efgh"}, "abcdefgh!", "[redacted]!"},
		{"short values ignored", []string{"abc", "", "x"}, "abc x", "abc x"},
		{"at ends", []string{"edge"}, "edge middle edge", "[redacted] middle [redacted]"},
		{"binary", []string{"\x00\xff\x00\xff"}, "a\x00\xff\x00\xffb", "a[redacted]b"},
		{"empty input", []string{"abcd"}, "", ""},
		{"partial at end", []string{"abcdef"}, "xxabcde", "xxabcde"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRedactor(tt.vals...)
			if got := r.String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if got := string(r.Bytes([]byte(tt.in))); got != tt.want {
				t.Errorf("Bytes(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if got := viaWriter(t, r, []byte(tt.in), 1); got != tt.want {
				t.Errorf("Writer(%q) byte by byte = %q, want %q", tt.in, got, tt.want)
			}
			if got := viaReader(t, r, []byte(tt.in), iotest.OneByteReader); got != tt.want {
				t.Errorf("Reader(%q) byte by byte = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRedactorAddRemove(t *testing.T) {
	r := NewRedactor()
	a, b := NewValue([]byte("alpha-1")), NewValue([]byte("alpha-1"))
	r.Add(a)
	r.Add(b)
	r.Remove(a)
	if got := r.String("alpha-1"); got != redacted {
		t.Errorf("after one of two Removes: String = %q, want %q", got, redacted)
	}
	r.Remove(b)
	if got := r.String("alpha-1"); got != "alpha-1" {
		t.Errorf("after both Removes: String = %q", got)
	}
	r.Remove(b) // extra Remove is harmless
	r.Add(NewValue([]byte("abc")))
	if got := r.String("abc"); got != "abc" {
		t.Errorf("short value redacted: %q", got)
	}

	var nilR *Redactor
	nilR.Add(a)
	nilR.Remove(a)
	if got := nilR.String("alpha-1"); got != "alpha-1" {
		t.Errorf("nil Redactor String = %q", got)
	}
	if got := string(nilR.Bytes([]byte("x"))); got != "x" {
		t.Errorf("nil Redactor Bytes = %q", got)
	}
	if got := viaWriter(t, nilR, []byte("alpha-1"), 3); got != "alpha-1" {
		t.Errorf("nil Redactor Writer = %q", got)
	}
}

// TestRedactorEveryBoundary writes a text holding overlapping values in two
// and three chunks at every possible pair of split points.
func TestRedactorEveryBoundary(t *testing.T) {
	r := newRedactor("secretvalue", "valuesecret", "cret", "ecretv")
	in := []byte("x secretvaluesecret y secre tsecretvalue secretvaluesecretvalue z")
	want := r.String(string(in))
	if strings.Contains(want, "cret") {
		t.Fatalf("String left a fragment: %q", want)
	}
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			var out bytes.Buffer
			w := r.Writer(&out)
			for _, c := range [][]byte{in[:i], in[i:j], in[j:]} {
				if _, err := w.Write(c); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if out.String() != want {
				t.Fatalf("split at %d,%d: Writer = %q, want %q", i, j, out.String(), want)
			}
		}
	}
	for size := 1; size <= len(in); size++ {
		if got := viaWriter(t, r, in, size); got != want {
			t.Errorf("chunks of %d: Writer = %q, want %q", size, got, want)
		}
		if got := viaReader(t, r, in, func(r io.Reader) io.Reader { return &chunkReader{r: r, n: size} }); got != want {
			t.Errorf("chunks of %d: Reader = %q, want %q", size, got, want)
		}
	}
}

func TestRedactorHoldsBackLittle(t *testing.T) {
	r := newRedactor("0123456789")
	var out bytes.Buffer
	w := r.Writer(&out)
	if _, err := w.Write([]byte("hello world, nothing secret here")); err != nil {
		t.Fatal(err)
	}
	if held := len("hello world, nothing secret here") - out.Len(); held > 9 {
		t.Errorf("Writer holds back %d bytes, want at most 9", held)
	}
	_, _ = w.Write([]byte("012345678"))
	if strings.Contains(out.String(), "012345678") {
		t.Errorf("Writer passed a prefix of a value early: %q", out.String())
	}
	_ = w.Close()
	if !strings.HasSuffix(out.String(), "012345678") {
		t.Errorf("Close did not flush held bytes: %q", out.String())
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Errorf("Write after Close succeeded")
	}
}

func TestRedactorWriterError(t *testing.T) {
	r := newRedactor("abcd")
	boom := errors.New("boom")
	w := r.Writer(errWriter{boom})
	if _, err := w.Write([]byte("hello world")); !errors.Is(err, boom) {
		t.Errorf("Write = %v, want %v", err, boom)
	}
	if _, err := w.Write([]byte("again")); !errors.Is(err, boom) {
		t.Errorf("second Write = %v, want sticky %v", err, boom)
	}
}

func TestRedactorReaderError(t *testing.T) {
	r := newRedactor("abcdef")
	boom := errors.New("boom")
	rd := r.Reader(io.MultiReader(strings.NewReader("xx abcdef abc"), iotest.ErrReader(boom)))
	got, err := io.ReadAll(rd)
	if !errors.Is(err, boom) {
		t.Errorf("ReadAll error = %v, want %v", err, boom)
	}
	if string(got) != "xx [redacted] abc" {
		t.Errorf("ReadAll = %q", got)
	}
}

func TestRedactorConcurrent(t *testing.T) {
	r := NewRedactor()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			v := NewValue([]byte(strings.Repeat(string(rune('a'+i)), 6)))
			for range 200 {
				r.Add(v)
				_ = r.String("aaaaaa bbbbbb cccccc")
				r.Remove(v)
			}
		})
	}
	wg.Wait()
	if got := r.String("aaaaaa"); got != "aaaaaa" {
		t.Errorf("after all removed: %q", got)
	}
}

type errWriter struct{ err error }

func (e errWriter) Write([]byte) (int, error) { return 0, e.err }

type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

func viaWriter(t *testing.T, r *Redactor, in []byte, size int) string {
	t.Helper()
	var out bytes.Buffer
	w := r.Writer(&out)
	for len(in) > 0 {
		n := min(size, len(in))
		if _, err := w.Write(in[:n]); err != nil {
			t.Fatal(err)
		}
		in = in[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func viaReader(t *testing.T, r *Redactor, in []byte, wrap func(io.Reader) io.Reader) string {
	t.Helper()
	got, err := io.ReadAll(r.Reader(wrap(bytes.NewReader(in))))
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}

func FuzzRedactor(f *testing.F) {
	f.Add([]byte("abcdef"), []byte("defghi"), []byte("xxabcdefghiyy abcdef"), []byte{1, 2, 3})
	f.Add([]byte("aaaa"), []byte("aaaaaa"), []byte("aaaaaaaaaaaaaaaaaaaa"), []byte{7})
	f.Add([]byte("token-123"), []byte("en-1"), []byte("Bearer token-123\r\n"), []byte{0, 5, 1})
	f.Fuzz(func(t *testing.T, v1, v2, in, cuts []byte) {
		r := newRedactor(string(v1), string(v2))
		want := r.String(string(in))
		// The text between markers is input that no occurrence covered, so
		// it must not hold a whole value.
		for _, seg := range strings.Split(want, redacted) {
			for _, v := range [][]byte{v1, v2} {
				if len(v) >= MinRedactLen && strings.Contains(seg, string(v)) {
					t.Errorf("String(%q) = %q still holds %q", in, want, v)
				}
			}
		}
		var out bytes.Buffer
		w := r.Writer(&out)
		rest := in
		for _, c := range cuts {
			n := min(int(c)%17, len(rest))
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if _, err := w.Write(rest); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("Writer(%q) with cuts %v = %q, want %q", in, cuts, out.String(), want)
		}
	})
}
