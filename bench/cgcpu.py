#!/usr/bin/env python3
# Usage: python3 bench/cgcpu.py N BLOCKS NAME=CMD ... (root; a cgroup2 tree)
# The CPU a start loop costs, its whole process tree and nothing else on the
# machine: each block runs N of a side's command with xargs -P 2 (bench/
# compare.sh's throughput row) inside a cgroup2 group of its own, waits for
# the group to be empty (detached sandboxes still dying) and reads the
# group's cpu.stat, which counts every process started in it and every group
# made below it (airlock nests its sandboxes' groups under its own), their
# exits included. The kernel's own threads (netns cleanup, RCU callbacks,
# cgroup offlining) are not counted: bench/treecpu.py shows them. Prints
# per block and per side (median) the CPU per run, user and system, and
# runs/s. The sides alternate.
import os, sys, time, subprocess, statistics, shutil
N = int(sys.argv[1]); B = int(sys.argv[2]); sides = [a.split('=', 1) for a in sys.argv[3:]]
root = os.environ.get('CGROOT', '/sys/fs/cgroup/unified')
if not os.path.exists(root + '/cgroup.procs'):
    root = '/sys/fs/cgroup'
def stat(d):
    return {k: int(v) for k, v in (l.split() for l in open(d + '/cpu.stat'))}
def rmtree(d):
    for e in os.scandir(d):
        if e.is_dir(follow_symlinks=False):
            rmtree(e.path)
    os.rmdir(d)
res = {n: [] for n, _ in sides}
for b in range(B):
    for n, c in (sides if b % 2 == 0 else sides[::-1]):
        d = f'{root}/cgcpu-{os.getpid()}-{b}-{n}'
        os.mkdir(d)
        time.sleep(0.5)
        t = time.monotonic()
        subprocess.run(['sh', '-c', f'echo $$ > {d}/cgroup.procs && seq {N} | xargs -P 2 -I{{}} {c} >/dev/null 2>&1'], check=True)
        w = time.monotonic() - t
        for _ in range(500):
            if 'populated 0' in open(d + '/cgroup.events').read():
                break
            time.sleep(0.01)
        s = stat(d)
        try:
            rmtree(d)
        except OSError as e:
            print('left', d, e, file=sys.stderr)
        u, sy, tot = s['user_usec'] / 1000 / N, s['system_usec'] / 1000 / N, s['usage_usec'] / 1000 / N
        res[n].append((N / w, tot, u, sy))
        print(f'{b} {n}: {N / w:.1f}/s  cpu {tot:.2f} ms/run (user {u:.2f}, system {sy:.2f})', flush=True)
for n, _ in sides:
    m = lambda i: statistics.median(x[i] for x in res[n])
    print(f'{n}: median {m(0):.1f}/s  cpu {m(1):.2f} ms/run (user {m(2):.2f}, system {m(3):.2f})')
