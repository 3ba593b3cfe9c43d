package execproto

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// ErrClosed reports use of a closed Credit or Writer.
var ErrClosed = errors.New("closed")

// ErrStopped reports a wait for credit given up because its stop channel
// was closed (TakeUntil, SendDataUntil).
var ErrStopped = errors.New("stopped")

// Credit is the send window of one data channel. The zero value is not usable;
// use NewCredit.
type Credit struct {
	limit int64 // the most credit the peer may return: 4 windows

	mu sync.Mutex
	// cond is signalled when n grows or the credit is closed.
	cond   *sync.Cond
	n      int64 // guarded by mu
	closed bool  // guarded by mu
}

// NewCredit returns a window of n bytes.
func NewCredit(n int64) *Credit {
	c := &Credit{n: n, limit: 4 * max(n, Window)}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Take waits until some credit is available and takes up to limit bytes of it.
// It returns ErrClosed once Close was called.
func (c *Credit) Take(limit int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n <= 0 && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0, ErrClosed
	}
	n := int64(limit)
	if n > c.n {
		n = c.n
	}
	c.n -= n
	return int(n), nil
}

// TakeUntil is Take that gives up with ErrStopped once stop is closed
// (a nil stop never is). Only a Take that has to wait costs a goroutine,
// which wakes it when stop is closed.
func (c *Credit) TakeUntil(limit int, stop <-chan struct{}) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n <= 0 && !c.closed && stop != nil {
		waiting := make(chan struct{})
		defer close(waiting)
		go func() {
			select {
			case <-stop:
				c.mu.Lock()
				c.cond.Broadcast()
				c.mu.Unlock()
			case <-waiting:
			}
		}()
	}
	for c.n <= 0 && !c.closed {
		if stopped(stop) {
			return 0, ErrStopped
		}
		c.cond.Wait()
	}
	if c.closed {
		return 0, ErrClosed
	}
	n := min(int64(limit), c.n)
	c.n -= n
	return int(n), nil
}

// stopped reports whether stop is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// Add returns n bytes of credit. Credit beyond 4 windows (of the larger of
// the initial credit and Window) is refused: a peer that acknowledges bytes
// it never received is broken.
func (c *Credit) Add(n uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n+int64(n) > c.limit {
		return errors.New("flow control: credit beyond window")
	}
	c.n += int64(n)
	c.cond.Broadcast()
	return nil
}

// Close wakes every waiter; later Takes fail.
func (c *Credit) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cond.Broadcast()
}

// Writer serialises frames from many goroutines onto one connection.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer // guarded by mu
	buf []byte    // guarded by mu
	err error     // guarded by mu: the first write error; later writes fail with it
	// bulk holds *[]byte buffers of frames larger than buf keeps.
	bulk sync.Pool
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write encodes and writes one frame atomically with respect to other Writes.
func (w *Writer) Write(f Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	b, err := AppendFrame(w.buf[:0], f)
	if err != nil {
		return err
	}
	if cap(b) <= 2*ChunkSize {
		w.buf = b // larger (bulk) frames are not kept: a connection's idle buffer stays small
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	return nil
}

// WriteFrames writes fs with one write, atomically with respect to
// other Writes: frames that go out together cost the peer one wake-up.
func (w *Writer) WriteFrames(fs ...Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	b := w.buf[:0]
	for _, f := range fs {
		var err error
		if b, err = AppendFrame(b, f); err != nil {
			return err
		}
	}
	if cap(b) <= 2*ChunkSize {
		w.buf = b
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	return nil
}

// SendDataBetween is SendData with frames sent before p's data and
// after it, in the same write as p's first and last frames: a p within
// one frame and the credit, with what goes before and after it, is one
// write. With an empty p it writes before and after together.
func (w *Writer) SendDataBetween(stream uint32, c byte, credit *Credit, chunk int, before []Frame, p []byte, after []Frame) error {
	if len(p) == 0 {
		return w.WriteFrames(append(before, after...)...)
	}
	n, err := credit.Take(min(len(p), chunk))
	if err != nil {
		return err
	}
	fs := append(before, DataFrame(stream, c, p[:n]))
	if n == len(p) {
		return w.WriteFrames(append(fs, after...)...)
	}
	if err := w.WriteFrames(fs...); err != nil {
		return err
	}
	if err := w.SendData(stream, c, credit, chunk, p[n:]); err != nil {
		return err
	}
	if len(after) == 0 {
		return nil
	}
	return w.WriteFrames(after...)
}

// SendData writes p on channel c of stream, in frames of at most chunk
// bytes of data (Request.Flow), waiting for credit.
func (w *Writer) SendData(stream uint32, c byte, credit *Credit, chunk int, p []byte) error {
	_, err := w.SendDataUntil(stream, c, credit, chunk, p, nil)
	return err
}

// SendDataUntil is SendData that stops waiting for credit, with
// ErrStopped, once stop is closed. It returns how many bytes of p it sent.
func (w *Writer) SendDataUntil(stream uint32, c byte, credit *Credit, chunk int, p []byte, stop <-chan struct{}) (int, error) {
	sent := 0
	for len(p) > 0 {
		n, err := credit.TakeUntil(min(len(p), chunk), stop)
		if err != nil {
			return sent, err
		}
		if err := w.writeData(stream, c, p[:n]); err != nil {
			return sent, err
		}
		p = p[n:]
		sent += n
	}
	return sent, nil
}

// writeData writes a Data frame of p on channel c of stream with one
// Write, as Write does, without building the frame's payload first: a
// small frame is encoded in the Writer's buffer, a bulk one (up to
// MaxChunkSize) in a buffer of the bulk pool, which the garbage collector
// empties when no bulk stream runs. A frame per allocation cost the
// executor more than sending it.
func (w *Writer) writeData(stream uint32, c byte, p []byte) error {
	if stream == 0 || c > Stderr || len(p) == 0 || 1+len(p) > MaxPayload {
		// What Validate refuses; say it as it does.
		f := DataFrame(stream, c, p)
		return f.Validate()
	}
	size := HeaderSize + 1 + len(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	var b []byte
	var pooled *[]byte
	if size <= 2*ChunkSize {
		b = w.buf[:0]
	} else {
		pooled, _ = w.bulk.Get().(*[]byte)
		if pooled == nil {
			pooled = new([]byte)
		}
		b = (*pooled)[:0]
	}
	b = binary.BigEndian.AppendUint32(b, uint32(size-4))
	b = append(b, byte(TData))
	b = binary.BigEndian.AppendUint32(b, stream)
	b = append(b, c)
	b = append(b, p...)
	if pooled != nil {
		*pooled = b
		defer w.bulk.Put(pooled)
	} else {
		w.buf = b
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	return nil
}

// Inbox queues received data chunks for a consumer goroutine. It is bounded
// by bytes, not by count: a peer that sends more than the window's
// unacknowledged bytes on one channel is refused, so a hostile sender
// cannot grow it.
type Inbox struct {
	window int64 // per channel

	mu     sync.Mutex
	chunks []Chunk  // guarded by mu
	bytes  [3]int64 // guarded by mu: queued bytes per channel
	ended  [3]bool  // guarded by mu: PutClose was called for the channel
	closed bool     // guarded by mu
	ready  chan struct{}
}

// Chunk is one queued piece of data, or the end of a channel.
type Chunk struct {
	Channel byte
	Data    []byte
	// Close marks the end of the channel's data (PutClose); Data is nil.
	Close bool
}

// NewInbox returns an empty Inbox that holds at most window bytes per
// channel: the window the stream's sender was given (Request.Flow).
func NewInbox(window int64) *Inbox {
	return &Inbox{window: window, ready: make(chan struct{}, 1)}
}

// Put queues p for channel c.
func (q *Inbox) Put(c byte, p []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if c > Stderr || q.bytes[c]+int64(len(p)) > q.window {
		return errors.New("flow control: data beyond window")
	}
	if q.ended[c] {
		return errors.New("data after the channel's close")
	}
	q.bytes[c] += int64(len(p))
	q.chunks = append(q.chunks, Chunk{Channel: c, Data: p})
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return nil
}

// PutClose queues the end of channel c after the data queued for it: the
// consumer gets a Chunk with Close set. A channel ends once; a second
// close, or data after it, is refused, so a peer cannot grow the queue
// with closes.
func (q *Inbox) PutClose(c byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if c > Stderr || q.ended[c] {
		return errors.New("channel closed twice")
	}
	q.ended[c] = true
	q.chunks = append(q.chunks, Chunk{Channel: c, Close: true})
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return nil
}

// Get waits for the next chunk; ok is false once the Inbox is closed and empty.
func (q *Inbox) Get() (Chunk, bool) {
	for {
		c, ok, ended := q.TryGet()
		if ok {
			return c, true
		}
		if ended {
			return Chunk{}, false
		}
		<-q.ready
	}
}

// TryGet takes the next chunk without waiting: ok is false when none is
// queued, and then ended says whether the Inbox is closed (none will
// come). A consumer that found none waits on Ready. There is one
// consumer.
func (q *Inbox) TryGet() (c Chunk, ok, ended bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.chunks) == 0 {
		return Chunk{}, false, q.closed
	}
	c = q.chunks[0]
	q.chunks[0] = Chunk{}
	q.chunks = q.chunks[1:]
	if len(q.chunks) == 0 {
		q.chunks = nil
	}
	q.bytes[c.Channel] -= int64(len(c.Data))
	return c, true, false
}

// Pending reports whether a chunk is queued or the Inbox is closed: Get
// would not wait.
func (q *Inbox) Pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.chunks) > 0 || q.closed
}

// Ready receives after a Put, a PutClose or the Close that came since
// the consumer last received from it (or since the Inbox was made): the
// consumer's wait when TryGet found nothing.
func (q *Inbox) Ready() <-chan struct{} { return q.ready }

// Close ends the Inbox: queued chunks are still delivered, then Get reports
// the end. Close is idempotent.
func (q *Inbox) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
