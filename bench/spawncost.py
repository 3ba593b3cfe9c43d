#!/usr/bin/env python3
# Usage (root): python3 bench/spawncost.py RUNS BLOCKS OLD/bin NEW/bin ...
# Each bin directory holds airlock, airlock-host and airlock-exec (go build ./cmd/...).
# Per handed-off `sandbox run -- /bin/true`: the daemon's spawner (its own
# faults and CPU: the clones) and the executors it reaped (cminflt), read
# from /proc/<pid>/stat before and after N runs. Builds alternate in blocks.
import os, subprocess, sys, time, tempfile, glob
N = int(sys.argv[1]); BLOCKS = int(sys.argv[2]); builds = sys.argv[3:]
tck = os.sysconf('SC_CLK_TCK')
def stat(pid):
    s = open(f'/proc/{pid}/stat').read(); f = s[s.rindex(')')+2:].split()
    # fields from state (index 0 = field 3)
    return dict(minflt=int(f[7]), cminflt=int(f[8]), utime=int(f[11]), stime=int(f[12]), cutime=int(f[13]), cstime=int(f[14]))
def children(pid):
    out = []
    for t in glob.glob(f'/proc/{pid}/task/*/children'):
        out += [int(x) for x in open(t).read().split()]
    return out
def cmdline(pid):
    try: return open(f'/proc/{pid}/cmdline').read().split('\0')
    except OSError: return []
res = {b: [] for b in builds}
for blk in range(BLOCKS):
    for b in builds:
        home = tempfile.mkdtemp(prefix='s29home')
        env = dict(os.environ, AIRLOCK_HOME=home)
        d = subprocess.Popen([f'{b}/airlock', 'sandbox', 'daemon'], env=env, stderr=subprocess.DEVNULL)
        sp = None
        for _ in range(300):
            time.sleep(0.1)
            for c in children(d.pid):
                if cmdline(c)[:2] == ['airlock-exec', 'spawn']: sp = c
            if sp and os.path.exists(f'{home}/sandbox.sock'): break
        time.sleep(2)
        a, da = stat(sp), stat(d.pid)
        for i in range(N):
            r = subprocess.run([f'{b}/airlock', 'sandbox', 'run', '--', '/bin/true'], env=env)
            assert r.returncode == 0
            time.sleep(0.15)
        time.sleep(1.5)
        z, dz = stat(sp), stat(d.pid)
        d.terminate(); d.wait()
        subprocess.run([f'{b}/airlock', 'sandbox', 'gc', '--forget'], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(['rm', '-rf', home])
        per = lambda k: (z[k]-a[k])/N
        r = dict(sp_flt=per('minflt'), sp_cpu=(per('utime')+per('stime'))*1000/tck, ex_flt=per('cminflt'), ex_cpu=(per('cutime')+per('cstime'))*1000/tck,
                 d_flt=(dz['minflt']-da['minflt'])/N, d_cpu=((dz['utime']-da['utime'])+(dz['stime']-da['stime']))*1000/tck/N)
        res[b].append(r)
        print(blk, b, ' '.join(f'{k}={v:.1f}' for k, v in r.items()), flush=True)
import statistics
for b in builds:
    print(b, ' '.join(f'{k}={statistics.median(x[k] for x in res[b]):.1f}' for k in res[b][0]))
