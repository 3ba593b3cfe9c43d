package executor

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// loadUsers reads the sandbox's /etc/passwd (generated for the host base,
// the template's own otherwise), once, after pivot_root.
func loadUsers(def execproto.User) map[string]execproto.User {
	users := map[string]execproto.User{
		def.Name: def,
		"root":   {Name: "root", UID: 0, GID: 0, Home: "/root"},
	}
	data, err := readSmallFile("/etc/passwd")
	if err != nil {
		return users
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 {
			continue
		}
		uid, err1 := strconv.Atoi(fields[2])
		gid, err2 := strconv.Atoi(fields[3])
		if err1 != nil || err2 != nil {
			continue
		}
		if _, ok := users[fields[0]]; !ok {
			users[fields[0]] = execproto.User{Name: fields[0], UID: uid, GID: gid, Home: fields[5]}
		}
	}
	return users
}

// lookupUser resolves a user name or a decimal uid. An unknown uid runs with
// its own number as gid and / as home. A user whose ids the sandbox's user
// namespace does not map (in rootless mode only root is) is refused with a
// clear error rather than left to fail in setuid.
func (e *executor) lookupUser(name string) (execproto.User, error) {
	u, err := e.findUser(name)
	if err != nil {
		return u, err
	}
	if e.setup.GVisor && u.UID == executorUID {
		// It could signal the executor (outOfKillReach).
		return execproto.User{}, fmt.Errorf("user %q: uid %d is the executor's own under gvisor", name, u.UID)
	}
	if !e.uidMap.has(u.UID) || !e.gidMap.has(u.GID) {
		return execproto.User{}, fmt.Errorf("user %q (uid %d, gid %d) does not exist in this sandbox: its user namespace maps uids %s and gids %s",
			name, u.UID, u.GID, e.uidMap, e.gidMap)
	}
	return u, nil
}

func (e *executor) findUser(name string) (execproto.User, error) {
	if name == "" {
		return e.setup.User, nil
	}
	if u, ok := e.users[name]; ok {
		return u, nil
	}
	uid, err := strconv.Atoi(name)
	if err != nil || uid < 0 || uid > 65535 {
		return execproto.User{}, fmt.Errorf("unknown user %q", name)
	}
	for _, u := range e.users {
		if u.UID == uid {
			return u, nil
		}
	}
	return execproto.User{Name: name, UID: uid, GID: uid, Home: "/"}, nil
}

// standardPath is the system's command directories, as a Debian-like
// system lists them: where every sandbox's PATH starts.
var standardPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// toolchainBins are where toolchains installed beside the system keep
// their commands, inside the read-only system directories a sandbox shows
// (the host's /usr and /opt, or a template's): /usr/local/go/bin (Go's
// release tarball), /usr/local/cargo/bin (the Rust images), /opt/NAME/bin.
// Each is a parent and the directory under each of its entries:
// /usr/local/*/bin and /opt/*/bin.
var toolchainBins = [][2]string{{"/usr/local", "bin"}, {"/opt", "bin"}}

// sandboxPath is the PATH a command gets when it names none: the
// directories of standardPath, then those of toolchainBins in name order,
// each only if it exists in the sandbox's root (a root without any gets
// standardPath whole). It is read from the sandbox's own tree, after
// pivot_root, never copied from the host's $PATH: the host user's PATH
// names directories the sandbox does not have (~/go/bin, ~/.cargo/bin),
// or has somewhere else, while what is under the sandbox's root is what
// its commands can run. The toolchains come after the system's
// directories, so that none shadows a system command.
func sandboxPath() string {
	var path []string
	isDir := func(d string) bool {
		var st unix.Stat_t
		return unix.Stat(d, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	for _, d := range standardPath {
		if isDir(d) {
			path = append(path, d)
		}
	}
	if len(path) == 0 {
		path = standardPath
	}
	for _, g := range toolchainBins {
		path = append(path, subdirs(g[0], g[1])...)
	}
	return strings.Join(path, ":")
}

// commandEnv is the request's environment with defaults for what it leaves
// out. Nothing of the host's environment is in it: the host sends only what
// the caller named.
func (e *executor) commandEnv(env []string, u execproto.User, tty bool) []string {
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := append([]string{}, env...)
	for i, kv := range out {
		// A PATH of the request's (an image's) gets airlock-event's
		// directory last, so the helper is found without shadowing
		// anything.
		if p, ok := strings.CutPrefix(kv, "PATH="); ok && !slices.Contains(strings.Split(p, ":"), eventBinDir) {
			out[i] = kv + ":" + eventBinDir
		}
	}
	add := func(k, v string) {
		if !set[k] {
			out = append(out, k+"="+v)
			set[k] = true
		}
	}
	add("PATH", e.path)
	add("HOME", u.Home)
	add("USER", u.Name)
	add("LOGNAME", u.Name)
	add("LANG", "C.UTF-8")
	if tty {
		add("TERM", "xterm-256color")
	}
	if e.proxied() {
		proxy := "http://" + e.setup.ProxyAddr
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			add(k, proxy)
		}
		add("NO_PROXY", "localhost,127.0.0.1,::1")
		add("no_proxy", "localhost,127.0.0.1,::1")
	}
	return out
}

// idMap is the ids a user namespace maps, read from /proc/self/uid_map or
// gid_map: ranges of ids inside. A nil idMap (unreadable) maps everything, so
// setuid itself decides.
type idMap [][2]int64

// readIDMap parses a uid_map or gid_map file: "inside outside count" per line.
func readIDMap(path string) idMap {
	data, err := readSmallFile(path)
	if err != nil {
		return nil
	}
	return parseIDMap(string(data))
}

// parseIDMap parses the contents of a uid_map or gid_map file; malformed
// lines are skipped.
func parseIDMap(data string) idMap {
	m := idMap{}
	for _, l := range strings.Split(data, "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil && in >= 0 && n > 0 && in <= math.MaxUint32 && n <= math.MaxUint32 {
			m = append(m, [2]int64{in, n})
		}
	}
	return m
}

func (m idMap) has(id int) bool {
	if m == nil {
		return true
	}
	for _, r := range m {
		if int64(id) >= r[0] && int64(id)-r[0] < r[1] {
			return true
		}
	}
	return false
}

func (m idMap) String() string {
	var parts []string
	for _, r := range m {
		if r[1] == 1 {
			parts = append(parts, strconv.FormatInt(r[0], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r[0], r[0]+r[1]-1))
		}
	}
	return strings.Join(parts, ",")
}

// idNames maps the users' uids and gids to their names; where two users
// share an id, the name first in order wins, so the answer is stable.
func idNames(users map[string]execproto.User) (uids, gids map[int]string) {
	uids, gids = map[int]string{}, map[int]string{}
	for _, name := range slices.Sorted(maps.Keys(users)) {
		u := users[name]
		if _, ok := uids[u.UID]; !ok {
			uids[u.UID] = name
		}
		if _, ok := gids[u.GID]; !ok {
			gids[u.GID] = name
		}
	}
	return uids, gids
}
