package spawn

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// exchange sends one request with fds and returns the reply and the pidfd
// that came with it (-1 if none).
func exchange(t *testing.T, conn int, msg []byte, fds []int) (execproto.Spawned, int) {
	t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(conn, msg, oob, nil, 0); err != nil {
		t.Fatalf("send: %v", err)
	}
	buf := make([]byte, 4096)
	rb := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(conn, buf, rb, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		t.Fatalf("reply: %d bytes, %v", n, err)
	}
	var r execproto.Spawned
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		t.Fatalf("reply %q: %v", buf[:n], err)
	}
	pidfd := -1
	got, _ := rights(rb[:oobn])
	for _, fd := range got {
		if pidfd < 0 {
			pidfd = fd
		} else {
			t.Errorf("reply carried more than one descriptor")
			unix.Close(fd)
		}
	}
	return r, pidfd
}

// TestServe: bad requests are answered with an error and change nothing;
// a good one starts the process and hands back its pidfd; the spawner ends
// when its host closes the socket.
func TestServe(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	host := fds[0]
	// As inherited from the host: without close-on-exec.
	if _, err := unix.FcntlInt(uintptr(fds[1]), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(fds[1]) }()

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	null := int(devnull.Fd())
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// The child lists its descriptors: the spawner's socket must not be
	// among them.
	good := func(r *execproto.Spawn) {
		*r = execproto.Spawn{
			Path: "/bin/sh", Args: []string{"sh", "-c", "echo hi >&3; for f in /proc/self/fd/*; do readlink $f; done >&3"},
			Files: []int{3}, CgroupFile: -1,
		}
	}
	conn, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fds[1]))
	if err != nil {
		t.Fatal(err)
	}
	many := make([]int, execproto.MaxSpawnFiles+1)
	for i := range many {
		many[i] = null
	}
	for _, tt := range []struct {
		name string
		msg  string
		edit func(*execproto.Spawn)
		fds  []int
		want string
	}{
		{name: "not JSON", msg: "{", fds: []int{null}, want: "request"},
		{name: "no binary", edit: func(r *execproto.Spawn) { r.Path = "" }, fds: []int{null}, want: "no binary"},
		{name: "descriptor count", edit: func(r *execproto.Spawn) { r.Files = []int{3, 4} }, fds: []int{null}, want: "child descriptors"},
		{name: "descriptor twice", edit: func(r *execproto.Spawn) { r.Files = []int{3, 3} }, fds: []int{null, null}, want: "twice"},
		{name: "descriptor out of range", edit: func(r *execproto.Spawn) { r.Files = []int{1000} }, fds: []int{null}, want: "out of range"},
		{name: "cgroup index", edit: func(r *execproto.Spawn) { r.CgroupFile = 5 }, fds: []int{null}, want: "cgroup"},
		{name: "too many descriptors", edit: func(r *execproto.Spawn) { r.Files = nil }, fds: many, want: "truncated"},
		{name: "late ids without a user namespace", edit: func(r *execproto.Spawn) { r.LateIDs = true }, fds: []int{null}, want: "late ids"},
		{name: "late ids with other ids", edit: func(r *execproto.Spawn) {
			r.LateIDs, r.Cloneflags, r.Cred = true, unix.CLONE_NEWUSER, &execproto.Cred{UID: 1000}
		}, fds: []int{null}, want: "late ids"},
		{name: "missing binary", edit: func(r *execproto.Spawn) { r.Path = "/nonexistent" }, fds: []int{null}, want: "/nonexistent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			msg := []byte(tt.msg)
			if tt.edit != nil {
				var r execproto.Spawn
				good(&r)
				tt.edit(&r)
				msg, _ = json.Marshal(r)
			}
			r, pidfd := exchange(t, host, msg, tt.fds)
			if pidfd >= 0 {
				unix.Close(pidfd)
			}
			if r.Error == "" || r.PID != 0 || pidfd >= 0 || !strings.Contains(r.Error, tt.want) {
				t.Errorf("reply %+v (pidfd %d), want an error saying %q and no process", r, pidfd, tt.want)
			}
		})
	}

	var req execproto.Spawn
	good(&req)
	msg, _ := json.Marshal(req)
	r, pidfd := exchange(t, host, msg, []int{int(out.Fd())})
	if r.Error != "" || r.PID <= 0 || pidfd < 0 {
		t.Fatalf("good request: %+v, pidfd %d", r, pidfd)
	}
	// The pidfd turns readable when the child exits.
	pfd := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 10000); n != 1 || err != nil {
		t.Fatalf("pidfd not readable 10s after the start: %d, %v", n, err)
	}
	unix.Close(pidfd)
	b, _ := os.ReadFile(out.Name())
	if !strings.HasPrefix(string(b), "hi\n") {
		t.Errorf("the child wrote %q on its descriptor 3, want hi first", b)
	}
	if strings.Contains(string(b), conn) {
		t.Errorf("the child holds the spawner's socket %s; its descriptors: %q", conn, b)
	}
	unix.Close(host)
	if err := <-served; err != nil {
		t.Errorf("Serve after the host closed: %v", err)
	}
}
