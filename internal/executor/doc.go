// Package executor is the in-sandbox side of airlock: the program that runs as
// PID 1 of every sandbox and carries out the host's requests.
//
// It builds the sandbox (mounts, pivot_root, /proc and /dev, loopback-only
// network), then locks itself down before any untrusted code exists: the
// bounding capability set is emptied so no command it starts holds a
// capability, Landlock confines the file system as a second layer under the
// mount namespace, the process is made non-dumpable so /proc/1 is out of
// reach, and a seccomp filter with no_new_privs is installed on every thread
// and inherited by every child. Then it serves execproto requests: commands
// with streamed, flow-controlled output; file operations (read, write, list,
// stat, mkdir, remove, rename, export, watch) as the sandbox user; disk
// usage; checkpoints; and connections from the host to TCP ports of the
// sandbox's loopback, which it dials itself (127.0.0.1, then ::1; never
// another address) and relays, at most execproto.MaxConnects at once. As
// PID 1 it reaps every orphan.
//
// # Checkpoints
//
// A checkpoint streams what changed in /workspace since a baseline the
// executor recorded, and records a new one. The stream, "airlock delta v1",
// is a POSIX tar (ustar headers, PAX records for what does not fit: long or
// non-ASCII names, nanosecond times), written by this package's own writer:
//
//   - Names are relative to /workspace, without "/", "./", "." or ".."
//     components; directories end in "/". Names are bytes: newlines and
//     invalid UTF-8 pass in PAX path records.
//   - Order: depth first, a directory before its children, children in byte
//     order of their names (a whiteout where the name it deletes would be).
//   - Types: '0' file (its content), '5' directory, '2' symlink (the raw
//     target, never followed), '1' hard link to a name that exists once the
//     tree the stream applies to and its earlier entries are applied, '6'
//     FIFO. Sockets and device nodes are not workspace data and are skipped;
//     one that takes the place of an entry deletes it.
//   - Metadata: permission, set-id and sticky bits; numeric owner as seen in
//     the sandbox; mtime to the nanosecond.
//   - Deletions are OCI whiteouts: an empty file DIR/.wh.NAME deletes
//     DIR/NAME and everything below it; DIR/.wh..wh..opq, right after DIR's
//     entry, says DIR's previous children are gone (those that follow are
//     its new ones). An entry replaces whatever is at its path; a directory
//     over a directory keeps the children. A full stream has no whiteouts.
//
// Invariants of checkpoints:
//   - A baseline is the keys (inode, type and mode, owner, size, mtime and
//     ctime to the nanosecond, symlink target) of the entries walked, in walk
//     order; an entry is written when its key differs. User space cannot set
//     ctime, and on kernels with fine-grained timestamps (Linux 6.13 for
//     tmpfs, ext4, xfs, btrfs) a change right after a stat moves it, so a
//     change cannot hide behind a restored mtime.
//   - In a cow workspace the baseline keys the overlay's upper layer, reached
//     through an O_PATH descriptor opened before pivot_root hid the scratch
//     tmpfs (close-on-exec; Landlock grants reading beneath it, and nothing
//     else can reach it). A delta walks the upper layer alone, so it costs
//     what the run changed: a whiteout device becomes .wh.NAME, an opaque
//     directory (user.overlay.opaque=y) made since the baseline becomes
//     .wh..wh..opq with all its children, a path of the baseline gone from
//     the upper layer a whiteout. A full stream walks the merged /workspace
//     after the upper layer's keys were taken, so a change racing it comes
//     again next time; hard links there are told by upper-layer inodes (the
//     merged view reports a copied-up file's lower inode). An empty
//     workspace is such an overlay too, of an empty lower directory on the
//     scratch tmpfs: imports into /workspace unpack into that lower layer
//     (a restore's or an upload's tree) until the first operation that may
//     look through the overlay seals it, so the deltas after a restore
//     walk only what changed since. In the other modes /workspace itself
//     is walked, with stat alone, and only what changed is read. Memory is
//     the keys of what is walked.
//   - Every open of the walk is openat2 of one name beneath a directory
//     descriptor (RESOLVE_BENEATH, NO_SYMLINKS, NO_MAGICLINKS, NO_XDEV,
//     O_NOFOLLOW; where openat2 is ENOSYS, gVisor's case, openat of the one
//     name with O_NOFOLLOW, a directory on another device refused as a
//     mount point), with the sandbox user's file-system identity as file
//     operations have: a symlink swapped in mid-walk fails to open or is
//     written as a symlink; it can never lead the walk out of /workspace. A
//     directory or file is checked, by descriptor, to be what stat saw. A
//     mount point below /workspace is kept as an empty directory.
//   - A file whose size or ctime changes while it is read fails the
//     checkpoint with EAGAIN naming it (a body that is not its header's is
//     never sent); so does a name starting with ".wh.", which the stream
//     cannot represent. A file the sandbox user cannot read fails it too.
//     A failed checkpoint records nothing.
//   - Baseline names are random per executor plus a counter, so a name from
//     another sandbox is unknown here (and gets a full stream). The last two
//     baselines are kept; checkpoints run one at a time.
//
// The executor holds no secret and decides nothing. It imports only the
// standard library, golang.org/x/sys and execproto (and its own
// subpackages); a test in cmd/airlock-exec enforces that, so that no host
// code — store, secrets, policy, proxy, model clients — is ever linked next
// to untrusted code.
package executor
