package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// clientHello returns the first flight a real crypto/tls client sends for
// serverName.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		defer c.Close()
		tc := tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		_ = tc.Handshake() // fails when s closes; only the hello matters
	}()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf bytes.Buffer
	sni, raw, err := readClientHello(io.TeeReader(s, &buf))
	if err != nil {
		t.Fatalf("readClientHello of a crypto/tls hello: %v", err)
	}
	if want := serverName; net.ParseIP(want) == nil && sni != want {
		t.Fatalf("SNI = %q, want %q", sni, want)
	}
	if !bytes.Equal(raw, buf.Bytes()) {
		t.Fatalf("consumed %d bytes, returned %d: every byte read must be handed back", buf.Len(), len(raw))
	}
	return raw
}

func TestReadClientHello(t *testing.T) {
	hello := clientHello(t, "api.example.com")
	ipHello := clientHello(t, "127.0.0.1")
	tests := []struct {
		name    string
		in      []byte
		sni     string
		wantErr error
	}{
		{name: "sni", in: hello, sni: "api.example.com"},
		{name: "ip literal sends no sni", in: ipHello, sni: ""},
		{name: "hello then more", in: append(append([]byte{}, hello...), "early"...), sni: "api.example.com"},
		{name: "http", in: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), wantErr: errNotTLS},
		{name: "ssh", in: []byte("SSH-2.0-OpenSSH_9.6\r\n"), wantErr: errNotTLS},
		{name: "truncated", in: hello[:len(hello)/2], wantErr: io.ErrUnexpectedEOF},
		{name: "empty", in: nil, wantErr: io.EOF},
		// A record header claiming a huge handshake, then endless bytes.
		{name: "oversized", in: append([]byte{0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0xff, 0xff, 0xff}, make([]byte, 200<<10)...), wantErr: errNotTLS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sni, raw, err := readClientHello(bytes.NewReader(tt.in))
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("readClientHello = %q, nil; want error", sni)
				}
				if len(raw) > maxClientHello {
					t.Fatalf("read %d bytes, more than the %d bound", len(raw), maxClientHello)
				}
				return
			}
			if err != nil || sni != tt.sni {
				t.Fatalf("readClientHello = %q, %v; want %q", sni, err, tt.sni)
			}
			if !bytes.HasPrefix(tt.in, raw) {
				t.Fatalf("returned bytes are not a prefix of the input")
			}
		})
	}
}

// TestReadClientHelloBounded feeds a stream that never ends: the reader
// must stop at the bound instead of buffering without limit.
func TestReadClientHelloBounded(t *testing.T) {
	hdr := []byte{0x16, 0x03, 0x01, 0x3f, 0xff, 0x01, 0x00, 0xff, 0xff}
	r := io.MultiReader(bytes.NewReader(hdr), zeroReader{})
	_, raw, err := readClientHello(r)
	if err == nil {
		t.Fatal("readClientHello of an endless hello succeeded")
	}
	if len(raw) > maxClientHello {
		t.Fatalf("buffered %d bytes, bound is %d", len(raw), maxClientHello)
	}
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

func FuzzReadClientHello(f *testing.F) {
	f.Add(clientHello(f, "example.com"))
	f.Add(clientHello(f, "127.0.0.1"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		sni, raw, err := readClientHello(bytes.NewReader(b))
		if len(raw) > maxClientHello || !bytes.HasPrefix(b, raw) {
			t.Fatalf("returned %d bytes that are not a bounded prefix of the input", len(raw))
		}
		if err != nil && sni != "" {
			t.Fatalf("error %v with SNI %q", err, sni)
		}
		if err == nil && len(raw) == 0 {
			t.Fatal("success without reading anything")
		}
		if err != nil && !errors.Is(err, errNotTLS) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errHelloTooLarge) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}

// TestClientHelloSeed writes the seed corpus entry for a real hello when
// AIRLOCK_WRITE_SEEDS is set; it documents where the binary seed came from.
func TestClientHelloSeed(t *testing.T) {
	if os.Getenv("AIRLOCK_WRITE_SEEDS") == "" {
		t.Skip("set AIRLOCK_WRITE_SEEDS=1 to regenerate testdata/fuzz/FuzzReadClientHello/real_hello")
	}
	b := clientHello(t, "api.example.com")
	dir := filepath.Join("testdata", "fuzz", "FuzzReadClientHello")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := "go test fuzz v1\n[]byte(" + quoteBytes(b) + ")\n"
	if err := os.WriteFile(filepath.Join(dir, "real_hello"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func quoteBytes(b []byte) string {
	const hex = "0123456789abcdef"
	out := []byte{'"'}
	for _, c := range b {
		out = append(out, '\\', 'x', hex[c>>4], hex[c&15])
	}
	return string(append(out, '"'))
}
