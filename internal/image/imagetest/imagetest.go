// Package imagetest builds small OCI images in tests (from busybox-static,
// or from files given) and serves them from an in-process registry: go-
// containerregistry's pkg/registry behind TLS on loopback, with bearer-
// token auth, as a real registry's. Nothing leaves the machine.
//
// Only tests import it.
package imagetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlockrun/airlock/internal/testpki"
)

// File is one entry of a test layer.
type File struct {
	Name string
	// Mode holds the permission bits; Typeflag the kind (tar.TypeReg when
	// zero).
	Mode     int64
	Typeflag byte
	Body     []byte
	Link     string // a symbolic or hard link's target
	UID, GID int
}

// Tar returns files as an uncompressed tar.
func Tar(t testing.TB, files ...File) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Typeflag: f.Typeflag, Linkname: f.Link, Uid: f.UID, Gid: f.GID, ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(f.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar %s: %v", f.Name, err)
		}
		if _, err := tw.Write(f.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Layer returns a gzipped layer of files.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	b := Tar(t, files...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image stacks layers (lowest first) with cfg, for linux and arch
// ("" is this machine's).
func Image(t testing.TB, arch string, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, cfg
	if arch == "" {
		cf.Architecture = hostArch()
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// BusyboxPath is where Debian's busybox-static puts its binary.
const BusyboxPath = "/bin/busybox"

// Applets are the commands the busybox image has, each a link to busybox:
// every applet of Debian's busybox-static 1.35 (`busybox --list`).
var Applets = strings.Fields(`
		[ [[ acpid adjtimex ar arch arp arping ascii ash awk base64 basename bc blkdiscard blockdev brctl
		bunzip2 bzcat bzip2 cal cat chgrp chmod chown chroot chvt clear cmp cp cpio crc32 crond crontab
		cttyhack cut date dc dd deallocvt depmod devmem df diff dirname dmesg dnsdomainname dos2unix dpkg
		dpkg-deb du dumpkmap dumpleases echo ed egrep env expand expr factor fallocate false fatattr fdisk
		fgrep find findfs fold free freeramdisk fsfreeze fstrim ftpget ftpput getopt getty grep groups
		gunzip gzip halt head hexdump hostid hostname httpd hwclock i2cdetect i2cdump i2cget i2cset
		i2ctransfer id ifconfig ifdown ifup init insmod ionice ip ipcalc ipneigh kill killall klogd last
		less link linux32 linux64 linuxrc ln loadfont loadkmap logger login logname logread losetup ls lsmod
		lsscsi lzcat lzma lzop md5sum mdev microcom mim mkdir mkdosfs mke2fs mkfifo mknod mkpasswd mkswap
		mktemp modinfo modprobe more mount mt mv nameif nc netstat nl nologin nproc nsenter nslookup nuke od
		openvt partprobe passwd paste patch pidof ping ping6 pivot_root poweroff printf ps pwd rdate
		readlink realpath reboot renice reset resume rev rm rmdir rmmod route rpm rpm2cpio run-init
		run-parts sed seq setkeycodes setpriv setsid sh sha1sum sha256sum sha3sum sha512sum shred shuf sleep
		sort ssl_client start-stop-daemon stat strings stty su sulogin svc svok swapoff swapon switch_root
		sync sysctl syslogd tac tail tar taskset tc tee telnet telnetd test tftp time timeout top touch tr
		traceroute traceroute6 true truncate ts tty tunctl ubirename udhcpc udhcpd uevent umount uname
		uncompress unexpand uniq unix2dos unlink unlzma unshare unxz unzip uptime usleep uudecode uuencode
		vconfig vi w watch watchdog wc wget which who whoami xargs xxd xz xzcat yes zcat
`)

// BusyboxFiles are the files of the busybox image's one layer, laid out
// as a usr-merged Debian: busybox and its applets in /usr/bin (/bin, /sbin
// and /lib, /lib64 links into /usr), an /etc/passwd with root and user
// 1000, the directories a Debian root has, and the marker /IMAGE-MARKER.
// It skips t when busybox-static is not installed.
func BusyboxFiles(t testing.TB) []File {
	t.Helper()
	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		t.Skipf("busybox-static is not installed (%v): apt-get install busybox-static (make test-deps)", err)
	}
	files := []File{
		{Name: "usr/", Typeflag: tar.TypeDir},
		{Name: "usr/bin/", Typeflag: tar.TypeDir},
		{Name: "usr/bin/busybox", Mode: 0o755, Body: bb},
		{Name: "usr/sbin/", Typeflag: tar.TypeDir},
		{Name: "usr/lib/", Typeflag: tar.TypeDir},
		{Name: "usr/lib64/", Typeflag: tar.TypeDir},
		{Name: "usr/local/", Typeflag: tar.TypeDir},
		{Name: "bin", Typeflag: tar.TypeSymlink, Link: "usr/bin"},
		{Name: "sbin", Typeflag: tar.TypeSymlink, Link: "usr/sbin"},
		{Name: "lib", Typeflag: tar.TypeSymlink, Link: "usr/lib"},
		{Name: "lib64", Typeflag: tar.TypeSymlink, Link: "usr/lib64"},
		{Name: "etc/", Typeflag: tar.TypeDir},
		{Name: "etc/passwd", Body: []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/false\n")},
		{Name: "etc/group", Body: []byte("root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n")},
		{Name: "etc/ssl/", Typeflag: tar.TypeDir},
		{Name: "opt/", Typeflag: tar.TypeDir},
		{Name: "var/", Typeflag: tar.TypeDir},
		{Name: "home/", Typeflag: tar.TypeDir},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "root/", Typeflag: tar.TypeDir, Mode: 0o700},
		{Name: "IMAGE-MARKER", Body: []byte("from-the-image\n")},
	}
	for _, a := range Applets {
		files = append(files, File{Name: "usr/bin/" + a, Typeflag: tar.TypeSymlink, Link: "busybox"})
	}
	return files
}

// BusyboxConfig is the busybox image's config.
var BusyboxConfig = v1.Config{
	Env: []string{"PATH=/usr/bin:/bin", "IMAGE_ENV=from-image"},
	Cmd: []string{"/bin/sh", "-c", "echo hello from the image"},
}

// Busybox returns the busybox image (BusyboxFiles, BusyboxConfig).
func Busybox(t testing.TB) v1.Image {
	t.Helper()
	return Image(t, "", BusyboxConfig, Layer(t, BusyboxFiles(t)...))
}

// DockerArchive writes img to a file in dir as `docker save` does, tagged
// tag, and returns its path.
func DockerArchive(t testing.TB, dir string, img v1.Image, tag string) string {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(tag)+".tar")
	if err := tarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// Registry is an in-process registry served over TLS on loopback.
type Registry struct {
	// Host is its name and port (registry.test:PORT): a name, not an IP
	// address, because go-containerregistry speaks plain HTTP to
	// loopback addresses; Transport dials it on 127.0.0.1.
	Host      string
	Transport *http.Transport
	// User and Password are the one account the token service accepts.
	User, Password string
	// CA signed the registry's certificate.
	CA *testpki.CA

	realm  string // the token service's URL
	mu     sync.Mutex
	tokens map[string]bool          // guarded by mu
	tamper func(digest string) bool // guarded by mu
	cut    func(digest string) bool // guarded by mu
	blobs  atomic.Int64             // blob GETs served
}

// NewPlainRegistry is NewRegistry over plain HTTP on 127.0.0.1:PORT (its
// Host), as go-containerregistry speaks to a loopback address: for a
// client in another process, which cannot be given Transport.
func NewPlainRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{User: "tester", Password: randomHex(), tokens: map[string]bool{}}
	reg := registry.New(registry.Logger(discardLogger()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		r.serve(w, q, reg)
	}))
	t.Cleanup(srv.Close)
	r.Host = srv.Listener.Addr().String()
	r.realm = "http://" + r.Host + "/token"
	r.Transport = &http.Transport{}
	t.Cleanup(r.Transport.CloseIdleConnections)
	return r
}

// Tamper makes the registry flip a bit of every blob it serves from now on
// whose digest (sha256:HEX) match accepts (the length stays right); nil
// stops it.
func (r *Registry) Tamper(match func(digest string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tamper = match
}

// Cut makes the registry drop the connection halfway through every blob
// it serves from now on whose digest match accepts; nil stops it.
func (r *Registry) Cut(match func(digest string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = match
}

// BlobGets is how many blob downloads the registry served.
func (r *Registry) BlobGets() int64 { return r.blobs.Load() }

// NewRegistry starts a registry that wants a bearer token from its token
// service (/token, which takes User and Password as basic auth) for every
// request, and stops it when t ends.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	ca, err := testpki.New("imagetest CA")
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := ca.ServerConfig("registry.test")
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{User: "tester", Password: randomHex(), CA: ca, tokens: map[string]bool{}}
	reg := registry.New(registry.Logger(discardLogger()))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		r.serve(w, q, reg)
	}))
	srv.TLS = tlsConf
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	r.Host = "registry.test:" + port
	r.realm = "https://" + r.Host + "/token"
	addr := srv.Listener.Addr().String()
	r.Transport = &http.Transport{
		TLSClientConfig: tlsConf.Clone(),
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	r.Transport.TLSClientConfig.Certificates = nil
	r.Transport.TLSClientConfig.RootCAs = ca.Pool
	t.Cleanup(r.Transport.CloseIdleConnections)
	return r
}

func (r *Registry) serve(w http.ResponseWriter, q *http.Request, reg http.Handler) {
	if q.URL.Path == "/token" {
		user, pass, ok := q.BasicAuth()
		if !ok || user != r.User || pass != r.Password {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		tok := randomHex()
		r.mu.Lock()
		r.tokens[tok] = true
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"token": tok, "access_token": tok})
		return
	}
	tok, _ := strings.CutPrefix(q.Header.Get("Authorization"), "Bearer ")
	r.mu.Lock()
	ok, tamper, cut := r.tokens[tok], r.tamper, r.cut
	r.mu.Unlock()
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+r.realm+`",service="registry.test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
		return
	}
	if _, digest, isBlob := strings.Cut(q.URL.Path, "/blobs/"); isBlob && q.Method == http.MethodGet {
		r.blobs.Add(1)
		if tamper != nil && tamper(digest) {
			w = &flipWriter{ResponseWriter: w}
		}
		if cut != nil && cut(digest) {
			w = &cutWriter{ResponseWriter: w}
		}
	}
	reg.ServeHTTP(w, q)
}

// flipWriter flips the last bit of the first byte written.
type flipWriter struct {
	http.ResponseWriter
	done bool
}

func (f *flipWriter) Write(p []byte) (int, error) {
	if !f.done && len(p) > 0 {
		f.done = true
		q := append([]byte(nil), p...)
		q[0] ^= 1
		return f.ResponseWriter.Write(q)
	}
	return f.ResponseWriter.Write(p)
}

// cutWriter writes half of the Content-Length the handler set, then
// aborts the response: the client sees the connection drop.
type cutWriter struct {
	http.ResponseWriter
	left int64 // bytes still to write, set at the first write
	init bool
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if !c.init {
		c.init = true
		n, _ := strconv.ParseInt(c.Header().Get("Content-Length"), 10, 64)
		c.left = n / 2
	}
	if int64(len(p)) > c.left {
		_, _ = c.ResponseWriter.Write(p[:c.left])
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler)
	}
	c.left -= int64(len(p))
	return c.ResponseWriter.Write(p)
}

func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func hostArch() string { return runtime.GOARCH }
