package linux_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

// TestReadOnlyLive: a read-only mount and a read-only workspace show the
// host directory as it is now, as a read-only bind does: a name the sandbox
// looked up before the host made it, a file the host removed or rewrote
// after the sandbox read it, a name added at the top where the sandbox
// listed before.
func TestReadOnlyLive(t *testing.T) {
	for _, rt := range []string{sandbox.RuntimeNative, sandbox.RuntimeGVisor} {
		t.Run(rt, func(t *testing.T) {
			if rt == sandbox.RuntimeGVisor {
				needGVisor(t)
			}
			ws, ro := t.TempDir(), t.TempDir()
			for _, d := range []string{ws, ro} {
				for _, f := range []string{"old", "sub/old"} {
					if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(d, f), []byte("v1\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			sb := attackSandbox(t, rt, sandbox.Spec{
				Workspace: ws, WorkspaceMode: sandbox.WorkspaceRO,
				Mounts: []sandbox.Mount{{Source: ro, Target: "/rodata", ReadOnly: true}},
			})
			for _, c := range []struct{ host, dir string }{{ws, "/workspace"}, {ro, "/rodata"}} {
				before := "for p in new sub/new; do cat " + c.dir + "/$p 2>/dev/null || echo none; done; cat " + c.dir + "/old " + c.dir + "/sub/old; " + attackList + c.dir + " " + c.dir + "/sub"
				if out := attackMust(t, sb, "", before); out != "none\nnone\nv1\nv1\nold\nsub\nold\n" {
					t.Fatalf("%s before the host's changes: %q", c.dir, out)
				}
				for _, f := range []string{"new", "sub/new"} {
					if err := os.WriteFile(filepath.Join(c.host, f), []byte("new\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Remove(filepath.Join(c.host, "sub/old")); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(c.host, "old"), []byte("v2\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				after := "cat " + c.dir + "/new " + c.dir + "/sub/new " + c.dir + "/old; cat " + c.dir + "/sub/old 2>/dev/null || echo gone; " + attackList + c.dir + " " + c.dir + "/sub; touch " + c.dir + "/w 2>/dev/null || echo read-only"
				want := "new\nnew\nv2\ngone\nnew\nold\nsub\nnew\nread-only\n"
				if out := attackMust(t, sb, "", after); out != want {
					t.Errorf("%s after the host's changes:\n%s\nwant\n%s", c.dir, out, want)
				}
			}
		})
	}
}

// TestStaticReadOnly: with Spec.StaticReadOnly a read-only workspace and
// read-only mounts show the same files, owners and modes as without it,
// refuse writes, and keep a mount made below the source on the host in
// view; natively, where the kernel allows it (Linux 6.13), mountinfo shows
// the read-only directories as overlays that name no host path, except
// the one with a mount below it, which stays a bind.
func TestStaticReadOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs below a source on the host")
	}
	checks := linux.Doctor(executorPath)
	i := slices.IndexFunc(checks, func(c linux.Check) bool { return c.Layer == "detached-layers" })
	if i < 0 || checks[i].OK != linux.DetachedLayers() || checks[i].Required {
		t.Errorf("doctor's detached-layers line (at %d of %+v): want ok %v and not required", i, checks, linux.DetachedLayers())
	}
	ws, ro, nested := t.TempDir(), t.TempDir(), t.TempDir()
	for _, f := range []string{ws + "/f", ro + "/g", nested + "/top"} {
		if err := os.WriteFile(f, []byte("x\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(ro+"/d", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(nested+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", nested+"/sub", "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(nested+"/sub", unix.MNT_DETACH) })
	if err := os.WriteFile(nested+"/sub/inner", []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const probe = `python3 -c 'import os, sys
for p in sys.argv[1:]:
    st = os.lstat(p)
    print(p, oct(st.st_mode), st.st_uid, st.st_gid, st.st_size, open(p).read().strip() if os.path.isfile(p) else sorted(os.listdir(p)))
for d in ("/workspace", "/rodata", "/nested"):
    try:
        open(d + "/new", "w")
        print(d, "writable")
    except OSError as e:
        print(d, e.strerror)
' /workspace /workspace/f /rodata /rodata/g /rodata/d /nested /nested/top /nested/sub /nested/sub/inner`
	for _, rt := range []string{sandbox.RuntimeNative, sandbox.RuntimeGVisor} {
		t.Run(rt, func(t *testing.T) {
			if rt == sandbox.RuntimeGVisor {
				needGVisor(t)
			}
			out := map[bool]string{}
			for _, static := range []bool{false, true} {
				sb := attackSandbox(t, rt, sandbox.Spec{
					Workspace: ws, WorkspaceMode: sandbox.WorkspaceRO, StaticReadOnly: static,
					Mounts: []sandbox.Mount{{Source: ro, Target: "/rodata", ReadOnly: true}, {Source: nested, Target: "/nested", ReadOnly: true}},
				})
				out[static] = attackMust(t, sb, "", probe)
				if rt != sandbox.RuntimeNative {
					continue
				}
				info := attackMust(t, sb, "", "cat /proc/self/mountinfo")
				for _, c := range []struct {
					target, source string
					overlay        bool
				}{
					{"/workspace", ws, static && linux.DetachedLayers()},
					{"/rodata", ro, static && linux.DetachedLayers()},
					{"/nested", nested, false}, // a mount below it: a bind
				} {
					line := mountinfoLine(info, c.target)
					if line == "" {
						t.Fatalf("static %v: no mountinfo line for %s:\n%s", static, c.target, info)
					}
					if c.overlay != strings.Contains(line, " - overlay ") || c.overlay == strings.Contains(line, c.source) {
						t.Errorf("static %v (kernel takes detached layers: %v): %s's mountinfo line: %q", static, linux.DetachedLayers(), c.target, line)
					}
				}
			}
			if !strings.Contains(out[false], "/nested/sub/inner 0o100644 ") || !strings.Contains(out[false], "/rodata Read-only file system") {
				t.Fatalf("control: the probe's output:\n%s", out[false])
			}
			if out[true] != out[false] {
				t.Errorf("static read-only directories show\n%s\nwhere binds show\n%s", out[true], out[false])
			}
		})
	}
}

// mountinfoLine is the line of mountinfo whose mount point is target.
func mountinfoLine(info, target string) string {
	for _, l := range strings.Split(info, "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == target {
			return l
		}
	}
	return ""
}
