// Package portproxytest is the server the tests of ports put behind a
// relay: one program, run inside a sandbox by the end-to-end tests and on
// this machine's loopback by the relay's own.
package portproxytest

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
)

// EchoServer is a Python program (python3 EchoServer PORT; 0 lets the
// kernel choose) that prints "listening PORT" once it listens on
// 127.0.0.1 and answers
//   - GET /big: 400 KiB of "x";
//   - a request with Upgrade: 101 Switching Protocols, then every byte
//     it gets back, until the client closes (a WebSocket's shape);
//   - anything else: "host=HOST\n" and the headers it got, reading a
//     POST's whole body first (so a POST whose body does not come holds
//     its connection open).
const EchoServer = `import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        if self.path == "/big":
            b = b"x" * (400 << 10)
        else:
            b = ("host=%s\n" % self.headers.get("Host") + str(self.headers)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        up = self.headers.get("Upgrade")
        if not up:
            return self.answer()
        self.send_response(101)
        self.send_header("Upgrade", up)
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        while True:
            b = self.rfile.read1(65536)
            if not b:
                return
            self.wfile.write(b)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.answer()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("listening %d" % s.server_address[1], flush=True)
s.serve_forever()
`

// Start runs EchoServer on this machine's loopback until the test ends,
// and returns its address (127.0.0.1:PORT).
func Start(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("python3", "-c", EchoServer, "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the echo server (python3): %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("the echo server said %q, %v; want listening PORT", line, err)
	}
	return "127.0.0.1:" + port
}
