package cgroup

import (
	"reflect"
	"strings"
	"testing"
)

// Fixtures are real /proc/self/mountinfo and /proc/self/cgroup contents,
// trimmed to the cgroup lines.
const (
	hybridMountinfo = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	hybridCgroup = `9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/86d3
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
`
	v2Mountinfo = `24 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	v2Cgroup = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u5.scope\n"

	// A v1 container without a cgroup namespace: the mounts show the
	// container's subtree, /proc/self/cgroup the host paths.
	dockerV1Mountinfo = `700 690 0:40 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
701 690 0:41 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
702 690 0:42 /docker/abc /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids
703 690 0:43 /docker/abc /sys/fs/cgroup/freezer ro,nosuid - cgroup cgroup rw,freezer
`
	dockerV1Cgroup = `7:pids:/docker/abc/sub
5:memory:/docker/abc
3:cpu,cpuacct:/docker/abc
2:freezer:/docker/abc
`
)

func TestLocate(t *testing.T) {
	tests := []struct {
		name      string
		mountinfo string
		cgroup    string
		want      location
		reason    string // a substring of the joined reasons, "" for none
	}{
		{
			name:      "hybrid",
			mountinfo: hybridMountinfo,
			cgroup:    hybridCgroup,
			want: location{
				version: "hybrid",
				v1: []v1Loc{
					{ctrlCPU, "/sys/fs/cgroup/cpu"},
					{ctrlCPUAcct, "/sys/fs/cgroup/cpuacct"},
					{ctrlMemory, "/sys/fs/cgroup/memory/process_api/86d3"},
					{ctrlFreezer, "/sys/fs/cgroup/freezer"},
					{ctrlPids, "/sys/fs/cgroup/pids"},
				},
				v2Mount: "/sys/fs/cgroup/unified",
				v2Path:  "/",
				v2Dir:   "/sys/fs/cgroup/unified",
			},
		},
		{
			name:      "v2",
			mountinfo: v2Mountinfo,
			cgroup:    v2Cgroup,
			want: location{
				version: "v2",
				v2Mount: "/sys/fs/cgroup",
				v2Path:  "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u5.scope",
				v2Dir:   "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-u5.scope",
			},
		},
		{
			name:      "v1 container",
			mountinfo: dockerV1Mountinfo,
			cgroup:    dockerV1Cgroup,
			want: location{
				version: "v1",
				v1: []v1Loc{
					{ctrlMemory, "/sys/fs/cgroup/memory"},
					{ctrlCPU | ctrlCPUAcct, "/sys/fs/cgroup/cpu,cpuacct"},
					{ctrlPids, "/sys/fs/cgroup/pids/sub"},
					{ctrlFreezer, "/sys/fs/cgroup/freezer"},
				},
			},
		},
		{
			name:      "v2 outside namespace root",
			mountinfo: v2Mountinfo,
			cgroup:    "0::/../../system.slice/x.service\n",
			want:      location{version: "v2", v2Mount: "/sys/fs/cgroup"},
			reason:    "not visible under /sys/fs/cgroup",
		},
		{
			name:      "v1 memory outside mount root",
			mountinfo: dockerV1Mountinfo,
			cgroup:    strings.Replace(dockerV1Cgroup, "5:memory:/docker/abc", "5:memory:/other", 1),
			want: location{
				version: "v1",
				v1: []v1Loc{
					{ctrlCPU | ctrlCPUAcct, "/sys/fs/cgroup/cpu,cpuacct"},
					{ctrlPids, "/sys/fs/cgroup/pids/sub"},
					{ctrlFreezer, "/sys/fs/cgroup/freezer"},
				},
			},
			reason: "memory controller: the caller's cgroup is not visible under /sys/fs/cgroup/memory",
		},
		{
			name:      "escaped mount point",
			mountinfo: `35 24 0:30 / /run/my\040cgroup rw - cgroup2 cgroup2 rw` + "\n",
			cgroup:    "0::/a\n",
			want:      location{version: "v2", v2Mount: "/run/my cgroup", v2Path: "/a", v2Dir: "/run/my cgroup/a"},
		},
		{
			name:      "none",
			mountinfo: "24 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw\n",
			cgroup:    "0::/\n",
			want:      location{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := locate(parseMountinfo([]byte(tt.mountinfo)), parseProcCgroup([]byte(tt.cgroup)))
			reasons := strings.Join(got.reasons, "; ")
			got.reasons = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("locate() = %+v, want %+v", got, tt.want)
			}
			if tt.reason == "" && reasons != "" || !strings.Contains(reasons, tt.reason) {
				t.Errorf("locate() reasons = %q, want %q", reasons, tt.reason)
			}
		})
	}
}

// TestLocateFavorDynmods: favordynmods on any cgroup mount, v1 or
// cgroup2, is seen (the rwsem it puts in its slow mode is every
// hierarchy's); an option that merely contains the word is not it.
func TestLocateFavorDynmods(t *testing.T) {
	cg := parseProcCgroup([]byte(hybridCgroup))
	if locate(parseMountinfo([]byte(hybridMountinfo)), cg).favor {
		t.Error("favor without favordynmods")
	}
	for _, repl := range []struct{ from, to string }{
		{"cgroup rw,memory", "cgroup rw,memory,favordynmods"},
		{"cgroup2 cgroup2 rw", "cgroup2 cgroup2 rw,nsdelegate,favordynmods"},
	} {
		mi := strings.Replace(hybridMountinfo, repl.from, repl.to, 1)
		if !locate(parseMountinfo([]byte(mi)), cg).favor {
			t.Errorf("no favor with %q", repl.to)
		}
	}
	mi := strings.Replace(hybridMountinfo, "cgroup rw,memory", "cgroup rw,memory,nofavordynmods", 1)
	if locate(parseMountinfo([]byte(mi)), cg).favor {
		t.Error("favor with nofavordynmods")
	}
}

func TestKeyedValue(t *testing.T) {
	const oomControl = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
	const events = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n"
	tests := []struct {
		data, key string
		want      int64
		ok        bool
	}{
		{oomControl, "oom_kill", 3, true},
		{oomControl, "oom_kill_disable", 0, true},
		{events, "max", 17, true},
		{events, "oom_kill", 1, true},
		{events, "oom_group", 0, false},
		{"populated 1\nfrozen 0\n", "populated", 1, true},
		{"usage_usec 123456\nuser_usec 1\n", "usage_usec", 123456, true},
		{"max x\n", "max", 0, false},
		{"", "max", 0, false},
	}
	for _, tt := range tests {
		got, ok := keyedValue([]byte(tt.data), tt.key)
		if got != tt.want || ok != tt.ok {
			t.Errorf("keyedValue(%q, %q) = %d, %v, want %d, %v", tt.data, tt.key, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParsePids(t *testing.T) {
	got := parsePids([]byte("12\n345\n\n0\n-1\nx\n7\n"))
	want := []int{12, 345, 7}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsePids() = %v, want %v", got, want)
	}
}

func FuzzLocate(f *testing.F) {
	f.Add(hybridMountinfo, hybridCgroup)
	f.Add(v2Mountinfo, v2Cgroup)
	f.Add(dockerV1Mountinfo, dockerV1Cgroup)
	f.Fuzz(func(t *testing.T, mountinfo, cgroup string) {
		mounts := parseMountinfo([]byte(mountinfo))
		loc := locate(mounts, parseProcCgroup([]byte(cgroup)))
		for _, h := range loc.v1 {
			if h.ctrls == 0 || !underSomeMount(h.dir, mounts) {
				t.Fatalf("locate() v1 entry %+v is not under a cgroup mount", h)
			}
		}
		if loc.v2Dir != "" && !strings.HasPrefix(loc.v2Dir, strings.TrimSuffix(loc.v2Mount, "/")) {
			t.Fatalf("locate() v2Dir %q is not under %q", loc.v2Dir, loc.v2Mount)
		}
		if rel := strings.TrimPrefix(loc.v2Dir, strings.TrimSuffix(loc.v2Mount, "/")); strings.Contains(rel+"/", "/../") {
			t.Fatalf("locate() v2Dir %q escapes its mount", loc.v2Dir)
		}
	})
}

func underSomeMount(dir string, mounts []cgroupMount) bool {
	for _, m := range mounts {
		if strings.HasPrefix(dir, strings.TrimSuffix(m.mountpoint, "/")) {
			return true
		}
	}
	return false
}
