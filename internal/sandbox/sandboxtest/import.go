package sandboxtest

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// testImport checks sandbox.Importer: a tar stream in every format the
// writers in use produce is unpacked faithfully, and a hostile one fails
// naming its entry and writes nothing outside the directory.
func (s *suite) testImport(t *testing.T) {
	importer := func(t *testing.T) (sandbox.Sandbox, sandbox.Importer) {
		sb := s.create(t, sandbox.Spec{})
		im, ok := sb.(sandbox.Importer)
		if !ok {
			t.Skip("the backend's sandboxes do not import tar streams")
		}
		return sb, im
	}
	mtime := time.Date(2021, 3, 4, 5, 6, 7, 123456789, time.UTC)
	long := strings.Repeat("d", 120) + "/" + strings.Repeat("f", 150)

	for _, format := range []tar.Format{tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU} {
		t.Run("Faithful/"+format.String(), func(t *testing.T) {
			t.Parallel()
			sb, im := importer(t)
			entries := []tarEntry{
				{h: tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
				{h: tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Mode: 0o640}, body: "alpha\n"},
				{h: tar.Header{Name: "bin/run", Typeflag: tar.TypeReg, Mode: 0o755}, body: "#!/bin/sh\necho ran\n"},
				{h: tar.Header{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o555}},
				{h: tar.Header{Name: "ro/inside", Typeflag: tar.TypeReg, Mode: 0o444}, body: "in a read-only dir\n"},
				{h: tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "a.txt"}},
				{h: tar.Header{Name: "dangling", Typeflag: tar.TypeSymlink, Linkname: "/nowhere/at/all"}},
				{h: tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "a.txt"}},
				{h: tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o600}},
				{h: tar.Header{Name: "empty/", Typeflag: tar.TypeDir, Mode: 0o700}},
			}
			if format != tar.FormatUSTAR {
				entries = append(entries, tarEntry{h: tar.Header{Name: long, Typeflag: tar.TypeReg, Mode: 0o600}, body: "long\n"})
			}
			for i := range entries {
				entries[i].h.ModTime = mtime
				entries[i].h.Format = format
				if format == tar.FormatUSTAR {
					entries[i].h.ModTime = mtime.Truncate(time.Second)
				}
			}
			mustSh(t, sb, "mkdir -p /workspace/into && echo old > /workspace/into/a.txt && ln -s /etc /workspace/into/link")
			if err := im.Import(opCtx(t), "/workspace/into", bytes.NewReader(makeTar(t, entries))); err != nil {
				t.Fatalf("Import = %v", err)
			}
			got := mustSh(t, sb, `cd /workspace/into && cat a.txt ro/inside && ./bin/run && readlink link && readlink dangling && test a.txt -ef hard && echo same`)
			if want := "alpha\nin a read-only dir\nran\na.txt\n/nowhere/at/all\nsame\n"; got != want {
				t.Errorf("the unpacked tree:\n%s\nwant:\n%s", got, want)
			}
			modes := map[string]fs.FileMode{
				"a.txt": 0o640, "bin/run": 0o755, "ro": fs.ModeDir | 0o555, "ro/inside": 0o444, "link": fs.ModeSymlink | 0o777,
				"fifo": fs.ModeNamedPipe | 0o600, "empty": fs.ModeDir | 0o700, "hard": 0o640,
			}
			for name, want := range modes {
				fi, err := sb.Stat(opCtx(t), "/workspace/into/"+name)
				if err != nil {
					t.Errorf("Stat(%s) = %v", name, err)
					continue
				}
				if fi.Mode != want {
					t.Errorf("%s: mode %v, want %v", name, fi.Mode, want)
				}
				if wantTime := mtime.Truncate(time.Second); format == tar.FormatPAX && !fi.ModTime.Equal(mtime) ||
					format != tar.FormatPAX && !fi.ModTime.Equal(wantTime) {
					t.Errorf("%s: time %v, want %v (only PAX keeps nanoseconds)", name, fi.ModTime, wantTime)
				}
			}
			if format != tar.FormatUSTAR {
				if got := mustSh(t, sb, "cat /workspace/into/"+long); got != "long\n" {
					t.Errorf("the long-named file = %q", got)
				}
			}
		})
	}

	hostile := []struct {
		name    string
		entries []tarEntry
		errHas  string
		// check is a shell test, run after the import, that must print ok.
		check string
	}{
		{
			"DotDot",
			[]tarEntry{{h: tar.Header{Name: "../escaped", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"}},
			`"..`, `test ! -e /workspace/escaped && echo ok`,
		},
		{
			"DotDotInside",
			[]tarEntry{{h: tar.Header{Name: "a/../../escaped", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"}},
			`"..`, `test ! -e /workspace/escaped && echo ok`,
		},
		{"SymlinkParent", []tarEntry{
			{h: tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}},
			{h: tar.Header{Name: "out/planted", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"},
		}, "out/planted", `test ! -e /tmp/planted && echo ok`},
		{"SymlinkParentRelative", []tarEntry{
			{h: tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: ".."}},
			{h: tar.Header{Name: "up/planted", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"},
		}, "up/planted", `test ! -e /workspace/planted && echo ok`},
		{
			"HardLinkOut",
			[]tarEntry{{h: tar.Header{Name: "pw", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}}},
			"hard link", `test ! -e /workspace/into/pw && echo ok`,
		},
		{"HardLinkThroughSymlink", []tarEntry{
			{h: tar.Header{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/etc"}},
			{h: tar.Header{Name: "pw", Typeflag: tar.TypeLink, Linkname: "etc/passwd"}},
		}, "etc/passwd", `test ! -e /workspace/into/pw && echo ok`},
		{
			"Device",
			[]tarEntry{{h: tar.Header{Name: "mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1, Mode: 0o666}}},
			"device", `test ! -e /workspace/into/mem && echo ok`,
		},
		{
			"RootAsFile",
			[]tarEntry{{h: tar.Header{Name: ".", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"}},
			"root", `test -d /workspace/into && echo ok`,
		},
	}
	for _, tc := range hostile {
		t.Run("Hostile/"+tc.name, func(t *testing.T) {
			t.Parallel()
			sb, im := importer(t)
			mustSh(t, sb, "mkdir -p /workspace/into")
			err := im.Import(opCtx(t), "/workspace/into", bytes.NewReader(makeTar(t, tc.entries)))
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Import = %v, want an error naming %q", err, tc.errHas)
			}
			if got := mustSh(t, sb, tc.check); got != "ok\n" {
				t.Errorf("after the refused import, %q printed %q", tc.check, got)
			}
			// The sandbox goes on serving after a refusal.
			if got := mustSh(t, sb, "echo alive"); got != "alive\n" {
				t.Errorf("after the refusal: %q", got)
			}
		})
	}

	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()
		sb, im := importer(t)
		mustSh(t, sb, "mkdir -p /workspace/into")
		good := makeTar(t, []tarEntry{{h: tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644}, body: strings.Repeat("z", 2000)}})
		bad := bytes.Clone(good)
		bad[148] ^= 1 // the checksum
		for name, in := range map[string][]byte{"checksum": bad, "truncated": good[:1024], "garbage": bytes.Repeat([]byte("not a tar "), 100)} {
			if err := im.Import(opCtx(t), "/workspace/into", bytes.NewReader(in)); err == nil {
				t.Errorf("Import(%s) = nil, want an error", name)
			}
		}
		if got := mustSh(t, sb, "echo alive"); got != "alive\n" {
			t.Errorf("after malformed streams: %q", got)
		}
	})
}

type tarEntry struct {
	h    tar.Header
	body string
}

func makeTar(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.h
		h.Size = int64(len(e.body))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %s: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatalf("tar body %s: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ImportFile imports into sb's /workspace a tar stream of one regular file,
// name (mode 0644), holding body: a restore of a one-file tree. Backend
// tests outside the suite use it too.
func ImportFile(t *testing.T, sb sandbox.Sandbox, name, body string) {
	t.Helper()
	im, ok := sb.(sandbox.Importer)
	if !ok {
		t.Fatalf("%s's sandboxes do not import tar streams", sb.Info().Backend)
	}
	stream := makeTar(t, []tarEntry{{h: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}, body: body}})
	if err := im.Import(opCtx(t), "/workspace", bytes.NewReader(stream)); err != nil {
		t.Fatalf("Import = %v", err)
	}
}
