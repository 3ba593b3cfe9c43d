package sandboxtest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// streamBytes is the size of the large file streamed in and out: over
// any flow window many times (execproto.MaxWindow is 4 MiB).
const streamBytes = 64 << 20

// seeded is n pseudo-random bytes of seed, generated as they are read, so
// neither side holds the file.
func seeded(seed uint64, n int64) io.Reader {
	var key [32]byte
	key[0] = byte(seed)
	return io.LimitReader(rand.NewChaCha8(key), n)
}

// testStream: a large file streamed in (WriteFile from a reader) and out
// (Open), compared by digest; a reader closed early, a limit, and what a
// read refuses or cuts: a file that grows or shrinks while read, a symlink
// swapped mid-read, a FIFO, a device, a /proc file. Nothing may hang.
func (s *suite) testStream(t *testing.T, sb sandbox.Sandbox) {
	t.Run("Large", func(t *testing.T) {
		t.Parallel()
		want := sha256.New()
		if err := sb.WriteFile(opCtx(t), "/workspace/large.bin", io.TeeReader(seeded(1, streamBytes), want), 0o644); err != nil {
			t.Fatalf("WriteFile(64 MiB) = %v", err)
		}
		r, err := sb.Open(opCtx(t), "/workspace/large.bin", 0)
		if err != nil {
			t.Fatalf("Open = %v", err)
		}
		defer r.Close()
		if fi := r.Stat(); fi.Size != streamBytes || !fi.Mode.IsRegular() || fi.Name != "large.bin" {
			t.Errorf("Stat() = %+v, want large.bin, a regular file of %d bytes", fi, streamBytes)
		}
		got := sha256.New()
		n, err := io.Copy(got, r)
		if err != nil || n != streamBytes {
			t.Fatalf("read %d bytes, %v; want %d, nil", n, err, streamBytes)
		}
		if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
			t.Errorf("the bytes read differ from those written")
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close after the end = %v", err)
		}

		// Closed early: Close cancels the read and returns; the
		// sandbox serves the next request.
		r, err = sb.Open(opCtx(t), "/workspace/large.bin", 0)
		if err != nil {
			t.Fatalf("Open again = %v", err)
		}
		if _, err := io.ReadFull(r, make([]byte, 1000)); err != nil {
			t.Fatalf("read 1000 bytes = %v", err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close early = %v", err)
		}
		if _, err := r.Read(make([]byte, 1)); err == nil {
			t.Errorf("Read after Close succeeded")
		}
		if _, err := sb.Stat(opCtx(t), "/workspace/large.bin"); err != nil {
			t.Errorf("Stat after an early Close = %v", err)
		}

		// Over the limit: refused before any data.
		if r, err := sb.Open(opCtx(t), "/workspace/large.bin", streamBytes-1); !errors.Is(err, sandbox.ErrTooLarge) {
			if err == nil {
				r.Close()
			}
			t.Errorf("Open(limit one byte short) = %v, want ErrTooLarge", err)
		}
		if r, err := sb.Open(opCtx(t), "/workspace/large.bin", streamBytes); err != nil {
			t.Errorf("Open(limit the size) = %v", err)
		} else {
			r.Close()
		}
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		if _, stderr, r := runCmdTB(t, sb, "mkfifo /workspace/fifo"); r.ExitCode != 0 {
			t.Fatalf("mkfifo: %d %s", r.ExitCode, stderr)
		}
		for _, tt := range []struct {
			path string
			want error
		}{
			{"/workspace/fifo", sandbox.ErrNotRegular}, // its open must not wait for a writer
			{"/dev/zero", sandbox.ErrNotRegular},       // endless
			{"/dev/null", sandbox.ErrNotRegular},
			{"/workspace/no-such", fs.ErrNotExist},
		} {
			if r, err := sb.Open(opCtx(t), tt.path, 0); !errors.Is(err, tt.want) {
				if err == nil {
					r.Close()
				}
				t.Errorf("Open(%s) = %v, want %v", tt.path, err, tt.want)
			}
			if _, err := sb.ReadFile(opCtx(t), tt.path, 1<<20); !errors.Is(err, tt.want) {
				t.Errorf("ReadFile(%s) = %v, want %v", tt.path, err, tt.want)
			}
		}
		if r, err := sb.Open(opCtx(t), "/workspace", 0); err == nil {
			r.Close()
			t.Errorf("Open(a directory) succeeded")
		}
	})

	t.Run("Proc", func(t *testing.T) {
		t.Parallel()
		// A /proc file says size 0 and is read to its end.
		r, err := sb.Open(opCtx(t), "/proc/version", 0)
		if err != nil {
			t.Fatalf("Open(/proc/version) = %v", err)
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil || !strings.Contains(string(b), "Linux") {
			t.Errorf("read /proc/version = %q, %v; want Linux's version", b, err)
		}
		if r.Stat().Size != 0 {
			t.Errorf("Stat().Size = %d, want 0", r.Stat().Size)
		}
		if r, err := sb.Open(opCtx(t), "/proc/version", 3); err != nil {
			t.Errorf("Open(/proc/version, limit 3) = %v", err)
		} else {
			if _, err := io.ReadAll(r); !errors.Is(err, sandbox.ErrTooLarge) {
				t.Errorf("read /proc/version past the limit = %v, want ErrTooLarge", err)
			}
			r.Close()
		}
	})

	const big = 16 << 20 // over the bulk window (2 MiB): the executor is held back while the reader waits
	t.Run("Grows", func(t *testing.T) {
		t.Parallel()
		if err := sb.WriteFile(opCtx(t), "/workspace/grow", seeded(2, big), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := sb.Open(opCtx(t), "/workspace/grow", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, stderr, res := runCmdTB(t, sb, "head -c 5000000 /dev/zero >> /workspace/grow"); res.ExitCode != 0 {
			t.Fatalf("append: %s", stderr)
		}
		want, got := sha256.New(), sha256.New()
		_, _ = io.Copy(want, seeded(2, big))
		n, err := io.Copy(got, r)
		if err != nil || n != big || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
			t.Errorf("read of a file grown after its open: %d bytes, %v; want the %d it had, unchanged", n, err, big)
		}
	})

	t.Run("Shrinks", func(t *testing.T) {
		t.Parallel()
		if err := sb.WriteFile(opCtx(t), "/workspace/shrink", seeded(3, big), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := sb.Open(opCtx(t), "/workspace/shrink", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if _, stderr, res := runCmdTB(t, sb, ": > /workspace/shrink"); res.ExitCode != 0 {
			t.Fatalf("truncate: %s", stderr)
		}
		n, err := io.Copy(io.Discard, r)
		if err == nil || !strings.Contains(err.Error(), "shrank") {
			t.Errorf("read of a file truncated mid-read: %d more bytes, %v; want an error saying it shrank", n, err)
		}
	})

	t.Run("SymlinkSwapped", func(t *testing.T) {
		t.Parallel()
		for _, f := range []struct {
			name string
			c    byte
		}{{"a", 'a'}, {"b", 'b'}} {
			if err := sb.WriteFile(opCtx(t), "/workspace/swap-"+f.name, bytes.NewReader(bytes.Repeat([]byte{f.c}, big)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, stderr, res := runCmdTB(t, sb, "ln -s swap-a /workspace/swap-link"); res.ExitCode != 0 {
			t.Fatalf("ln: %s", stderr)
		}
		r, err := sb.Open(opCtx(t), "/workspace/swap-link", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if _, stderr, res := runCmdTB(t, sb, "ln -sfn swap-b /workspace/swap-link.new && mv -T /workspace/swap-link.new /workspace/swap-link && rm /workspace/swap-a"); res.ExitCode != 0 {
			t.Fatalf("swap: %s", stderr)
		}
		rest, err := io.ReadAll(r)
		if err != nil || len(rest) != big-1 || bytes.IndexByte(rest, 'b') >= 0 {
			t.Errorf("read of a symlink swapped mid-read: %d bytes, %v; want the %d left of the file opened", len(rest), err, big-1)
		}
	})
}
