package handoff

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// fill sets every field of v, a settable value, recursively to a nonzero
// value of its own (counted by n), so that a field the codec does not
// carry comes back zero.
func fill(t *testing.T, v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n) * 1000003)
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(fmt.Sprintf(`{"k":%d}`, *n)))
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{byte(*n), 0, 255})
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(t, s.Index(i), n)
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), n)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue
			}
			fill(t, v.Field(i), n)
		}
	default:
		t.Fatalf("fill: a field of kind %s (%s): teach fill and the codec", v.Kind(), v.Type())
	}
}

// TestCodecFieldsCovered fills every field of every message (and of the
// Spec and Result they carry) and holds the decoded message to it: a field
// added to sandbox.Spec, sandbox.Result or a handoff message and not to the
// codec fails here.
func TestCodecFieldsCovered(t *testing.T) {
	n := 0
	var req Request
	fill(t, reflect.ValueOf(&req).Elem(), &n)
	b, err := EncodeRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	var got Request
	if err := decodeRequest(b[frameHeader:], &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Errorf("request changed across the codec (a field it does not carry?):\n got %+v\nwant %+v", got, req)
	}

	var rep reply
	fill(t, reflect.ValueOf(&rep).Elem(), &n)
	if b, err = encodeReply(&rep); err != nil {
		t.Fatal(err)
	}
	var gotRep reply
	if err := decodeReply(b[frameHeader:], &gotRep); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotRep, rep) {
		t.Errorf("reply changed across the codec:\n got %+v\nwant %+v", gotRep, rep)
	}

	var c control
	fill(t, reflect.ValueOf(&c).Elem(), &n)
	if b, err = encodeControl(c); err != nil {
		t.Fatal(err)
	}
	var gotC control
	if err := decodeControl(b[frameHeader:], &gotC); err != nil || gotC != c {
		t.Errorf("control = %+v, %v, want %+v", gotC, err, c)
	}
}

// TestCodecRoundTrip holds messages of the shapes a caller sends to their
// own decoding, and each encoding to its frame's length.
func TestCodecRoundTrip(t *testing.T) {
	reqs := []struct {
		name string
		req  Request
	}{
		{"zero", Request{}},
		{"sandbox run's", Request{Spec: sandbox.Spec{Limits: sandbox.DefaultLimits}, Argv: []string{"/bin/true"}, Timeout: time.Hour, MaxOutput: 1 << 20}},
		{"stdin and env", Request{Spec: sandbox.Spec{Env: []string{"A=1", ""}, Limits: sandbox.Limits{CPUs: 0.5}}, Argv: []string{"sh", "-c", ""}, Stdin: true}},
		{"a prepare of no fields", Request{Argv: []string{"x"}, Prepare: &Prepare{}}},
		{"a template's prepare", Request{Argv: []string{"x"}, Prepare: &Prepare{How: json.RawMessage(`{"start":["sleep","1"]}`), Pool: "t n 1 abc", Size: 2}}},
		{"negative values", Request{Spec: sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: -1, CPUs: math.Copysign(0, -1)}, TTL: -time.Second}, Timeout: -1, MaxOutput: math.MinInt64}},
		{"mounts and CAs", Request{Spec: sandbox.Spec{Mounts: []sandbox.Mount{{Source: "/a", Target: "/b", ReadOnly: true}, {}}, TrustedCAs: []byte("-----BEGIN CERTIFICATE-----\n")}}},
	}
	for _, tc := range reqs {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeRequest(&tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if n := binary.BigEndian.Uint32(b); int(n) != len(b)-frameHeader {
				t.Fatalf("frame length %d, payload %d", n, len(b)-frameHeader)
			}
			p, err := readFrame(bytes.NewReader(b), maxRequest)
			if err != nil {
				t.Fatal(err)
			}
			var got Request
			if err := decodeRequest(p, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.req) {
				t.Errorf("got %+v\nwant %+v", got, tc.req)
			}
			if math.Signbit(got.Spec.Limits.CPUs) != math.Signbit(tc.req.Spec.Limits.CPUs) {
				t.Errorf("CPUs %v, want %v", got.Spec.Limits.CPUs, tc.req.Spec.Limits.CPUs)
			}
		})
	}
	for _, rep := range []reply{{}, {Started: true}, {Error: "no"}, {Result: &sandbox.Result{}}, {Result: &sandbox.Result{Outcome: sandbox.OutcomeExited, ExitCode: -3, Usage: sandbox.Usage{Wall: time.Millisecond}}}} {
		b, err := encodeReply(&rep)
		if err != nil {
			t.Fatal(err)
		}
		var got reply
		if err := decodeReply(b[frameHeader:], &got); err != nil || !reflect.DeepEqual(got, rep) {
			t.Errorf("reply %+v: got %+v, %v", rep, got, err)
		}
	}
}

// TestDecodeRejects: every other encoding of a message is refused, and a
// frame's length is not trusted.
func TestDecodeRejects(t *testing.T) {
	req := func(b ...byte) []byte { return append([]byte{1}, b...) }
	cases := []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"another form", []byte{2}},
		{"JSON", []byte(`{"argv":["x"]}`)},
		{"unknown field", req(7)},
		{"fields out of order", req(5, 3, 2)},
		{"a repeated field", req(5, 5)},
		{"an empty string list", req(2, 0)},
		{"a zero integer", req(3, 0)},
		{"an over-long varint", req(3, 0x82, 0x00)},
		{"a length past the end", req(2, 1, 9, 'a')},
		{"bytes after the last field", req(5, 0)},
		{"an empty spec", req(1, 0)},
		{"an unknown spec field", req(1, 1, 21)},
		{"an empty spec string", req(1, 2, 1, 0)},
		{"an empty limits", req(1, 2, 12, 0)},
		{"a NaN of CPUs", append(req(1, 12, 12, 10, 3), binary.AppendUvarint(nil, math.Float64bits(math.NaN()))...)},
		{"an infinity of CPUs", append(req(1, 12, 12, 10, 3), binary.AppendUvarint(nil, math.Float64bits(math.Inf(1)))...)},
		{"a prepare's How not JSON", req(6, 4, 1, 2, '{', 'x')},
		{"a prepare field out of order", req(6, 4, 2, 1, 'p', 1)[:8]},
		{"an empty mount list", req(1, 2, 10, 0)},
		{"an unknown mount field", req(1, 5, 10, 1, 2, 3, 9)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r Request
			if err := decodeRequest(tc.p, &r); !errors.Is(err, errMessage) {
				t.Errorf("decodeRequest(% x) = %v, want errMessage", tc.p, err)
			}
		})
	}
	var rep reply
	for _, p := range [][]byte{{1, 2, 0x80}, {1, 1, 1}, {1, 3, 0}, {1, 2, 2, 6, 0}} {
		if err := decodeReply(p, &rep); !errors.Is(err, errMessage) {
			t.Errorf("decodeReply(% x) = %v, want errMessage", p, err)
		}
	}

	frames := []struct {
		name string
		b    []byte
		want error
	}{
		{"over the bound", []byte{0, 0, 1, 0}, errMessage},
		{"a huge length", []byte{0xff, 0xff, 0xff, 0xff, 1}, errMessage},
		{"cut short", []byte{0, 0, 0, 9, 1, 2}, errMessage},
		{"a cut header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"nothing", nil, io.EOF},
	}
	for _, tc := range frames {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := readFrame(bytes.NewReader(tc.b), 255); !errors.Is(err, tc.want) {
				t.Errorf("readFrame(% x) = %v, want %v", tc.b, err, tc.want)
			}
		})
	}
}

// FuzzDecodeHandoff reads a frame of arbitrary bytes as a request, a
// reply or a control message (the first byte says which). Nothing may
// panic, an error is errMessage or the end of the input, and an accepted
// message re-encodes to exactly the frame it was read from: one encoding
// per message, so the two ends cannot read one frame differently.
func FuzzDecodeHandoff(f *testing.F) {
	seeds := []any{
		Request{Spec: sandbox.Spec{Limits: sandbox.DefaultLimits}, Argv: []string{"/bin/true"}, Timeout: time.Hour, MaxOutput: 1 << 20},
		Request{Spec: sandbox.Spec{Workspace: "/w", WorkspaceMode: "rw", Mounts: []sandbox.Mount{{Source: "/a", Target: "/b", ReadOnly: true}}, Account: sandbox.Account{Name: "u"}}, Argv: []string{"sh"}, Stdin: true, Prepare: &Prepare{How: json.RawMessage(`[1]`), Pool: "p", Size: 1}},
		reply{Started: true},
		reply{Result: &sandbox.Result{Outcome: sandbox.OutcomeExited, ExitCode: 3, Usage: sandbox.Usage{Wall: time.Second, MaxRSS: 4096}}},
		reply{Error: "sandbox start failed"},
		Request{Words: []string{"--", "sh", "-c", "", "x"}},
		Request{Words: []string{"-i", "--workspace", ".", "--", "cat"}, Stdin: true, Dir: "/home/u/src"},
		reply{Started: true, Stdin: true},
		reply{Reported: true, Status: 3},
		reply{Reported: true},
		control{Signal: 15},
	}
	for _, s := range seeds {
		var b []byte
		var err error
		var kind byte
		switch m := s.(type) {
		case Request:
			b, err = EncodeRequest(&m)
		case reply:
			kind = 1
			b, err = encodeReply(&m)
		case control:
			kind = 2
			b, err = encodeControl(m)
		}
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{kind}, b...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		kind, frame := in[0]%3, in[1:]
		p, err := readFrame(bytes.NewReader(frame), maxRequest)
		if err != nil {
			if !errors.Is(err, errMessage) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("readFrame = %v", err)
			}
			return
		}
		read := frame[:frameHeader+len(p)]
		var again []byte
		switch kind {
		case 0:
			var r Request
			if err = decodeRequest(p, &r); err == nil {
				again, err = EncodeRequest(&r)
				if err != nil {
					t.Fatalf("EncodeRequest(decodeRequest(x)) = %v", err)
				}
			}
		case 1:
			var r reply
			if err = decodeReply(p, &r); err == nil {
				again, _ = encodeReply(&r)
			}
		case 2:
			var c control
			if err = decodeControl(p, &c); err == nil {
				again, _ = encodeControl(c)
			}
		}
		if err != nil {
			if !errors.Is(err, errMessage) {
				t.Fatalf("decode = %v, want errMessage", err)
			}
			return
		}
		if !bytes.Equal(again, read) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", again, read)
		}
	})
}

// TestReadFrameGrows: a frame's length does not size an allocation ahead
// of its bytes (a caller announcing 8 MiB and sending 3 bytes makes the
// host allocate about what it sent).
func TestReadFrameGrows(t *testing.T) {
	b := []byte{0, 0x80, 0, 0, 1, 2, 3}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		if _, err := readFrame(bytes.NewReader(b), maxRequest); err == nil || !strings.Contains(err.Error(), "cut short") {
			t.Fatalf("readFrame = %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 100*64<<10 {
		t.Errorf("100 cut-short frames of 8 MiB allocated %d bytes: the length sized the buffer", grown)
	}
}
