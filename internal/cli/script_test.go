package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/image/imagetest"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// TestMain makes this test binary double as the airlock command for the
// scripts in testdata/script.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"airlock": func() { os.Exit(airlockMain()) },
	})
}

// airlockMain is cmd/airlock's main without the sandbox-only setup.
func airlockMain() int {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	env := &cli.Env{Env: sandboxcli.Env{
		Ctx: context.Background(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Home: os.Getenv("AIRLOCK_HOME"), Executor: os.Getenv("AIRLOCK_EXEC"), Self: self,
		Spawner:   true, // as airlock-host
		NoHandoff: os.Getenv("AIRLOCK_NO_HANDOFF") != "",
	}, Getenv: os.Getenv}
	return cli.Main(env, os.Args[1:])
}

func TestScripts(t *testing.T) {
	t.Cleanup(func() {
		if executorRemove != nil {
			executorRemove()
		}
	})
	images := testImages(t)
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			// A short home: egress sockets live under it and a unix
			// socket's path must fit in 108 bytes.
			home, err := os.MkdirTemp("", "alh-")
			if err != nil {
				return err
			}
			e.Defer(func() {
				// The sandboxes of this home are gone: drop what they
				// left (killed ones, their cgroups) and the cgroup parent.
				_ = linux.Forget(filepath.Join(home, "run"))
				os.RemoveAll(home)
			})
			e.Setenv("AIRLOCK_HOME", home)
			// A race-enabled binary sleeps 1s at exit by default: too long
			// for scripts of many airlock commands.
			e.Setenv("GORACE", "atexit_sleep_ms=10")
			if exe, err := executor(); err == nil {
				e.Setenv("AIRLOCK_EXEC", exe)
			}
			if os.Geteuid() == 0 {
				e.Setenv("ROOT", "1")
			}
			for k, v := range images {
				e.Setenv(k, v)
			}
			e.Setenv("POST", interpPost)
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "root":
				return os.Geteuid() == 0, nil
			case "sandbox":
				_, err := executor()
				return os.Geteuid() == 0 && err == nil, nil
			case "image":
				return images != nil, nil
			case "gvisor":
				_, err := executor()
				_, rerr := exec.LookPath("runsc")
				return os.Geteuid() == 0 && err == nil && rerr == nil, nil
			case "layers":
				// Overlay layers given by descriptor: Linux 6.13.
				return kernelAtLeast(6, 13), nil
			case "kernel":
				// The sandbox's root is the host's: Debian's python3.
				return exec.Command("/usr/bin/python3", "-c", "import ipykernel, jupyter_client").Run() == nil, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"apikey":        apiKey,
			"cmpnorm":       cmpNormalized,
			"grep-tree":     grepTree,
			"mode":          checkMode,
			"serve":         startServer,
			"upstream":      startUpstream,
			"forwarded-get": forwardedGet,
		},
	})
}

// interpPost ($POST) is a Python program that sends each of its arguments
// to the code interpreter's /execute in turn, on the sandbox's loopback,
// and prints the NDJSON answers.
const interpPost = `import json, sys, urllib.request
for code in sys.argv[1:]:
    req = urllib.request.Request("http://127.0.0.1:49999/execute", data=json.dumps({"code": code}).encode(), headers={"Content-Type": "application/json"})
    sys.stdout.write(urllib.request.urlopen(req).read().decode())
`

// testImages makes what the image scripts use, when busybox-static is
// installed (nil otherwise): the busybox test image as a docker archive
// ($BUSYBOX_ARCHIVE, tagged localhost/busybox:test), and a registry with
// token auth on loopback holding it as busybox:1 ($REGISTRY, $REG_USER,
// $REG_PASS; $REGISTRY_SECRET names the secret that holds its login). The
// registry speaks plain HTTP: go-containerregistry speaks nothing else to
// a loopback address, and the scripts' airlock is another process, so it
// cannot be given a transport (package image's own tests pull over TLS).
func testImages(t *testing.T) map[string]string {
	if _, err := os.Stat(imagetest.BusyboxPath); err != nil {
		return nil
	}
	img := imagetest.Busybox(t)
	reg := imagetest.NewPlainRegistry(t)
	ref, err := name.NewTag(reg.Host + "/busybox:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithTransport(reg.Transport), remote.WithAuth(&authn.Basic{Username: reg.User, Password: reg.Password})); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"BUSYBOX_ARCHIVE": imagetest.DockerArchive(t, t.TempDir(), img, "localhost/busybox:test"),
		"REGISTRY":        reg.Host, "REG_USER": reg.User, "REG_PASS": reg.Password,
		"REGISTRY_SECRET": host.RegistrySecret(reg.Host),
	}
}

var (
	executorOnce   sync.Once
	executorBin    string
	executorRemove func()
	executorErr    error
)

// executor builds airlock-exec once for the scripts that make sandboxes.
func executor() (string, error) {
	executorOnce.Do(func() {
		executorBin, executorRemove, executorErr = sandboxtest.BuildExecutor()
	})
	return executorBin, executorErr
}

// grepTree: grep-tree TEXT DIR succeeds when some file under DIR holds TEXT
// (literally); with ! it fails when any does.
func grepTree(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: grep-tree TEXT DIR")
	}
	var found []string
	err := filepath.WalkDir(ts.MkAbs(args[1]), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if t := d.Type(); !t.IsRegular() && t&fs.ModeSymlink == 0 {
			// A socket (a live server's sandbox handoff socket) or a
			// pipe stores nothing to search, and cannot be read as a file.
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(args[0])) {
			found = append(found, path)
		}
		return nil
	})
	ts.Check(err)
	switch {
	case neg && len(found) > 0:
		ts.Fatalf("text found in %v", found)
	case !neg && len(found) == 0:
		ts.Fatalf("text not found under %s", args[1])
	}
}

// checkMode: mode OCTAL PATH checks a file's permission bits.
func checkMode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: mode OCTAL PATH")
	}
	want, err := strconv.ParseUint(args[0], 8, 32)
	ts.Check(err)
	st, err := os.Stat(ts.MkAbs(args[1]))
	ts.Check(err)
	if got := uint64(st.Mode().Perm()); (got == want) == neg {
		ts.Fatalf("mode of %s is %04o, want %s%04o", args[1], got, map[bool]string{true: "not ", false: ""}[neg], want)
	}
}

// startUpstream: upstream VAR KEY starts a local server speaking the OpenAI
// chat-completions wire format that answers only requests carrying KEY as
// their bearer token, and puts its base URL (with /v1) in $VAR. It serves
// until the script ends.
func startUpstream(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: upstream VAR KEY")
	}
	key := args[1]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"message":"no such route","type":"invalid_request_error"}}`)
			return
		}
		var req struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1764400000,"model":%q,`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"hello from upstream"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}`, req.Model)
	}))
	ts.Defer(srv.Close)
	ts.Setenv(args[0], srv.URL+"/v1")
}

// forwardedGet: forwarded-get FILE PORT PATH waits until FILE (the output
// of airlock sandbox port-forward) says which local port forwards to PORT,
// then GETs PATH there and prints the body; with ! the GET must fail.
func forwardedGet(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: forwarded-get FILE PORT PATH")
	}
	re := regexp.MustCompile(`(?m)^Forwarding from (127\.0\.0\.1:[0-9]+) -> ` + regexp.QuoteMeta(args[1]) + `$`)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(ts.MkAbs(args[0]))
		if m := re.FindSubmatch(b); m != nil {
			addr = string(m[1])
		} else if time.Now().After(deadline) {
			ts.Fatalf("%s does not say where port %s is forwarded from: %q", args[0], args[1], b)
		}
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + addr + args[2])
	if err == nil {
		var body []byte
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
		if err == nil {
			_, _ = ts.Stdout().Write(body)
		}
	}
	switch {
	case err != nil && !neg:
		ts.Fatalf("GET %s through port-forward: %v", args[2], err)
	case err == nil && neg:
		ts.Fatalf("GET %s through port-forward succeeded", args[2])
	}
}

// kernelAtLeast reports whether the running kernel's version is at least
// major.minor.
func kernelAtLeast(major, minor int) bool {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(string(b), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
