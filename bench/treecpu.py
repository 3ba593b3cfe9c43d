#!/usr/bin/env python3
# Usage: python3 bench/treecpu.py N BLOCKS NAME=CMD ... (root; needs perf)
# System-wide CPU of a start loop, split by who spends it: each block runs N
# of a side's command with xargs -P 2 (bench/compare.sh's throughput row)
# under `perf record -a` (cpu-clock, 1999 Hz, no call graphs: low overhead),
# the sides alternating; prints per side the median over blocks of the CPU
# each run cost, by command name and user/kernel, plus the kernel's own
# threads (kworker, ksoftirqd, rcu: namespace and cgroup teardown after the
# processes exit, RCU callbacks). Kernel threads also serve other load on
# the machine: compare their rows between sides of one run only. Other
# commands' samples are left out unless SHOWALL=1; ONLY=comm,comm,... sets
# the commands shown (default: airlock, airlock-exec, bwrap, true, xargs and
# the kernel's threads).
import os, sys, subprocess, statistics, collections, tempfile
N = int(sys.argv[1]); B = int(sys.argv[2]); sides = [a.split('=', 1) for a in sys.argv[3:]]
HZ = 1999
def group(comm):
    for p, g in (('kworker', 'kworker'), ('ksoftirqd', 'ksoftirqd'), ('rcu', 'rcu threads'), ('migration', None), ('swapper', None)):
        if comm.startswith(p):
            return g
    return comm
res = {n: collections.defaultdict(list) for n, _ in sides}
for b in range(B):
    for n, c in (sides if b % 2 == 0 else sides[::-1]):
        f = tempfile.mktemp(suffix='.perf')
        subprocess.run(['perf', 'record', '-q', '-a', '-F', str(HZ), '-e', 'cpu-clock', '-o', f, '--', 'sh', '-c',
                        f'seq {N} | xargs -P 2 -I{{}} {c} >/dev/null 2>&1'], check=True, stderr=subprocess.DEVNULL)
        out = subprocess.run(['perf', 'script', '-i', f, '-F', 'comm,ip'], capture_output=True, text=True).stdout
        os.unlink(f)
        cnt = collections.Counter()
        for line in out.splitlines():
            p = line.split()
            if len(p) < 2:
                continue
            g = group(' '.join(p[:-1]))
            if g is None:
                continue
            kern = int(p[-1], 16) >= 0xffff800000000000
            cnt[(g, 'kernel' if kern else 'user')] += 1
        per = {k: v * 1000 / HZ / N for k, v in cnt.items()}
        for k, v in per.items():
            res[n][k].append(v)
        print(b, n, 'done', flush=True)
only = set(os.environ.get('ONLY', 'airlock,airlock-exec,bwrap,true,xargs,kworker,ksoftirqd,rcu threads,:-1').split(','))
med = lambda v: statistics.median(v + [0] * (B - len(v)))
for n, _ in sides:
    print(f'== {n}: ms of CPU per run, median of {B} blocks of {N}')
    rows = sorted(res[n].items(), key=lambda kv: -med(kv[1]))
    tot = sum(med(v) for (g, _), v in rows if g in only)
    print(f'  {"total of those shown":29s} {tot:6.2f}')
    for (g, mode), v in rows:
        if med(v) >= 0.05 and (g in only or os.environ.get('SHOWALL')):
            print(f'  {g:22s} {mode:6s} {med(v):6.2f}')
