package execproto_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/execproto"
)

// messages are one value of each type with a binary form, as a sandbox's
// start and its requests carry them.
func messages() []execproto.Message {
	return []execproto.Message{
		execproto.Hello{Version: execproto.Version},
		&execproto.Setup{
			Hostname:   "sandbox",
			SystemDirs: []string{"/usr", "/bin", "/lib"},
			EtcFiles:   []string{"/etc/ssl/certs", "/etc/ld.so.cache"},
			Workspace:  execproto.Workspace{Mode: execproto.WorkspaceCOW, FD: 5},
			Mounts:     []execproto.Mount{{FD: 6, Target: "/data", ReadOnly: true}, {FD: 7, Target: "/cfg/x", File: true}},
			DiskBytes:  256 << 20,
			ShmBytes:   64 << 20,
			ProxyFD:    4,
			ProxyAddr:  "127.0.0.1:3128",
			User:       execproto.User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user"},
			Rlimits:    map[string]uint64{"nofile": 1024, "core": 0, "nproc": 512},
		},
		&execproto.Setup{
			Hostname:    "rootless",
			RootPath:    &execproto.HostPath{Path: "/tmp/root", Dev: 2049, Ino: 77},
			LayerPaths:  nil,
			Workspace:   execproto.Workspace{Mode: execproto.WorkspaceRW, Source: &execproto.HostPath{Path: "/home/me/w", Dev: 1, Ino: 2}},
			ProxyPath:   &execproto.HostPath{Path: "/run/p.sock", Ino: 9},
			ProxyAddr:   "127.0.0.1:3128",
			NoSetGroups: true, RequireLandlock: true, WritableRoot: true, StaticReadOnly: true,
			RootCaps: []string{"CHOWN", "SETUID"},
			Sudo:     true,
		},
		&execproto.Setup{Layers: []int{5, 6, 0, -1}, LayerPaths: []*execproto.HostPath{{Path: "/l", Ino: 1}, {}}},
		execproto.Setup{GVisor: true, Account: &execproto.User{Name: "user", UID: 1000}, Pids: -7, ProxyStreams: true, ProxyAddr: "127.0.0.1:1"},
		execproto.Ready{PID: 1, LandlockABI: 7, Seccomp: true, Layers: []string{"landlock", "seccomp"}},
		execproto.Request{Op: execproto.OpExec, Argv: []string{"sh", "-c", "echo hi", ""}, Env: []string{"A=1", "PATH=/bin"}, Dir: "/workspace", TTY: true, Rows: 65535, Cols: 80, Stdin: true, TimeoutMS: 1000, MaxOutput: 1 << 40, Fingerprint: "/workspace"},
		execproto.Request{Op: execproto.OpWrite, Path: "/w/f", Mode: 0o644, Append: true, XattrPrefix: "airlock.", Xattrs: map[string]string{"airlock.b": "", "airlock.a": "x\x00y"}, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize},
		execproto.Request{Op: execproto.OpRead, Path: "/w/f", Limit: 20 << 20, Head: true, Window: execproto.BulkWindow},
		execproto.Request{Op: execproto.OpCheckpoint, Since: "b-1", MarkOnly: true, Tree: execproto.TreeRoot, Port: 65535, Limit: -1, Recursive: true, MkdirAsRoot: true, NewPath: "/n", User: "root"},
		execproto.Result{Outcome: execproto.OutcomeExited, ExitCode: 3, WallMS: 12, UserMS: 1, SystemMS: 2, MaxRSSKB: 4096, Fingerprint: "abc"},
		execproto.Result{Outcome: execproto.OutcomeSignaled, ExitCode: -1, Signal: 9, Error: "no such file", Errno: "ENOENT", NotStarted: execproto.CommandNotFound},
		execproto.Result{Entries: []execproto.Entry{{Name: "a", Size: 1, Mode: math.MaxUint32, ModTime: -5, Link: "b", Owner: "u", Group: "g", Xattrs: map[string]string{"k": "v"}}, {}}, Disk: &execproto.DiskUsage{}, Checkpoint: &execproto.CheckpointResult{Baseline: "x", Full: true, Entries: 2, Bytes: 3, Walked: 4}},
		execproto.Error{Message: "protocol version 8, executor speaks 9"},
		execproto.Error{},
		execproto.Result{},
	}
}

// decodable returns a new value of m's type to decode into.
func decodable(m execproto.Message) execproto.Decodable {
	t := reflect.TypeOf(m)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return reflect.New(t).Interface().(execproto.Decodable)
}

// deref returns the value m holds or points to.
func deref(m any) any { return reflect.Indirect(reflect.ValueOf(m)).Interface() }

func TestMessageRoundTrip(t *testing.T) {
	for i, m := range messages() {
		t.Run(fmt.Sprintf("%d-%T", i, m), func(t *testing.T) {
			f, err := execproto.MessageFrame(execproto.TOpen, 3, m)
			if err != nil {
				t.Fatalf("MessageFrame = %v", err)
			}
			if err := f.Validate(); err != nil {
				t.Fatalf("MessageFrame(...).Validate() = %v", err)
			}
			got := decodable(m)
			if err := execproto.DecodeMessage(f.Payload, got); err != nil {
				t.Fatalf("DecodeMessage = %v\n% x", err, f.Payload)
			}
			if !reflect.DeepEqual(deref(got), deref(m)) {
				t.Errorf("round trip:\n got %+v\nwant %+v", deref(got), deref(m))
			}
			again, err := execproto.AppendMessage(nil, got.(execproto.Message))
			if err != nil || !bytes.Equal(again, f.Payload) {
				t.Errorf("encoding of the decoded message differs (%v):\n got % x\nwant % x", err, again, f.Payload)
			}
		})
	}
}

// fill sets every field reachable from v to a nonzero value: each string
// "s<n>", each integer n, each bool true, each list two elements, each map
// two entries, each pointer a filled value.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n) * -1000003)
	case reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(v.Index(0), n)
		fill(v.Index(1), n)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, n)
			fill(e, n)
			v.SetMapIndex(k, e)
		}
	default:
		panic("fill: a field of kind " + v.Kind().String())
	}
}

// TestMessageFieldsCovered fills every field of every message (and of the
// messages inside it) and requires the round trip to keep them all: a
// field added to a message but not to its codec fails here.
func TestMessageFieldsCovered(t *testing.T) {
	for _, m := range []execproto.Message{execproto.Hello{}, execproto.Setup{}, execproto.Ready{}, execproto.Request{}, execproto.Result{}, execproto.Error{}} {
		t.Run(fmt.Sprintf("%T", m), func(t *testing.T) {
			v := reflect.New(reflect.TypeOf(m))
			n := 0
			fill(v.Elem(), &n)
			b, err := execproto.AppendMessage(nil, v.Interface().(execproto.Message))
			if err != nil {
				t.Fatal(err)
			}
			got := decodable(m)
			if err := execproto.DecodeMessage(b, got); err != nil {
				t.Fatalf("DecodeMessage = %v", err)
			}
			if !reflect.DeepEqual(deref(got), v.Elem().Interface()) {
				t.Errorf("round trip lost a field:\n got %+v\nwant %+v", deref(got), v.Elem().Interface())
			}
		})
	}
}

func TestMessageFrameErrors(t *testing.T) {
	if _, err := execproto.MessageFrame(execproto.TSetup, 0, execproto.Setup{LayerPaths: []*execproto.HostPath{nil}}); err == nil {
		t.Error("MessageFrame(setup with a nil layer path) = nil error")
	}
	big := execproto.Request{Op: execproto.OpExec, Argv: []string{strings.Repeat("a", execproto.MaxPayload)}}
	if _, err := execproto.MessageFrame(execproto.TOpen, 3, big); err == nil {
		t.Error("MessageFrame(over MaxPayload) = nil error, want a size error")
	}
}

// TestDecodeMessageRejects feeds payloads that are not the one encoding of
// any message; each must be refused with ErrFrame.
func TestDecodeMessageRejects(t *testing.T) {
	v := byte(execproto.CodecVersion)
	tests := []struct {
		name string
		into execproto.Decodable
		in   []byte
	}{
		{"empty", &execproto.Request{}, nil},
		{"another form", &execproto.Request{}, []byte{2}},
		{"JSON request", &execproto.Request{}, []byte(`{"op":"exec"}`)},
		{"JSON hello of this version", &execproto.Hello{}, fmt.Appendf(nil, `{"version":%d}`, execproto.Version)},
		{"JSON hello, trailing data", &execproto.Hello{}, []byte(`{"version":8}x`)},
		{"unknown field", &execproto.Request{}, []byte{v, 28, 1}},
		{"unknown field 0", &execproto.Error{}, []byte{v, 0}},
		{"fields out of order", &execproto.Request{}, []byte{v, 4, 1, '/', 1, 1, 'x'}},
		{"repeated field", &execproto.Request{}, []byte{v, 1, 1, 'x', 1, 1, 'y'}},
		{"repeated flag", &execproto.Request{}, []byte{v, 6, 6}},
		{"empty string written", &execproto.Request{}, []byte{v, 1, 0}},
		{"zero written", &execproto.Result{}, []byte{v, 2, 0}},
		{"non-minimal varint", &execproto.Result{}, []byte{v, 2, 0x82, 0x00}},
		{"non-minimal field number", &execproto.Result{}, []byte{v, 0x82, 0x00, 2}},
		{"varint cut", &execproto.Result{}, []byte{v, 2, 0x82}},
		{"varint too long", &execproto.Result{}, append([]byte{v, 2}, bytes.Repeat([]byte{0xff}, 11)...)},
		{"string past the end", &execproto.Request{}, []byte{v, 1, 5, 'e', 'x'}},
		{"empty list", &execproto.Request{}, []byte{v, 2, 0}},
		{"list count past the end", &execproto.Request{}, []byte{v, 2, 3, 0, 0}},
		{"rows out of range", &execproto.Request{}, []byte{v, 7, 0x80, 0x80, 0x04}},
		{"mode out of range", &execproto.Request{}, []byte{v, 15, 0x80, 0x80, 0x80, 0x80, 0x10}},
		{"map keys out of order", &execproto.Request{}, []byte{v, 20, 2, 1, 'b', 0, 1, 'a', 0}},
		{"map key repeated", &execproto.Request{}, []byte{v, 20, 2, 1, 'a', 0, 1, 'a', 0}},
		{"empty struct field", &execproto.Setup{}, []byte{v, 19, 0}},
		{"nested unknown field", &execproto.Setup{}, []byte{v, 19, 2, 9, 1}},
		{"nested past its length", &execproto.Setup{}, []byte{v, 19, 2, 1, 3, 'a', 'b', 'c'}},
		{"nested cut", &execproto.Setup{}, []byte{v, 3, 9, 1}},
		{"nested zero", &execproto.Setup{}, []byte{v, 3, 2, 2, 0}},
		{"message list element cut", &execproto.Result{}, []byte{v, 12, 2, 0}},
		{"trailing zero byte", &execproto.Error{}, []byte{v, 1, 1, 'x', 0}},
		{"bool field given a value", &execproto.Ready{}, []byte{v, 3, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := execproto.DecodeMessage(tt.in, tt.into)
			if err == nil {
				t.Fatalf("DecodeMessage(% x) = nil, want an error (decoded %+v)", tt.in, deref(tt.into))
			}
			if !errors.Is(err, execproto.ErrFrame) {
				t.Errorf("DecodeMessage(% x) = %v, want it to wrap ErrFrame", tt.in, err)
			}
		})
	}
}

// TestHelloOfAnOlderVersion: an executor or host of protocol 8 or before
// says hello in JSON; the hello decodes, so that the version is what is
// reported, not a malformed frame.
func TestHelloOfAnOlderVersion(t *testing.T) {
	var h execproto.Hello
	if err := execproto.DecodeMessage([]byte(`{"version":8}`), &h); err != nil || h.Version != 8 {
		t.Fatalf("DecodeMessage(JSON hello 8) = %+v, %v", h, err)
	}
}

// normalize makes empty lists and maps nil: the binary form, like JSON's
// omitempty, does not tell them apart.
func normalize(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalize(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			normalize(v.Field(i))
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
		}
		for i := range v.Len() {
			normalize(v.Index(i))
		}
	case reflect.Map:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
		}
	}
}

// sameInBinary checks that the message v decoded from JSON survives the
// binary form unchanged (but for empty lists, which become absent).
func sameInBinary(t *testing.T, v any) {
	t.Helper()
	m, ok := v.(execproto.Message)
	if !ok {
		return
	}
	if s, ok := v.(execproto.Setup); ok && slices.Contains(s.LayerPaths, nil) {
		if _, err := execproto.AppendMessage(nil, m); err == nil {
			t.Fatal("AppendMessage(setup with a nil layer path) = nil error")
		}
		return
	}
	b, err := execproto.AppendMessage(nil, m)
	if err != nil {
		t.Fatalf("AppendMessage(%T) = %v", v, err)
	}
	got := decodable(m)
	if err := execproto.DecodeMessage(b, got); err != nil {
		t.Fatalf("DecodeMessage(AppendMessage(%T)) = %v\n% x", v, err, b)
	}
	want := reflect.New(reflect.TypeOf(v))
	want.Elem().Set(reflect.ValueOf(v))
	normalize(want)
	if !reflect.DeepEqual(deref(got), want.Elem().Interface()) {
		t.Fatalf("%T changed in the binary form:\n got %+v\nwant %+v", v, deref(got), want.Elem().Interface())
	}
}

// FuzzDecodeMessage decodes arbitrary bytes as each message with a binary
// form. DecodeMessage may refuse them (with ErrFrame only) but not panic;
// what it accepts must encode again to exactly the bytes read, since every
// message has one encoding, and must survive JSON as well.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range messages() {
		b, err := execproto.AppendMessage(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, into := range []execproto.Decodable{&execproto.Hello{}, &execproto.Setup{}, &execproto.Ready{}, &execproto.Request{}, &execproto.Result{}, &execproto.Error{}} {
			if err := execproto.DecodeMessage(b, into); err != nil {
				if !errors.Is(err, execproto.ErrFrame) {
					t.Fatalf("DecodeMessage(%T) = %v, want ErrFrame", into, err)
				}
				continue
			}
			if _, isHello := into.(*execproto.Hello); isHello && len(b) > 0 && b[0] == '{' {
				continue // an older version's JSON hello
			}
			again, err := execproto.AppendMessage(nil, into.(execproto.Message))
			if err != nil {
				t.Fatalf("AppendMessage(DecodeMessage(%T)) = %v", into, err)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("%T: encoding of the decoded message differs:\n got % x\nwant % x", into, again, b)
			}
			// What JSON carries of it decodes to the same message.
			j, err := json.Marshal(into)
			if err != nil {
				t.Fatalf("json.Marshal(%T) = %v", into, err)
			}
			back := decodable(into.(execproto.Message))
			if err := json.Unmarshal(j, back); err != nil {
				t.Fatalf("json.Unmarshal(%T) = %v", into, err)
			}
			jb, err := execproto.AppendMessage(nil, back.(execproto.Message))
			if err != nil {
				t.Fatal(err)
			}
			if validStrings(reflect.ValueOf(into)) && !bytes.Equal(jb, b) {
				t.Fatalf("%T through JSON and back encodes differently:\n got % x\nwant % x", into, jb, b)
			}
		}
	})
}

// validStrings reports whether every string in v is valid UTF-8 (JSON
// replaces what is not, so only such messages cross JSON unchanged).
func validStrings(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return utf8.ValidString(v.String())
	case reflect.Pointer:
		return v.IsNil() || validStrings(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if !validStrings(v.Field(i)) {
				return false
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			if !validStrings(v.Index(i)) {
				return false
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if !validStrings(it.Key()) || !validStrings(it.Value()) {
				return false
			}
		}
	}
	return true
}
