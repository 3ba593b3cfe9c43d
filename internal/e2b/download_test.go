package e2b_test

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/e2b"
)

// TestDownloadGzipsWhatCompresses reads files of several kinds with and
// without Accept-Encoding: gzip, as a client behind a proxy (a loopback
// one is not gzipped for: TestDownloadNoGzipNearby): only those that
// compress come gzipped, and every body is the file.
func TestDownloadGzipsWhatCompresses(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	random := make([]byte, 256<<10)
	_, _ = rand.Read(random)
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte("a"), 8<<10)...)
	tests := []struct {
		name string
		path string
		data []byte
		gzip bool
	}{
		{"text", "text.txt", []byte(strings.Repeat("the quick brown fox jumps over the lazy dog\n", 4096)), true},
		{"json without extension", "data", []byte(strings.Repeat(`{"k":"value","n":12345},`, 4096)), true},
		{"random bytes", "random.bin", random, false},
		{"random bytes named text", "random.txt", random, false},
		{"gzip by extension", "logs.gz", []byte(strings.Repeat("plain text in a .gz name\n", 400)), false},
		{"png by its first bytes", "picture", png, false},
		{"small text", "small.txt", []byte("hello\n"), false},
	}
	hd := envdHeaders(s)
	up := map[string]string{"Content-Type": "application/octet-stream"}
	for k, v := range hd {
		up[k] = v
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if res := h.do("POST", h.envdURL+"/files?path="+url.QueryEscape(tt.path), up, bytes.NewReader(tt.data)); res.status != 200 {
				t.Fatalf("upload: %s", res)
			}
			get := map[string]string{"Accept-Encoding": "gzip, deflate", "X-Forwarded-For": "203.0.113.7"}
			for k, v := range hd {
				get[k] = v
			}
			res := h.do("GET", h.envdURL+"/files?path="+url.QueryEscape(tt.path), get, nil)
			gzipped := res.header.Get("Content-Encoding") == "gzip"
			if res.status != 200 || gzipped != tt.gzip {
				t.Fatalf("read with gzip accepted: %d, Content-Encoding %q; want 200, gzipped %v", res.status, res.header.Get("Content-Encoding"), tt.gzip)
			}
			body := res.body
			if gzipped {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
				if len(res.body) >= len(tt.data) {
					t.Errorf("gzipped body is %d bytes, the file %d", len(res.body), len(tt.data))
				}
			}
			if !bytes.Equal(body, tt.data) {
				t.Errorf("read with gzip accepted: %d bytes differ from the %d written", len(body), len(tt.data))
			}
			res = h.do("GET", h.envdURL+"/files?path="+url.QueryEscape(tt.path), map[string]string{"Accept-Encoding": "identity", "X-Access-Token": s.Token, "E2b-Sandbox-Id": s.ID}, nil)
			if res.header.Get("Content-Encoding") != "" || !bytes.Equal(res.body, tt.data) {
				t.Errorf("read without gzip: Content-Encoding %q, %d bytes; want the file as it is", res.header.Get("Content-Encoding"), len(res.body))
			}
		})
	}
}

// TestDownloadNoGzipNearby: a text file is not gzipped for a client on
// this machine (the harness's requests come from loopback) that accepts
// gzip, and is for one a proxy says it forwarded, whichever header says
// so.
func TestDownloadNoGzipNearby(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	data := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog\n", 4096))
	hd := envdHeaders(s)
	up := map[string]string{"Content-Type": "application/octet-stream"}
	for k, v := range hd {
		up[k] = v
	}
	if res := h.do("POST", h.envdURL+"/files?path=text.txt", up, bytes.NewReader(data)); res.status != 200 {
		t.Fatalf("upload: %s", res)
	}
	tests := []struct {
		name, header, value string
		gzip                bool
	}{
		{"a loopback client", "", "", false},
		{"forwarded, X-Forwarded-For", "X-Forwarded-For", "203.0.113.7", true},
		{"forwarded, Forwarded", "Forwarded", "for=203.0.113.7;proto=https", true},
		{"forwarded, X-Real-Ip", "X-Real-Ip", "203.0.113.7", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			get := map[string]string{"Accept-Encoding": "gzip"}
			for k, v := range hd {
				get[k] = v
			}
			if tt.header != "" {
				get[tt.header] = tt.value
			}
			res := h.do("GET", h.envdURL+"/files?path=text.txt", get, nil)
			if gz := res.header.Get("Content-Encoding") == "gzip"; res.status != 200 || gz != tt.gzip {
				t.Errorf("read = %d, Content-Encoding %q; want gzipped %v", res.status, res.header.Get("Content-Encoding"), tt.gzip)
			}
			if !tt.gzip && !bytes.Equal(res.body, data) {
				t.Errorf("read = %d bytes, want the file's %d as they are", len(res.body), len(data))
			}
		})
	}
}

// TestDownloadStreams: a download is streamed from the sandbox: a large
// file arrives whole with its Content-Length; what is not a regular file
// (a FIFO, whose open would wait for a writer, a device) is a 400 at
// once; a file over the server's bound is a 413; a /proc file (size 0)
// is read to its end; and a file truncated while downloaded ends the
// body short, never as a body that looks whole.
func TestDownloadStreams(t *testing.T) {
	const maxFile = 32 << 20
	h := newHarness(t, harnessOptions{config: e2b.Config{MaxFile: maxFile}})
	s := h.create("alpha", nil)
	hd := envdHeaders(s)
	up := map[string]string{"Content-Type": "application/octet-stream"}
	maps.Copy(up, hd)
	data := make([]byte, 20<<20)
	_, _ = rand.Read(data)
	if res := h.do("POST", h.envdURL+"/files?path=large.bin", up, bytes.NewReader(data)); res.status != 200 {
		t.Fatalf("upload: %s", res)
	}
	if r := h.sh(s, "mkfifo fifo && head -c 33554433 /dev/zero > over && head -c 16777216 /dev/zero > shrink"); r.exit != 0 {
		t.Fatalf("setup: %+v", r)
	}
	res := h.do("GET", h.envdURL+"/files?path=large.bin", hd, nil)
	if res.status != 200 || res.header.Get("Content-Length") != strconv.Itoa(len(data)) || !bytes.Equal(res.body, data) {
		t.Errorf("read of 20 MiB = %d, Content-Length %q, %d bytes; want 200 and the file", res.status, res.header.Get("Content-Length"), len(res.body))
	}
	tests := []struct {
		path   string
		status int
		want   string
	}{
		{"fifo", 400, "not a regular file"},
		{"/dev/zero", 400, "not a regular file"},
		{"over", 413, "over the 33554432 bytes"},
		{"/home/user", 400, "directory"},
		{"/proc/version", 200, "Linux"},
	}
	for _, tt := range tests {
		res := h.do("GET", h.envdURL+"/files?path="+url.QueryEscape(tt.path), hd, nil)
		if res.status != tt.status || !strings.Contains(string(res.body), tt.want) {
			t.Errorf("read %s = %s, want %d with %q", tt.path, res, tt.status, tt.want)
		}
	}

	// Truncated mid-download: the body ends short of its Content-Length.
	req, _ := http.NewRequest("GET", h.envdURL+"/files?path=shrink", nil)
	for k, v := range hd {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil || resp.ContentLength != 16<<20 {
		t.Fatalf("first byte: %v, Content-Length %d", err, resp.ContentLength)
	}
	if r := h.sh(s, ": > shrink"); r.exit != 0 {
		t.Fatalf("truncate: %+v", r)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil {
		t.Errorf("a download truncated midway read as whole (%d more bytes, no error)", n)
	}
}
