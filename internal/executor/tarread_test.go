package executor

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

type readEntry struct {
	h    tarHeader
	body string
}

func readAll(t testing.TB, b []byte) ([]readEntry, error) {
	t.Helper()
	tr := &tarReader{r: bytes.NewReader(b)}
	var out []readEntry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		body, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return out, err
		}
		out = append(out, readEntry{h: h, body: string(body)})
	}
}

// TestTarReaderFormats reads what archive/tar writes in each of its
// formats: the streams the host and users' tools produce.
func TestTarReaderFormats(t *testing.T) {
	mtime := time.Unix(1614834367, 123456789)
	long := strings.Repeat("n", 130) + "/" + strings.Repeat("é", 60)
	big := strings.Repeat("0123456789", 1000)
	for _, format := range []tar.Format{tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU} {
		t.Run(format.String(), func(t *testing.T) {
			hs := []tar.Header{
				{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755},
				{Name: "dir/f", Typeflag: tar.TypeReg, Mode: 0o4640, Size: int64(len(big)), Uid: 1000, Gid: 1000},
				{Name: "s", Typeflag: tar.TypeSymlink, Linkname: "dir/f"},
				{Name: "h", Typeflag: tar.TypeLink, Linkname: "dir/f"},
				{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o600},
				{Name: strings.Repeat("u", 90) + "/" + strings.Repeat("v", 90), Typeflag: tar.TypeReg, Mode: 0o600},
			}
			if format != tar.FormatUSTAR {
				hs = append(hs, tar.Header{Name: long, Typeflag: tar.TypeSymlink, Linkname: long})
			}
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for i := range hs {
				hs[i].Format = format
				hs[i].ModTime = mtime
				if format == tar.FormatUSTAR {
					hs[i].ModTime = mtime.Truncate(time.Second)
				}
				if err := tw.WriteHeader(&hs[i]); err != nil {
					t.Fatalf("%s: %v", hs[i].Name, err)
				}
				if hs[i].Size > 0 {
					if _, err := tw.Write([]byte(big)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := readAll(t, buf.Bytes())
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if len(got) != len(hs) {
				t.Fatalf("read %d entries, want %d", len(got), len(hs))
			}
			for i, want := range hs {
				g := got[i].h
				wantType := want.Typeflag
				if g.Name != want.Name || g.Linkname != want.Linkname || g.Type != wantType || g.Mode != want.Mode || g.UID != want.Uid {
					t.Errorf("entry %d = %+v, want %+v", i, g, want)
				}
				if g.ModTime != want.ModTime.Unix() {
					t.Errorf("%s: mtime %d, want %d", want.Name, g.ModTime, want.ModTime.Unix())
				}
				if format == tar.FormatPAX && g.ModTimeNsec != int64(want.ModTime.Nanosecond()) {
					t.Errorf("%s: nanoseconds %d, want %d", want.Name, g.ModTimeNsec, want.ModTime.Nanosecond())
				}
				if want.Size > 0 && got[i].body != big {
					t.Errorf("%s: body of %d bytes, want %d", want.Name, len(got[i].body), len(big))
				}
			}
		})
	}
}

// TestTarReaderOwnWriter reads back what the executor's own writer
// writes, PAX records included.
func TestTarReaderOwnWriter(t *testing.T) {
	hs := []tarHeader{
		{Name: "a", Type: tarReg, Mode: 0o644, Size: 3, ModTime: 5, ModTimeNsec: 7},
		{Name: strings.Repeat("x", 200), Type: tarSymlink, Linkname: strings.Repeat("y", 300), Mode: 0o777, ModTime: -20, ModTimeNsec: 500},
		{Name: "big-ids", Type: tarDir, Mode: 0o755, UID: 1 << 30, GID: 1 << 29, ModTime: 1 << 40},
	}
	var buf bytes.Buffer
	tw := &tarWriter{w: &buf}
	for _, h := range hs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte("abc")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(hs) {
		t.Fatalf("read %d entries, want %d", len(got), len(hs))
	}
	for i, want := range hs {
		if got[i].h != want {
			t.Errorf("entry %d = %+v, want %+v", i, got[i].h, want)
		}
	}
	if got[0].body != "abc" {
		t.Errorf("body %q", got[0].body)
	}
}

// TestTarReaderMalformed: each malformed stream is an error of the class
// errTarFormat, never a panic or a wrong entry.
func TestTarReaderMalformed(t *testing.T) {
	one := func(h tar.Header, body string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		h.Size = int64(len(body))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(body))
		_ = tw.Close()
		return buf.Bytes()
	}
	good := one(tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644}, strings.Repeat("z", 1000))
	pax := one(tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, PAXRecords: map[string]string{"comment": "c"}}, "x")
	mutate := func(b []byte, f func([]byte)) []byte {
		c := bytes.Clone(b)
		f(c)
		return c
	}
	// A header block with a valid checksum for whatever it holds.
	block := func(f func(b *[tarBlock]byte)) []byte {
		var b [tarBlock]byte
		copy(b[0:], "name")
		copy(b[257:], "ustar\x0000")
		f(&b)
		copy(b[148:156], "        ")
		var sum int64
		for _, c := range b {
			sum += int64(c)
		}
		octal(b[148:155], sum)
		return append(b[:], make([]byte, 2*tarBlock)...)
	}
	cases := map[string][]byte{
		"checksum":       mutate(good, func(b []byte) { b[0] ^= 1 }),
		"short header":   good[:300],
		"short body":     good[:tarBlock+100],
		"octal size":     block(func(b *[tarBlock]byte) { copy(b[124:], "9999") }),
		"negative b256":  block(func(b *[tarBlock]byte) { b[124] = 0xff }),
		"overflow b256":  block(func(b *[tarBlock]byte) { b[124] = 0x80; b[125] = 0xff; b[126] = 0xff }),
		"pax length":     mutate(pax, func(b []byte) { copy(b[tarBlock:], "99 ") }),
		"pax no key":     block(func(b *[tarBlock]byte) { b[156] = tarPAX; octal(b[124:136], 6) }),
		"huge pax":       block(func(b *[tarBlock]byte) { b[156] = tarPAX; octal(b[124:136], maxTarMeta+1) }),
		"sparse":         one(tar.Header{Name: "s", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"comment": "xxxxxxxxx"}, Format: tar.FormatPAX}, ""),
		"pax bad mtime":  one(tar.Header{Name: "m", Typeflag: tar.TypeReg, PAXRecords: map[string]string{"comment": "x"}, Format: tar.FormatPAX}, ""),
		"long name body": block(func(b *[tarBlock]byte) { b[156] = tarLongN; octal(b[124:136], 4000) }),
	}
	// "pax bad mtime": replace the comment record with a malformed mtime.
	cases["pax bad mtime"] = bytes.Replace(cases["pax bad mtime"], []byte("13 comment=x\n"), []byte("13 mtime=1.x\n"), 1)
	// archive/tar writes no GNU sparse records: put one where the comment is.
	cases["sparse"] = bytes.Replace(cases["sparse"], []byte("21 comment=xxxxxxxxx\n"), []byte("21 GNU.sparse.name=a\n"), 1)
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := readAll(t, in)
			if !errors.Is(err, errTarFormat) {
				t.Errorf("read = %v, want an errTarFormat", err)
			}
		})
	}
}

// FuzzTarReader: any input reads to an end or an error, within bounded
// memory, and what reads back from the writer's output is what was
// written.
func FuzzTarReader(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: strings.Repeat("p", 150), Typeflag: tar.TypeReg, Size: 2, Format: tar.FormatPAX})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.WriteHeader(&tar.Header{Name: strings.Repeat("g", 150), Typeflag: tar.TypeSymlink, Linkname: "t", Format: tar.FormatGNU})
	_ = tw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Add(make([]byte, 1024))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Read whole, bodies by Read; and in frames of 1 to 600 bytes
		// (the first byte says), bodies written from the frames
		// (writeBody, as the importer does): the same entries, bodies and
		// end.
		size := 1
		if len(b) > 0 {
			size += int(b[0]) * 600 / 256
		}
		whole := &tarReader{r: bytes.NewReader(b)}
		framed := &tarReader{r: &framedInput{rest: b, sizes: []int{size, 2*size + 1}}}
		for range 10000 {
			h, err := whole.Next()
			h2, err2 := framed.Next()
			if (err == nil) != (err2 == nil) || !reflect.DeepEqual(h, h2) {
				t.Fatalf("Next: %+v, %v read whole; %+v, %v in frames", h, err, h2, err2)
			}
			if err != nil {
				return
			}
			if h.Size < 0 || (h.Type != tarReg && h.Size != 0) {
				t.Fatalf("entry %+v: size for a non-file or negative", h)
			}
			var body, body2 bytes.Buffer
			_, err = io.Copy(&body, whole)
			n, err2 := framed.writeBody(&body2, nil)
			if n != int64(body2.Len()) || !bytes.Equal(body.Bytes(), body2.Bytes()) {
				t.Fatalf("entry %q: body of %d bytes read whole, %d (said %d) in frames, or they differ", h.Name, body.Len(), body2.Len(), n)
			}
			if err != nil || err2 != nil {
				return
			}
		}
	})
}

// framedInput yields rest in pieces of sizes, in turn, as Read and as a
// peeker (what the stream's inboxReader is).
type framedInput struct {
	rest  []byte
	sizes []int
	i     int
	cur   []byte
}

func (f *framedInput) peek() ([]byte, error) {
	if len(f.cur) == 0 {
		if len(f.rest) == 0 {
			return nil, io.EOF
		}
		n := min(f.sizes[f.i%len(f.sizes)], len(f.rest))
		f.i++
		// A copy, so a writer that kept the slice would be caught.
		f.cur, f.rest = bytes.Clone(f.rest[:n]), f.rest[n:]
	}
	return f.cur, nil
}

func (f *framedInput) consume(n int) { f.cur = f.cur[n:] }

func (f *framedInput) Read(p []byte) (int, error) {
	b, err := f.peek()
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	f.consume(n)
	return n, nil
}
