package executor

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// readBack parses w's output with the standard library's reader.
func readBack(t *testing.T, b []byte) []*tar.Header {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var hs []*tar.Header
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs
		}
		if err != nil {
			t.Fatalf("archive/tar cannot read our stream: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("read body of %q: %v", h.Name, err)
		}
		if int64(len(body)) != h.Size {
			t.Fatalf("%q: body %d bytes, header says %d", h.Name, len(body), h.Size)
		}
		hs = append(hs, h)
	}
}

func TestTarWriterRoundTrip(t *testing.T) {
	long := strings.Repeat("d/", 80) + "file.txt"
	tests := []struct {
		h    tarHeader
		body string
	}{
		{tarHeader{Name: "dir/", Type: tarDir, Mode: 0o755, UID: 1000, GID: 1000, ModTime: 1700000000}, ""},
		{tarHeader{Name: "dir/a.txt", Type: tarReg, Mode: 0o644, UID: 1000, GID: 1000, Size: 5, ModTime: 1700000000}, "hello"},
		{tarHeader{Name: "empty", Type: tarReg, Mode: 0o600, Size: 0}, ""},
		{tarHeader{Name: "block", Type: tarReg, Mode: 0o600, Size: 512}, strings.Repeat("x", 512)},
		{tarHeader{Name: "link", Type: tarSymlink, Linkname: "../" + long, Mode: 0o777}, ""},
		{tarHeader{Name: long, Type: tarReg, Mode: 0o4755, Size: 3}, "abc"},
		{tarHeader{Name: "ünïcode-名前", Type: tarReg, Mode: 0o644, Size: 1}, "u"},
		{tarHeader{Name: "bigid", Type: tarReg, Mode: 0o644, UID: 1 << 30, GID: 1<<30 + 7}, ""},
		{tarHeader{Name: "old", Type: tarReg, Mode: 0o644, ModTime: -5}, ""},
		{tarHeader{Name: "ns", Type: tarReg, Mode: 0o644, ModTime: 1700000000, ModTimeNsec: 123456789}, ""},
		{tarHeader{Name: "ns-small", Type: tarDir, Mode: 0o755, ModTime: 1, ModTimeNsec: 1}, ""},
		{tarHeader{Name: "old-ns", Type: tarReg, Mode: 0o644, ModTime: -2, ModTimeNsec: 500000000}, ""},
		{tarHeader{Name: "just-before-epoch", Type: tarReg, Mode: 0o644, ModTime: -1, ModTimeNsec: 999999999}, ""},
		{tarHeader{Name: "far", Type: tarReg, Mode: 0o644, ModTime: 1 << 40, ModTimeNsec: 7}, ""},
		{tarHeader{Name: "hard", Type: tarHardlink, Linkname: "dir/a.txt", Mode: 0o644}, ""},
		{tarHeader{Name: "fifo", Type: tarFIFO, Mode: 0o600, ModTime: 1700000000}, ""},
		{tarHeader{Name: "line\nbreak\xff", Type: tarReg, Mode: 0o644, Size: 1}, "n"},
	}
	var buf bytes.Buffer
	tw := &tarWriter{w: &buf}
	for _, tt := range tests {
		if err := tw.WriteHeader(tt.h); err != nil {
			t.Fatalf("WriteHeader(%q): %v", tt.h.Name, err)
		}
		if _, err := io.WriteString(tw, tt.body); err != nil {
			t.Fatalf("write %q: %v", tt.h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%512 != 0 {
		t.Errorf("stream is %d bytes, not whole blocks", buf.Len())
	}
	hs := readBack(t, buf.Bytes())
	if len(hs) != len(tests) {
		t.Fatalf("read %d entries, wrote %d", len(hs), len(tests))
	}
	for i, tt := range tests {
		h := hs[i]
		if h.Name != tt.h.Name || h.Linkname != tt.h.Linkname || h.Typeflag != tt.h.Type ||
			h.Mode != tt.h.Mode || h.Uid != tt.h.UID || h.Gid != tt.h.GID || h.Size != tt.h.Size ||
			!h.ModTime.Equal(time.Unix(tt.h.ModTime, tt.h.ModTimeNsec)) {
			t.Errorf("entry %d: read %+v, wrote %+v", i, h, tt.h)
		}
	}
}

func TestTarWriterBodyMismatch(t *testing.T) {
	tw := &tarWriter{w: io.Discard}
	if err := tw.WriteHeader(tarHeader{Name: "f", Type: tarReg, Size: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("abc")); !errors.Is(err, errTarBody) {
		t.Errorf("writing 3 bytes into a 2-byte entry: err = %v, want errTarBody", err)
	}
	if _, err := tw.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); !errors.Is(err, errTarBody) {
		t.Errorf("closing with a short body: err = %v, want errTarBody", err)
	}
}

func FuzzTarWriter(f *testing.F) {
	f.Add("a.txt", "", byte(tarReg), int64(0o644), 1000, int64(1700000000), int64(0), []byte("hello"))
	f.Add(strings.Repeat("x", 150), strings.Repeat("y", 120), byte(tarSymlink), int64(0o777), 0, int64(-3), int64(5), []byte(nil))
	f.Add("dir/", "", byte(tarDir), int64(0o755), 1<<30, int64(1<<34), int64(999999999), []byte(nil))
	f.Add("b", "a.txt", byte(tarHardlink), int64(0o644), 0, int64(0), int64(1), []byte(nil))
	f.Fuzz(func(t *testing.T, name, link string, typ byte, mode int64, id int, sec, nsec int64, body []byte) {
		switch typ {
		case tarReg, tarDir, tarSymlink, tarHardlink, tarFIFO:
		default:
			return
		}
		if name == "" || strings.ContainsRune(name, 0) || strings.ContainsRune(link, 0) || mode < 0 || id < 0 {
			return
		}
		// Times archive/tar can hold (time.Time's range in seconds).
		sec %= 1 << 60
		nsec %= 1e9
		if nsec < 0 {
			nsec = -nsec
		}
		h := tarHeader{Name: name, Linkname: link, Type: typ, Mode: mode & 0o7777, UID: id, GID: id, ModTime: sec, ModTimeNsec: nsec}
		if typ == tarReg {
			h.Size = int64(len(body))
		} else {
			body = nil
		}
		if typ != tarSymlink && typ != tarHardlink {
			h.Linkname = ""
		}
		var buf bytes.Buffer
		tw := &tarWriter{w: &buf}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		hs := readBack(t, buf.Bytes())
		if len(hs) != 1 || hs[0].Name != h.Name || hs[0].Linkname != h.Linkname || hs[0].Size != h.Size || hs[0].Uid != id ||
			!hs[0].ModTime.Equal(time.Unix(sec, nsec)) {
			t.Fatalf("round trip: wrote %+v, read %+v", h, hs)
		}
	})
}
