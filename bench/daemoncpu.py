#!/usr/bin/env python3
# Usage: python3 bench/daemoncpu.py N BLOCKS NAME=BINDIR[,VAR=VALUE...] ... (root; a cgroup2 tree)
# The CPU of the handed-off throughput row (bench/compare.sh's rate row with
# an `airlock sandbox daemon` running): each block starts a daemon of BINDIR
# (its own AIRLOCK_HOME; VAR=VALUE in its environment) inside a cgroup2
# group of its own, waits for its pool, then runs N `BINDIR/airlock sandbox
# run -- /bin/true` with xargs -P 2 in the same group and reads the group's
# cpu.stat before and after: the clients, the daemon, its spawner, the
# sandboxes (their groups are nested below the daemon's) and the refills
# and destroys that the runs cause, nothing else on the machine (kernel
# threads excepted). Prints per block and per side (median) the CPU per run
# and runs/s, the daemon's pool hits and misses, and the executors' own CPU
# per run (the spawner's reaped children: executors and their commands,
# none of the clients', the daemon's or the kernel threads'). The sides
# alternate.
import os, sys, time, subprocess, statistics, tempfile, shutil, signal, re
N = int(sys.argv[1]); B = int(sys.argv[2])
sides = []
for a in sys.argv[3:]:
    name, rest = a.split('=', 1)
    parts = rest.split(',')
    sides.append((name, parts[0], dict(p.split('=', 1) for p in parts[1:])))
root = os.environ.get('CGROOT', '/sys/fs/cgroup/unified')
if not os.path.exists(root + '/cgroup.procs'):
    root = '/sys/fs/cgroup'
def usage(d):
    return {k: int(v) for k, v in (l.split() for l in open(d + '/cpu.stat'))}
def children(pids):
    """The reaped children's CPU (cutime + cstime) of pids, in ms."""
    tick = os.sysconf('SC_CLK_TCK')
    tot = 0
    for p in pids:
        try:
            f = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        tot += int(f[13]) + int(f[14])
    return tot * 1000 / tick
def rmtree(d):
    for e in os.scandir(d):
        if e.is_dir(follow_symlinks=False):
            rmtree(e.path)
    os.rmdir(d)
res = {n: [] for n, _, _ in sides}
for b in range(B):
    for name, bindir, extra in (sides if b % 2 == 0 else sides[::-1]):
        d = f'{root}/daemoncpu-{os.getpid()}-{b}-{name}'
        os.mkdir(d)
        home = tempfile.mkdtemp(prefix='daemoncpu-')
        env = dict(os.environ, AIRLOCK_HOME=home, **extra)
        log = open(home + '.log', 'w')
        dm = subprocess.Popen(['sh', '-c', f'echo $$ > {d}/cgroup.procs && exec {bindir}/airlock sandbox daemon'], env=env, stderr=log)
        for _ in range(200):
            if os.path.exists(home + '/sandbox.sock'):
                break
            time.sleep(0.05)
        time.sleep(1.5)  # the pool's first sandboxes
        # The spawner's reaped children: the executors (and their
        # commands), whose CPU the kernel adds to the spawner's cutime and
        # cstime as it reaps them; the part of the tree that the executor
        # changes alone.
        spawner = subprocess.run(['pgrep', '-P', str(dm.pid)], capture_output=True, text=True).stdout.split()
        c0 = children(spawner)
        s0 = usage(d)
        t = time.monotonic()
        cenv = dict(os.environ, AIRLOCK_HOME=home)
        subprocess.run(['sh', '-c', f'echo $$ > {d}/cgroup.procs && seq {N} | xargs -P 2 -I{{}} {bindir}/airlock sandbox run -- /bin/true >/dev/null 2>&1'], check=True, env=cenv)
        w = time.monotonic() - t
        time.sleep(1.0)  # the last destroys and the refill
        s1 = usage(d)
        c1 = children(spawner)
        dm.send_signal(signal.SIGTERM)
        dm.wait()
        log.close()
        stop = re.findall(r'served=\S+ refused=\S+ pool_hits=\S+ pool_misses=\S+', open(home + '.log').read())
        subprocess.run([f'{bindir}/airlock', 'sandbox', 'gc', '--forget'], env=cenv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)
        os.remove(home + '.log')
        for _ in range(500):
            if 'populated 0' in open(d + '/cgroup.events').read():
                break
            time.sleep(0.01)
        try:
            rmtree(d)
        except OSError as e:
            print('left', d, e, file=sys.stderr)
        tot = (s1['usage_usec'] - s0['usage_usec']) / 1000 / N
        u = (s1['user_usec'] - s0['user_usec']) / 1000 / N
        sy = (s1['system_usec'] - s0['system_usec']) / 1000 / N
        ex = (c1 - c0) / N
        res[name].append((N / w, tot, u, sy, ex))
        print(f'{b} {name}: {N / w:.1f}/s  cpu {tot:.2f} ms/run (user {u:.2f}, system {sy:.2f}; executors {ex:.2f})  {stop[-1] if stop else ""}', flush=True)
for name, _, _ in sides:
    m = lambda i: statistics.median(x[i] for x in res[name])
    print(f'{name}: median {m(0):.1f}/s  cpu {m(1):.2f} ms/run (user {m(2):.2f}, system {m(3):.2f}; executors {m(4):.2f})')
