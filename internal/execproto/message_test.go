package execproto_test

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/execproto"
)

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name    string
		req     execproto.Request
		wantErr bool
	}{
		{"exec", execproto.Request{Op: execproto.OpExec, Argv: []string{"sh", "-c", "echo hi"}, Env: []string{"A=1", "B="}, Dir: "/workspace", TimeoutMS: 1000}, false},
		{"exec empty arg after name", execproto.Request{Op: execproto.OpExec, Argv: []string{"echo", ""}}, false},
		{"exec env value with equals", execproto.Request{Op: execproto.OpExec, Argv: []string{"env"}, Env: []string{"A=b=c"}}, false},
		{"exec nil argv", execproto.Request{Op: execproto.OpExec}, true},
		{"exec empty argv", execproto.Request{Op: execproto.OpExec, Argv: []string{}}, true},
		{"exec empty command name", execproto.Request{Op: execproto.OpExec, Argv: []string{""}}, true},
		{"exec NUL in arg", execproto.Request{Op: execproto.OpExec, Argv: []string{"echo", "a\x00b"}}, true},
		{"exec NUL in name", execproto.Request{Op: execproto.OpExec, Argv: []string{"ls\x00"}}, true},
		{"exec arg too long", execproto.Request{Op: execproto.OpExec, Argv: []string{"echo", strings.Repeat("a", execproto.MaxArgLen+1)}}, true},
		{"exec too many args", execproto.Request{Op: execproto.OpExec, Argv: make([]string, execproto.MaxArgs+1)}, true},
		{"exec env without equals", execproto.Request{Op: execproto.OpExec, Argv: []string{"env"}, Env: []string{"PATH"}}, true},
		{"exec env empty key", execproto.Request{Op: execproto.OpExec, Argv: []string{"env"}, Env: []string{"=x"}}, true},
		{"exec env NUL", execproto.Request{Op: execproto.OpExec, Argv: []string{"env"}, Env: []string{"A=\x00"}}, true},
		{"exec relative dir", execproto.Request{Op: execproto.OpExec, Argv: []string{"ls"}, Dir: "workspace"}, true},
		{"exec dot dir", execproto.Request{Op: execproto.OpExec, Argv: []string{"ls"}, Dir: "."}, true},
		{"exec negative timeout", execproto.Request{Op: execproto.OpExec, Argv: []string{"ls"}, TimeoutMS: -1}, true},
		{"exec negative max output", execproto.Request{Op: execproto.OpExec, Argv: []string{"ls"}, MaxOutput: -1}, true},
		{"read", execproto.Request{Op: execproto.OpRead, Path: "/workspace/a", Limit: 10}, false},
		{"write mode", execproto.Request{Op: execproto.OpWrite, Path: "/workspace/a", Mode: 0o4755}, false},
		{"list", execproto.Request{Op: execproto.OpList, Path: "/"}, false},
		{"stat", execproto.Request{Op: execproto.OpStat, Path: "/etc/passwd"}, false},
		{"mkdir", execproto.Request{Op: execproto.OpMkdir, Path: "/workspace/d", Recursive: true}, false},
		{"remove", execproto.Request{Op: execproto.OpRemove, Path: "/workspace/d"}, false},
		{"export", execproto.Request{Op: execproto.OpExport, Path: "/workspace"}, false},
		{"read relative path", execproto.Request{Op: execproto.OpRead, Path: "workspace/a"}, true},
		{"read empty path", execproto.Request{Op: execproto.OpRead}, true},
		{"read NUL path", execproto.Request{Op: execproto.OpRead, Path: "/a\x00b"}, true},
		{"read long path", execproto.Request{Op: execproto.OpRead, Path: "/" + strings.Repeat("a", execproto.MaxPathLen)}, true},
		{"read negative limit", execproto.Request{Op: execproto.OpRead, Path: "/a", Limit: -1}, true},
		{"write mode out of range", execproto.Request{Op: execproto.OpWrite, Path: "/a", Mode: 0o10000}, true},
		{"rename", execproto.Request{Op: execproto.OpRename, Path: "/a", NewPath: "/b"}, false},
		{"rename relative new path", execproto.Request{Op: execproto.OpRename, Path: "/a", NewPath: "b"}, true},
		{"rename relative path", execproto.Request{Op: execproto.OpRename, Path: "a", NewPath: "/b"}, true},
		{"watch", execproto.Request{Op: execproto.OpWatch, Path: "/workspace", Recursive: true}, false},
		{"watch dotdot", execproto.Request{Op: execproto.OpWatch, Path: "/workspace/../tmp"}, false},
		{"watch relative path", execproto.Request{Op: execproto.OpWatch, Path: "workspace"}, true},
		{"watch empty path", execproto.Request{Op: execproto.OpWatch}, true},
		{"watch NUL path", execproto.Request{Op: execproto.OpWatch, Path: "/a\x00"}, true},
		{"disk usage", execproto.Request{Op: execproto.OpDiskUsage}, false},
		{"checkpoint full", execproto.Request{Op: execproto.OpCheckpoint}, false},
		{"checkpoint since", execproto.Request{Op: execproto.OpCheckpoint, Since: "a1b2c3d4e5f60718-12"}, false},
		{"checkpoint mark only", execproto.Request{Op: execproto.OpCheckpoint, MarkOnly: true, Since: "x_y.z"}, false},
		{"checkpoint root", execproto.Request{Op: execproto.OpCheckpoint, Tree: execproto.TreeRoot, MarkOnly: true}, false},
		{"checkpoint unknown tree", execproto.Request{Op: execproto.OpCheckpoint, Tree: "home"}, true},
		{"checkpoint since with a slash", execproto.Request{Op: execproto.OpCheckpoint, Since: "../a"}, true},
		{"checkpoint since with a space", execproto.Request{Op: execproto.OpCheckpoint, Since: "a b"}, true},
		{"checkpoint since non-ASCII", execproto.Request{Op: execproto.OpCheckpoint, Since: "b\xc3\xa9"}, true},
		{"checkpoint since too long", execproto.Request{Op: execproto.OpCheckpoint, Since: strings.Repeat("a", execproto.MaxBaselineLen+1)}, true},
		{"read with a head", execproto.Request{Op: execproto.OpRead, Path: "/workspace/f", Head: true, Limit: 1}, false},
		{"head on a write", execproto.Request{Op: execproto.OpWrite, Path: "/workspace/f", Head: true}, true},
		{"head on an exec", execproto.Request{Op: execproto.OpExec, Argv: []string{"cat"}, Head: true}, true},
		{"checkpoint bulk", execproto.Request{Op: execproto.OpCheckpoint, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}, false},
		{"export largest window and chunk", execproto.Request{Op: execproto.OpExport, Path: "/workspace", Window: execproto.MaxWindow, ChunkSize: execproto.MaxChunkSize}, false},
		{"exec smallest window and chunk", execproto.Request{Op: execproto.OpExec, Argv: []string{"cat"}, Window: execproto.Window, ChunkSize: execproto.ChunkSize}, false},
		{"exec window only", execproto.Request{Op: execproto.OpExec, Argv: []string{"cat"}, Window: execproto.BulkWindow}, false},
		{"exec chunk only", execproto.Request{Op: execproto.OpExec, Argv: []string{"cat"}, ChunkSize: execproto.BulkChunkSize}, false},
		{"window past the maximum", execproto.Request{Op: execproto.OpCheckpoint, Window: execproto.MaxWindow + 1}, true},
		{"window below the default", execproto.Request{Op: execproto.OpCheckpoint, Window: execproto.Window - 1}, true},
		{"negative window", execproto.Request{Op: execproto.OpCheckpoint, Window: -1}, true},
		{"chunk past the maximum", execproto.Request{Op: execproto.OpCheckpoint, ChunkSize: execproto.MaxChunkSize + 1}, true},
		{"chunk below the default", execproto.Request{Op: execproto.OpCheckpoint, ChunkSize: execproto.ChunkSize - 1}, true},
		{"negative chunk", execproto.Request{Op: execproto.OpCheckpoint, ChunkSize: -1}, true},
		{"huge window on a valid op", execproto.Request{Op: execproto.OpDiskUsage, Window: 1 << 62}, true},
		{"connect", execproto.Request{Op: execproto.OpConnect, Port: 8080}, false},
		{"connect lowest port", execproto.Request{Op: execproto.OpConnect, Port: 1}, false},
		{"connect highest port", execproto.Request{Op: execproto.OpConnect, Port: 65535}, false},
		{"connect bulk", execproto.Request{Op: execproto.OpConnect, Port: 80, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}, false},
		{"egress", execproto.Request{Op: execproto.OpEgress, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}, false},
		{"egress window too big", execproto.Request{Op: execproto.OpEgress, Window: execproto.MaxWindow + 1}, true},
		{"connect port 0", execproto.Request{Op: execproto.OpConnect}, true},
		{"connect port 65536", execproto.Request{Op: execproto.OpConnect, Port: 65536}, true},
		{"connect negative port", execproto.Request{Op: execproto.OpConnect, Port: -1}, true},
		{"unknown op", execproto.Request{Op: "chmod", Path: "/a"}, true},
		{"empty op", execproto.Request{}, true},
		{"op case matters", execproto.Request{Op: "EXEC", Argv: []string{"ls"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if (err != nil) != tt.wantErr {
				t.Errorf("Request{Op: %q}.Validate() = %v, want error: %t", tt.req.Op, err, tt.wantErr)
			}
		})
	}
}

// TestRequestFlow: Flow gives a request's own window and chunk size where
// Validate accepts them, and the defaults otherwise, so a receiver that
// sizes its buffers before validating never takes an unbounded window.
func TestRequestFlow(t *testing.T) {
	tests := []struct {
		name       string
		req        execproto.Request
		wantWindow int64
		wantChunk  int
	}{
		{"defaults", execproto.Request{}, execproto.Window, execproto.ChunkSize},
		{"bulk", execproto.Request{Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}, execproto.BulkWindow, execproto.BulkChunkSize},
		{"window only", execproto.Request{Window: execproto.MaxWindow}, execproto.MaxWindow, execproto.ChunkSize},
		{"chunk only", execproto.Request{ChunkSize: execproto.MaxChunkSize}, execproto.Window, execproto.MaxChunkSize},
		{"huge window", execproto.Request{Window: 1 << 62, ChunkSize: execproto.BulkChunkSize}, execproto.Window, execproto.ChunkSize},
		{"huge chunk", execproto.Request{Window: execproto.BulkWindow, ChunkSize: execproto.MaxPayload}, execproto.Window, execproto.ChunkSize},
		{"negative", execproto.Request{Window: -1, ChunkSize: -1}, execproto.Window, execproto.ChunkSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if w, c := tt.req.Flow(); w != tt.wantWindow || c != tt.wantChunk {
				t.Errorf("Request{Window: %d, ChunkSize: %d}.Flow() = %d, %d; want %d, %d", tt.req.Window, tt.req.ChunkSize, w, c, tt.wantWindow, tt.wantChunk)
			}
		})
	}
	if execproto.MaxChunkSize > execproto.Window || execproto.MaxChunkSize+1 > execproto.MaxPayload {
		t.Errorf("MaxChunkSize %d must fit the smallest window %d and a frame's payload %d with its channel byte", execproto.MaxChunkSize, execproto.Window, execproto.MaxPayload)
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    execproto.Request
		wantErr bool
	}{
		{"valid", `{"op":"exec","argv":["ls","-l"],"timeout_ms":5}`, execproto.Request{Op: "exec", Argv: []string{"ls", "-l"}, TimeoutMS: 5}, false},
		{"surrounding whitespace", " \r\n\t{\"op\":\"stat\",\"path\":\"/\"} \n", execproto.Request{Op: "stat", Path: "/"}, false},
		{"unknown field", `{"op":"exec","argv":["ls"],"privileged":true}`, execproto.Request{}, true},
		{"trailing object", `{"op":"stat","path":"/"}{}`, execproto.Request{}, true},
		{"trailing brace", `{"op":"stat","path":"/"}}`, execproto.Request{}, true},
		{"trailing bracket", `{"op":"stat","path":"/"} ]`, execproto.Request{}, true},
		{"trailing garbage", `{"op":"stat","path":"/"} x`, execproto.Request{}, true},
		{"trailing NUL", "{\"op\":\"stat\",\"path\":\"/\"}\x00", execproto.Request{}, true},
		{"wrong type string for array", `{"op":"exec","argv":"ls"}`, execproto.Request{}, true},
		{"wrong type string for int", `{"op":"exec","argv":["ls"],"timeout_ms":"5"}`, execproto.Request{}, true},
		{"wrong type negative for uint", `{"op":"write","path":"/a","mode":-1}`, execproto.Request{}, true},
		{"wrong type overflow uint16", `{"op":"exec","argv":["ls"],"rows":65536}`, execproto.Request{}, true},
		{"wrong type array", `[]`, execproto.Request{}, true},
		{"empty", ``, execproto.Request{}, true},
		{"truncated", `{"op":"exec"`, execproto.Request{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got execproto.Request
			err := execproto.Decode([]byte(tt.in), &got)
			if tt.wantErr {
				if !errors.Is(err, execproto.ErrFrame) {
					t.Errorf("Decode(%q) = %v, want ErrFrame", tt.in, err)
				}
				// A reader of frames takes io.EOF for the peer closing the
				// stream: a bad payload must not pass for it.
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("Decode(%q) = %v, which matches io.EOF or io.ErrUnexpectedEOF", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%q) = %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestSetupValidate(t *testing.T) {
	hp := func(p string) *execproto.HostPath { return &execproto.HostPath{Path: p, Dev: 2049, Ino: 77} }
	ok := func() execproto.Setup {
		return execproto.Setup{Hostname: "h", Workspace: execproto.Workspace{Mode: execproto.WorkspaceEmpty}, SystemDirs: []string{"/usr"}}
	}
	tests := []struct {
		name    string
		edit    func(s *execproto.Setup)
		wantErr string
	}{
		{"empty workspace", func(*execproto.Setup) {}, ""},
		{"fd workspace", func(s *execproto.Setup) { s.Workspace = execproto.Workspace{Mode: "cow", FD: 4} }, ""},
		{"rootless workspace", func(s *execproto.Setup) { s.Workspace = execproto.Workspace{Mode: "rw", Source: hp("/home/u/proj")} }, ""},
		{"rootless everything", func(s *execproto.Setup) {
			s.RootPath = hp("/srv/rootfs")
			s.Workspace = execproto.Workspace{Mode: "ro", Source: hp("/home/u/proj")}
			s.Mounts = []execproto.Mount{{Source: hp("/home/u/data"), Target: "/data", ReadOnly: true}}
			s.ProxyPath, s.ProxyAddr = hp("/home/u/.local/share/airlock/run/egress/sb-1.sock"), "127.0.0.1:3128"
		}, ""},
		{"workspace both", func(s *execproto.Setup) { s.Workspace = execproto.Workspace{Mode: "cow", FD: 4, Source: hp("/w")} }, "both"},
		{"workspace none", func(s *execproto.Setup) { s.Workspace = execproto.Workspace{Mode: "cow"} }, "no source"},
		{"empty workspace with source", func(s *execproto.Setup) { s.Workspace.Source = hp("/w") }, "empty workspace"},
		{"unknown mode", func(s *execproto.Setup) { s.Workspace.Mode = "xx" }, "unknown mode"},
		{"relative source", func(s *execproto.Setup) { s.Workspace = execproto.Workspace{Mode: "rw", Source: hp("home/u")} }, "not absolute"},
		{"unclean source", func(s *execproto.Setup) { s.Workspace = execproto.Workspace{Mode: "rw", Source: hp("/home/u/../root")} }, "not clean"},
		{"trailing slash", func(s *execproto.Setup) { s.Workspace = execproto.Workspace{Mode: "rw", Source: hp("/home/u/")} }, "not clean"},
		{"NUL in source", func(s *execproto.Setup) { s.Workspace = execproto.Workspace{Mode: "rw", Source: hp("/home/u\x00x")} }, "NUL"},
		{"no inode", func(s *execproto.Setup) {
			s.Workspace = execproto.Workspace{Mode: "rw", Source: &execproto.HostPath{Path: "/w"}}
		}, "no inode"},
		{"root both", func(s *execproto.Setup) { s.RootFD, s.RootPath = 4, hp("/r") }, "both"},
		{"negative fd", func(s *execproto.Setup) { s.RootFD = -1 }, "negative"},
		{"image layers", func(s *execproto.Setup) { s.Layers = []int{4, 5, 6} }, ""},
		{"rootless image layers", func(s *execproto.Setup) { s.LayerPaths = []*execproto.HostPath{hp("/l/a"), hp("/l/b")} }, ""},
		{"layers both forms", func(s *execproto.Setup) { s.Layers, s.LayerPaths = []int{4}, []*execproto.HostPath{hp("/l/a")} }, "both"},
		{"layers and template root", func(s *execproto.Setup) { s.Layers, s.RootFD = []int{4}, 5 }, "exclude"},
		{"rootless layers and template root", func(s *execproto.Setup) { s.LayerPaths, s.RootPath = []*execproto.HostPath{hp("/l/a")}, hp("/r") }, "exclude"},
		{"layer without descriptor", func(s *execproto.Setup) { s.Layers = []int{4, 0} }, "image layer 1: no source"},
		{"layer negative descriptor", func(s *execproto.Setup) { s.Layers = []int{-4} }, "negative"},
		{"nil layer path", func(s *execproto.Setup) { s.LayerPaths = []*execproto.HostPath{nil} }, "no source"},
		{"relative layer path", func(s *execproto.Setup) { s.LayerPaths = []*execproto.HostPath{hp("l/a")} }, "not absolute"},
		{"too many layers", func(s *execproto.Setup) { s.Layers = make([]int, execproto.MaxLayers+1) }, "at most"},
		{"mount without source", func(s *execproto.Setup) { s.Mounts = []execproto.Mount{{Target: "/data"}} }, "no source"},
		{"mount bad target", func(s *execproto.Setup) { s.Mounts = []execproto.Mount{{FD: 5, Target: "/data/../etc"}} }, "target"},
		{"mount on root", func(s *execproto.Setup) { s.Mounts = []execproto.Mount{{FD: 5, Target: "/"}} }, "target"},
		{"proxy without address", func(s *execproto.Setup) { s.ProxyPath = hp("/s.sock") }, "go together"},
		{"address without proxy", func(s *execproto.Setup) { s.ProxyAddr = "127.0.0.1:3128" }, "go together"},
		{"proxy streams", func(s *execproto.Setup) { s.ProxyStreams, s.ProxyAddr = true, "127.0.0.1:3128" }, ""},
		{"proxy streams without address", func(s *execproto.Setup) { s.ProxyStreams = true }, "go together"},
		{"proxy streams and socket", func(s *execproto.Setup) {
			s.ProxyStreams, s.ProxyFD, s.ProxyAddr = true, 5, "127.0.0.1:3128"
		}, "one or the other"},
		{"gvisor proxy streams", func(s *execproto.Setup) {
			s.SystemDirs, s.GVisor, s.ProxyStreams, s.ProxyAddr = nil, true, true, "127.0.0.1:3128"
		}, ""},
		{"gvisor proxy streams without address", func(s *execproto.Setup) { s.SystemDirs, s.GVisor, s.ProxyStreams = nil, true, true }, "without a proxy address"},
		{"relative system dir", func(s *execproto.Setup) { s.SystemDirs = []string{"usr"} }, "system path"},
		{"negative disk", func(s *execproto.Setup) { s.DiskBytes = -1 }, "negative size"},
		{"pids limit natively", func(s *execproto.Setup) { s.Pids = 64 }, "only under gvisor"},
		{"pids limit under gvisor", func(s *execproto.Setup) { *s = execproto.Setup{GVisor: true, Pids: 64} }, ""},
		{"negative pids limit under gvisor", func(s *execproto.Setup) { *s = execproto.Setup{GVisor: true, Pids: -1} }, "negative pids"},
		{"build capabilities", func(s *execproto.Setup) {
			s.Layers, s.WritableRoot, s.RootCaps = []int{4}, true, execproto.RootCapabilities
		}, ""},
		{"capabilities without a writable root", func(s *execproto.Setup) { s.Layers, s.RootCaps = []int{4}, []string{"CHOWN"} }, "need a writable root"},
		{"capability not allowed", func(s *execproto.Setup) {
			s.Layers, s.WritableRoot, s.RootCaps = []int{4}, true, []string{"SYS_ADMIN"}
		}, "want one of"},
		{"capability lowercase", func(s *execproto.Setup) { s.Layers, s.WritableRoot, s.RootCaps = []int{4}, true, []string{"chown"} }, "want one of"},
		{"capability twice", func(s *execproto.Setup) {
			s.Layers, s.WritableRoot, s.RootCaps = []int{4}, true, []string{"SETUID", "SETUID"}
		}, "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok()
			tt.edit(&s)
			err := s.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeOtherMessages(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		v       any
		wantErr bool
	}{
		{"hello", `{"version":1}`, new(execproto.Hello), false},
		{"hello unknown field", `{"version":1,"extra":0}`, new(execproto.Hello), true},
		{"setup", `{"hostname":"h","workspace":{"mode":"cow","fd":4},"disk_bytes":1,"shm_bytes":2,"user":{"name":"u","uid":1000,"gid":1000,"home":"/home/u"},"rlimits":{"nofile":1024}}`, new(execproto.Setup), false},
		{"setup unknown nested field", `{"workspace":{"mode":"cow","path":"/host"}}`, new(execproto.Setup), true},
		{"setup rootless source", `{"workspace":{"mode":"cow","source":{"path":"/home/u/p","dev":2049,"ino":12}}}`, new(execproto.Setup), false},
		{"setup source unknown field", `{"workspace":{"mode":"cow","source":{"path":"/p","dev":1,"ino":2,"fd":3}}}`, new(execproto.Setup), true},
		{"setup source negative inode", `{"mounts":[{"fd":0,"target":"/d","read_only":true,"source":{"path":"/p","dev":1,"ino":-2}}]}`, new(execproto.Setup), true},
		{"setup negative rlimit", `{"rlimits":{"nofile":-1}}`, new(execproto.Setup), true},
		{"ready", `{"pid":1,"landlock_abi":3,"seccomp":true,"layers":["a"]}`, new(execproto.Ready), false},
		{"result", `{"outcome":"exited","exit_code":2,"entries":[{"name":"a","size":1,"mode":420,"mtime_ns":5}]}`, new(execproto.Result), false},
		{"result wrong type", `{"exit_code":"2"}`, new(execproto.Result), true},
		{"error", `{"message":"m"}`, new(execproto.Error), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := execproto.Decode([]byte(tt.in), tt.v)
			if tt.wantErr != (err != nil) {
				t.Fatalf("Decode(%q) = %v, want error: %t", tt.in, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, execproto.ErrFrame) {
				t.Errorf("Decode(%q) = %v, want it to wrap ErrFrame", tt.in, err)
			}
		})
	}
}

func TestJSONFrame(t *testing.T) {
	req := execproto.Request{Op: execproto.OpExec, Argv: []string{"true"}}
	f, err := execproto.JSONFrame(execproto.TOpen, 3, req)
	if err != nil {
		t.Fatalf("JSONFrame(open) = %v", err)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("JSONFrame(open).Validate() = %v", err)
	}
	var got execproto.Request
	if err := execproto.Decode(f.Payload, &got); err != nil {
		t.Fatalf("Decode(JSONFrame(open)) = %v", err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Errorf("Decode(JSONFrame(%+v)) = %+v", req, got)
	}

	if _, err := execproto.JSONFrame(execproto.TOpen, 3, make(chan int)); err == nil {
		t.Error("JSONFrame(chan) = nil error, want an encoding error")
	}
	big := execproto.Request{Op: execproto.OpExec, Argv: []string{strings.Repeat("a", execproto.MaxPayload)}}
	if _, err := execproto.JSONFrame(execproto.TOpen, 3, big); err == nil {
		t.Error("JSONFrame(over MaxPayload) = nil error, want a size error")
	}
}

func TestCheckpointResultValidate(t *testing.T) {
	tests := []struct {
		name     string
		r        execproto.CheckpointResult
		markOnly bool
		wantErr  bool
	}{
		{"delta", execproto.CheckpointResult{Baseline: "p-2", Entries: 3, Bytes: 10}, false, false},
		{"full", execproto.CheckpointResult{Baseline: "p-1", Full: true, Entries: 1}, false, false},
		{"empty delta", execproto.CheckpointResult{Baseline: "p-3"}, false, false},
		{"mark only", execproto.CheckpointResult{Baseline: "p-4"}, true, false},
		{"no baseline", execproto.CheckpointResult{Entries: 1}, false, true},
		{"bad baseline", execproto.CheckpointResult{Baseline: "a/b"}, false, true},
		{"negative entries", execproto.CheckpointResult{Baseline: "p", Entries: -1}, false, true},
		{"negative bytes", execproto.CheckpointResult{Baseline: "p", Bytes: -1}, false, true},
		{"mark only with entries", execproto.CheckpointResult{Baseline: "p", Entries: 1}, true, true},
		{"mark only full", execproto.CheckpointResult{Baseline: "p", Full: true}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.r.Validate(tt.markOnly); (err != nil) != tt.wantErr {
				t.Errorf("CheckpointResult%+v.Validate(%t) = %v, want error: %t", tt.r, tt.markOnly, err, tt.wantErr)
			}
		})
	}
}

func TestWatchEventValidate(t *testing.T) {
	tests := []struct {
		name    string
		ev      execproto.WatchEvent
		wantErr bool
	}{
		{"start", execproto.WatchEvent{Op: execproto.WatchStart}, false},
		{"create dir", execproto.WatchEvent{Op: execproto.WatchCreate, Path: "/workspace/d", Dir: true}, false},
		{"write", execproto.WatchEvent{Op: execproto.WatchWrite, Path: "/workspace/f"}, false},
		{"remove", execproto.WatchEvent{Op: execproto.WatchRemove, Path: "/workspace/f"}, false},
		{"rename", execproto.WatchEvent{Op: execproto.WatchRename, Path: "/workspace/f"}, false},
		{"chmod", execproto.WatchEvent{Op: execproto.WatchChmod, Path: "/workspace/f"}, false},
		{"overflow", execproto.WatchEvent{Op: execproto.WatchOverflow, Path: "/workspace"}, false},
		{"start with a path", execproto.WatchEvent{Op: execproto.WatchStart, Path: "/x"}, true},
		{"start with dir", execproto.WatchEvent{Op: execproto.WatchStart, Dir: true}, true},
		{"create without a path", execproto.WatchEvent{Op: execproto.WatchCreate}, true},
		{"relative path", execproto.WatchEvent{Op: execproto.WatchWrite, Path: "f"}, true},
		{"NUL in path", execproto.WatchEvent{Op: execproto.WatchWrite, Path: "/f\x00"}, true},
		{"path too long", execproto.WatchEvent{Op: execproto.WatchWrite, Path: "/" + strings.Repeat("a", execproto.MaxPathLen)}, true},
		{"unknown op", execproto.WatchEvent{Op: "truncate", Path: "/f"}, true},
		{"empty op", execproto.WatchEvent{Path: "/f"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.ev.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("WatchEvent%+v.Validate() = %v, want error: %t", tt.ev, err, tt.wantErr)
			}
		})
	}
}

// TestWatchEventFitsAFrame: the executor sends each event in one data frame,
// so the longest valid event, with every byte of its path escaped, must fit
// in ChunkSize.
func TestWatchEventFitsAFrame(t *testing.T) {
	for _, fill := range []string{"a", "\x01", "\xff", "\"", "<"} {
		p := "/" + strings.Repeat(fill, execproto.MaxPathLen-1)
		ev := execproto.WatchEvent{Op: execproto.WatchOverflow, Path: p, Dir: true}
		if err := ev.Validate(); err != nil {
			t.Fatalf("Validate(longest path of %q) = %v", fill, err)
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > execproto.ChunkSize {
			t.Errorf("an event whose path is %d bytes of %q encodes to %d bytes, over ChunkSize %d", len(p), fill, len(b), execproto.ChunkSize)
		}
	}
}

// TestMessageFieldNames pins the wire names of a few fields, so a rename of a
// Go field cannot silently change the protocol.
func TestMessageFieldNames(t *testing.T) {
	b, err := json.Marshal(execproto.Result{Outcome: execproto.OutcomeTimeout, ExitCode: -1, MaxRSSKB: 7})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"outcome":"timeout","exit_code":-1,"max_rss_kb":7}`; string(b) != want {
		t.Errorf("json.Marshal(Result) = %s, want %s", b, want)
	}
	b, err = json.Marshal(execproto.WatchEvent{Op: execproto.WatchCreate, Path: "/w/d", Dir: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"op":"create","path":"/w/d","dir":true}`; string(b) != want {
		t.Errorf("json.Marshal(WatchEvent) = %s, want %s", b, want)
	}
	b, err = json.Marshal(execproto.Result{Disk: &execproto.DiskUsage{Used: 1, Total: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"exit_code":0,"disk":{"used":1,"total":2}}`; string(b) != want {
		t.Errorf("json.Marshal(Result with disk) = %s, want %s", b, want)
	}
	b, err = json.Marshal(execproto.Request{Op: execproto.OpCheckpoint, Since: "p-1", MarkOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"op":"checkpoint","since":"p-1","mark_only":true}`; string(b) != want {
		t.Errorf("json.Marshal(checkpoint Request) = %s, want %s", b, want)
	}
	b, err = json.Marshal(execproto.Request{Op: execproto.OpExport, Path: "/w", Window: 1 << 21, ChunkSize: 1 << 18})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"op":"export","path":"/w","window":2097152,"chunk_size":262144}`; string(b) != want {
		t.Errorf("json.Marshal(bulk Request) = %s, want %s", b, want)
	}
	b, err = json.Marshal(execproto.Result{Checkpoint: &execproto.CheckpointResult{Baseline: "p-2", Full: true, Entries: 3, Bytes: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"exit_code":0,"checkpoint":{"baseline":"p-2","full":true,"entries":3,"bytes":4}}`; string(b) != want {
		t.Errorf("json.Marshal(Result with checkpoint) = %s, want %s", b, want)
	}
}
