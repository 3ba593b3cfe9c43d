package linux

// Rootless mode: airlock run by an unprivileged user who may create user
// namespaces. The sandbox's user namespace maps one id, the invoking user's,
// to root inside; setgroups is denied. Commands run as that root without any
// capability (the executor drops them, as in root mode), so the sandbox user
// is the host user: files the user owns show as root's inside and need no
// id-mapped mount, and what the sandbox may write on the host (an rw
// workspace, rw mounts) is what the user could write anyway.
//
// What differs from root mode:
//
//   - Mounts: the host cannot clone mount trees (open_tree with
//     OPEN_TREE_CLONE needs CAP_SYS_ADMIN over the host's mount namespace),
//     so it names its sources as execproto.HostPaths and the executor clones
//     them itself before it mounts anything (see executor.cloneHostPaths for
//     the symlink and inode checks).
//   - Ids: no uid-range slot; the id lock every sandbox holds (idLocks)
//     keeps Live and GC right. GC sees only the state directory and the
//     cgroups of the user who runs it.
//   - Cgroups: limits need a cgroup the user may write, which systemd gives
//     to a user service or a scope started with Delegate=yes; without one a
//     sandbox whose spec requires hard limits is not created.

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// rootlessSources fills setup with the sources of a rootless sandbox as
// host paths. It also refuses a default user the sandbox cannot have.
func rootlessSources(spec *sandbox.Spec, setup *execproto.Setup) error {
	switch spec.User {
	case "", "root", "0":
	default:
		return fmt.Errorf("user %q: a rootless sandbox has only root (the invoking user's id, mapped to 0, without capabilities)", spec.User)
	}
	var err error
	switch {
	case len(spec.Layers) > 0:
		for _, l := range spec.Layers {
			p, err := hostPath(l)
			if err != nil {
				return fmt.Errorf("image layer: %w", err)
			}
			setup.LayerPaths = append(setup.LayerPaths, p)
		}
	case spec.RootFS != "":
		if setup.RootPath, err = hostPath(spec.RootFS); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	default:
		setup.SystemDirs = existing(systemDirs)
		setup.EtcFiles = etcFiles
	}
	if spec.Workspace == "" {
		setup.Workspace.Mode = execproto.WorkspaceEmpty
	} else {
		setup.Workspace.Mode = spec.WorkspaceMode
		if setup.Workspace.Mode == "" {
			setup.Workspace.Mode = sandbox.WorkspaceCOW
		}
		if setup.Workspace.Source, err = hostPath(spec.Workspace); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	for _, m := range spec.Mounts {
		p, err := hostPath(m.Source)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Source, err)
		}
		fi, err := os.Stat(p.Path)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Source, err)
		}
		setup.Mounts = append(setup.Mounts, execproto.Mount{Source: p, Target: m.Target, ReadOnly: m.ReadOnly, File: !fi.IsDir()})
	}
	if spec.Network == sandbox.NetworkProxy {
		if setup.ProxyPath, err = hostPath(spec.ProxySocket); err != nil {
			return fmt.Errorf("proxy socket: %w", err)
		}
		setup.ProxyAddr = ProxyAddr
	}
	return nil
}

// hostPath resolves p as the invoking user sees it now (symbolic links
// followed: a workspace given through a link means its target) and records
// which file it is. The executor opens the resolved path refusing any link
// and checks the device and inode, so a later swap fails the setup.
func hostPath(p string) (*execproto.HostPath, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, err
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(resolved, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", resolved, err)
	}
	return &execproto.HostPath{Path: resolved, Dev: st.Dev, Ino: st.Ino}, nil
}

// rootlessLimitsHint ends the error of a rootless Create whose required
// limits cannot be enforced.
const rootlessLimitsHint = "run airlock in a delegated cgroup (for example `systemd-run --user --scope -p Delegate=yes airlock ...`), or allow soft limits (--soft-limits)"
