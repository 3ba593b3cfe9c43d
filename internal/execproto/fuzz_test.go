package execproto_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/execproto"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/ and run in plain go test.

// FuzzReadFrame reads frames from arbitrary bytes until the first error. Every
// error must be io.EOF or ErrFrame, and every accepted frame must re-encode to
// exactly the bytes it was read from: the encoding has one form, so a reader
// that accepted anything else would let two peers disagree about a frame.
func FuzzReadFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			off := len(b) - r.Len()
			fr, err := execproto.ReadFrame(r)
			if err != nil {
				if errors.Is(err, io.EOF) {
					if off != len(b) {
						t.Fatalf("ReadFrame = io.EOF with %d bytes left: a partial frame must be ErrFrame", len(b)-off)
					}
					return
				}
				if !errors.Is(err, execproto.ErrFrame) {
					t.Fatalf("ReadFrame = %v, want io.EOF or ErrFrame", err)
				}
				return
			}
			if len(fr.Payload) > execproto.MaxPayload {
				t.Fatalf("ReadFrame accepted a payload of %d bytes", len(fr.Payload))
			}
			read := b[off : len(b)-r.Len()]
			enc, err := execproto.AppendFrame(nil, fr)
			if err != nil {
				t.Fatalf("AppendFrame(ReadFrame(% x)) = %v", head(read), err)
			}
			if !bytes.Equal(enc, read) {
				t.Fatalf("AppendFrame(ReadFrame(x)) != x:\n got % x\nwant % x", head(enc), head(read))
			}
			again, err := execproto.ReadFrame(bytes.NewReader(enc))
			if err != nil {
				t.Fatalf("ReadFrame(AppendFrame(frame)) = %v", err)
			}
			if again.Type != fr.Type || again.Stream != fr.Stream || !bytes.Equal(again.Payload, fr.Payload) {
				t.Fatalf("frame changed across a round trip: %v/%d -> %v/%d", fr.Type, fr.Stream, again.Type, again.Stream)
			}
			switch fr.Type {
			case execproto.TAck:
				c, n := execproto.AckCredit(fr)
				if back := execproto.AckFrame(fr.Stream, c, n); !bytes.Equal(back.Payload, fr.Payload) {
					t.Fatalf("AckFrame(AckCredit(% x)) = % x", fr.Payload, back.Payload)
				}
			case execproto.TResize:
				rows, cols := execproto.ResizeSize(fr)
				if back := execproto.ResizeFrame(fr.Stream, rows, cols); !bytes.Equal(back.Payload, fr.Payload) {
					t.Fatalf("ResizeFrame(ResizeSize(% x)) = % x", fr.Payload, back.Payload)
				}
			}
		}
	})
}

// FuzzDecodeRequest decodes arbitrary JSON into a Request. Decode may reject
// it (with ErrFrame only) and Validate may reject it, but neither may panic;
// what Decode accepts must be exactly one JSON value, and a request that
// passes both must survive encoding and decoding unchanged.
func FuzzDecodeRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var req execproto.Request
		if err := execproto.Decode(b, &req); err != nil {
			if !errors.Is(err, execproto.ErrFrame) {
				t.Fatalf("Decode = %v, want ErrFrame", err)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("Decode accepted %q, which is not exactly one JSON value", b)
		}
		sameInBinary(t, req)
		if w, c := req.Flow(); w < execproto.Window || w > execproto.MaxWindow || c < execproto.ChunkSize || c > execproto.MaxChunkSize || int64(c) > w {
			t.Fatalf("Flow() = %d, %d: out of bounds", w, c)
		}
		if err := req.Validate(); err != nil {
			return
		}
		if w, c := req.Flow(); (req.Window != 0 && w != req.Window) || (req.ChunkSize != 0 && c != req.ChunkSize) {
			t.Fatalf("valid request's Flow() = %d, %d; it asks for %d, %d", w, c, req.Window, req.ChunkSize)
		}
		out, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("json.Marshal(valid request) = %v", err)
		}
		var again execproto.Request
		if err := execproto.Decode(out, &again); err != nil {
			t.Fatalf("Decode(json.Marshal(valid request)) = %v\n%s", err, out)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("request valid before a round trip is not after: %v\n%s", err, out)
		}
		// omitempty turns an empty list into an absent one.
		if len(req.Argv) == 0 {
			req.Argv = nil
		}
		if len(req.Env) == 0 {
			req.Env = nil
		}
		if !reflect.DeepEqual(again, req) {
			t.Fatalf("request changed across a round trip:\n got %+v\nwant %+v", again, req)
		}
	})
}

// FuzzDecodeSetup decodes arbitrary JSON as the messages the executor reads
// on stream 0 before it trusts anything: Setup and Hello.
// A Setup that validates must still validate after a round trip, so the
// host's encoding never turns a good setup into one the executor refuses.
func FuzzDecodeSetup(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[execproto.Setup](t, b)
		roundTrip[execproto.Hello](t, b)
		var s execproto.Setup
		if execproto.Decode(b, &s) != nil || s.Validate() != nil {
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("json.Marshal(valid setup) = %v", err)
		}
		var again execproto.Setup
		if err := execproto.Decode(out, &again); err != nil {
			t.Fatalf("Decode(json.Marshal(valid setup)) = %v\n%s", err, out)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("setup valid before a round trip is not after: %v\n%s", err, out)
		}
	})
}

// FuzzDecodeResult decodes arbitrary JSON as the messages the host reads from
// the executor, which runs beside untrusted code: Result, Ready and Error.
func FuzzDecodeResult(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[execproto.Result](t, b)
		roundTrip[execproto.Ready](t, b)
		roundTrip[execproto.Error](t, b)
	})
}

// FuzzDecodeWatchEvent decodes arbitrary JSON as the events the host reads
// on a watch stream, from the executor beside untrusted code. Decode may
// reject it (with ErrFrame only) and Validate may reject it; an event that
// passes both must survive a round trip, still valid, and its encoding must
// fit one data frame, as every event the executor sends does.
func FuzzDecodeWatchEvent(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[execproto.WatchEvent](t, b)
		var ev execproto.WatchEvent
		if execproto.Decode(b, &ev) != nil || ev.Validate() != nil {
			return
		}
		out, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("json.Marshal(valid event) = %v", err)
		}
		if len(out) > execproto.ChunkSize {
			t.Fatalf("valid event encodes to %d bytes, over one data frame (%d)", len(out), execproto.ChunkSize)
		}
		var again execproto.WatchEvent
		if err := execproto.Decode(out, &again); err != nil {
			t.Fatalf("Decode(json.Marshal(valid event)) = %v\n%s", err, out)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("event valid before a round trip is not after: %v\n%s", err, out)
		}
		if again != ev && utf8.ValidString(ev.Path) {
			t.Fatalf("event changed across a round trip:\n got %+v\nwant %+v", again, ev)
		}
	})
}

// roundTrip decodes b as a T. If Decode accepts it, its encoding must decode
// again and encode to the same bytes (empty and absent lists both encode as
// absent, so the encoding, not the struct, is the fixed point).
func roundTrip[T any](t *testing.T, b []byte) {
	t.Helper()
	var v T
	if err := execproto.Decode(b, &v); err != nil {
		if !errors.Is(err, execproto.ErrFrame) {
			t.Fatalf("Decode(%T) = %v, want ErrFrame", v, err)
		}
		return
	}
	if !json.Valid(b) {
		t.Fatalf("Decode(%T) accepted %q, which is not exactly one JSON value", v, b)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%T) = %v", v, err)
	}
	var again T
	if err := execproto.Decode(out, &again); err != nil {
		t.Fatalf("Decode(json.Marshal(%T)) = %v\n%s", v, err, out)
	}
	out2, err := json.Marshal(again)
	if err != nil {
		t.Fatalf("json.Marshal(%T) = %v", again, err)
	}
	if !bytes.Equal(out, out2) {
		t.Fatalf("%T changed across a round trip:\n got %s\nwant %s", v, out2, out)
	}
	sameInBinary(t, v)
}

// FuzzSpawn decodes a spawner request and validates it against a number of
// passed descriptors. An accepted request names each child descriptor once,
// in range, one per passed descriptor that is not the cgroup's or a v1
// tasks file's; those are in range, distinct and not the cgroup's.
func FuzzSpawn(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, nfiles uint8) {
		var s execproto.Spawn
		if json.Unmarshal(b, &s) != nil {
			return
		}
		n := int(nfiles)
		if s.Validate(n) != nil {
			return
		}
		want := n
		if s.CgroupFile >= 0 {
			want--
		}
		tasks := map[int]bool{}
		for _, i := range s.TasksFiles {
			if i < 0 || i >= n || i == s.CgroupFile || tasks[i] {
				t.Fatalf("accepted tasks descriptor %d in %v with %d descriptors (cgroup %d)", i, s.TasksFiles, n, s.CgroupFile)
			}
			tasks[i] = true
			want--
		}
		if len(s.Files) != want || n > execproto.MaxSpawnFiles || s.Path == "" || len(s.Args) == 0 {
			t.Fatalf("accepted %+v with %d descriptors", s, n)
		}
		seen := map[int]bool{}
		for _, fd := range s.Files {
			if fd < 0 || fd >= 3+execproto.MaxSpawnFiles || seen[fd] {
				t.Fatalf("accepted child descriptor %d in %v", fd, s.Files)
			}
			seen[fd] = true
		}
		const cloneNewUser = 0x10000000
		if s.LateIDs && (s.Cloneflags&cloneNewUser == 0 || s.Cred != nil && (s.Cred.UID != 0 || s.Cred.GID != 0)) {
			t.Fatalf("accepted late ids with cloneflags %#x and cred %+v", s.Cloneflags, s.Cred)
		}
	})
}

// TestSpawnTasksFiles: v1 tasks descriptors are counted out of the
// child's, and refused out of range, twice, or on the cgroup's.
func TestSpawnTasksFiles(t *testing.T) {
	base := execproto.Spawn{Path: "/x", Args: []string{"x"}, Files: []int{3, 4}, CgroupFile: 2, Cloneflags: 0x10000000, LateIDs: true}
	for _, c := range []struct {
		tasks  []int
		nfiles int
		ok     bool
	}{
		{[]int{3, 4, 5}, 6, true},
		{nil, 3, true},
		{[]int{3, 4}, 6, false},    // one passed descriptor neither the child's nor a tasks file
		{[]int{2, 3, 4}, 6, false}, // the cgroup's
		{[]int{3, 3, 4}, 6, false}, // twice
		{[]int{3, 4, 6}, 6, false}, // out of range
		{[]int{-1, 3, 4}, 6, false},
	} {
		s := base
		s.TasksFiles = c.tasks
		if err := s.Validate(c.nfiles); (err == nil) != c.ok {
			t.Errorf("tasks %v of %d descriptors: Validate = %v, want ok %t", c.tasks, c.nfiles, err, c.ok)
		}
	}
}
