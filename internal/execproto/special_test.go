package execproto_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/airlockrun/airlock/internal/execproto"
)

func TestSpecials(t *testing.T) {
	good := []execproto.Special{
		{Path: "d10/pipe", Mode: 0o644, UID: 1000, GID: 1000, MtimeSec: 1, MtimeNsec: 2, CtimeSec: -3, CtimeNsec: 999999999},
		{Path: "new\nline/\xffbad", Mode: 0o7777},
	}
	var b []byte
	for _, s := range good {
		b = execproto.AppendSpecial(b, s)
	}
	got, err := execproto.ParseSpecials(b)
	if err != nil || !reflect.DeepEqual(got, good) {
		t.Fatalf("ParseSpecials(round trip) = %+v, %v; want %+v", got, err, good)
	}
	if got, err := execproto.ParseSpecials(nil); err != nil || got != nil {
		t.Errorf("ParseSpecials(nothing) = %+v, %v; want none", got, err)
	}
	for _, tc := range []struct {
		name string
		s    execproto.Special
	}{
		{"empty path", execproto.Special{}},
		{"absolute", execproto.Special{Path: "/etc/x"}},
		{"dot dot", execproto.Special{Path: "a/../b"}},
		{"trailing slash", execproto.Special{Path: "a/"}},
		{"NUL", execproto.Special{Path: "a\x00b"}},
		{"mode", execproto.Special{Path: "a", Mode: 0o10644}},
		{"nanoseconds", execproto.Special{Path: "a", MtimeNsec: 1e9}},
		{"negative nanoseconds", execproto.Special{Path: "a", CtimeNsec: -1}},
	} {
		if _, err := execproto.ParseSpecials(execproto.AppendSpecial(nil, tc.s)); err == nil {
			t.Errorf("%s: ParseSpecials accepted %+v", tc.name, tc.s)
		}
	}
	whole := execproto.AppendSpecial(nil, good[0])
	for n := 1; n < len(whole); n++ {
		if _, err := execproto.ParseSpecials(whole[:n]); err == nil {
			t.Errorf("ParseSpecials accepted the first %d of %d bytes", n, len(whole))
		}
	}
}

// FuzzParseSpecials decodes arbitrary bytes as the special files stream
// the executor, beside untrusted code, sends the host: what it accepts
// re-encodes to the same bytes (one form), and passes the checks again.
func FuzzParseSpecials(f *testing.F) {
	f.Add(execproto.AppendSpecial(nil, execproto.Special{Path: "d10/pipe", Mode: 0o600, MtimeSec: 5}))
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		ss, err := execproto.ParseSpecials(b)
		if err != nil {
			return
		}
		var again []byte
		for _, s := range ss {
			again = execproto.AppendSpecial(again, s)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, read %x", again, b)
		}
	})
}
