#!/usr/bin/env python3
# Usage: python3 bench/ratecpu.py BINDIR [N] (root; needs perf)
# Where the CPU of the handed-off throughput row goes (bench/compare.sh's
# rate row with an `airlock sandbox daemon` running), by part of the work:
# starts a daemon of BINDIR (its own AIRLOCK_HOME), waits for its pool,
# then records the whole machine with call graphs (`perf record -a -g`,
# 999 Hz) while N `BINDIR/airlock sandbox run -- /bin/true` run with
# xargs -P 2, and sorts every sample by process and by the frames on its
# stack: the daemon (create, destroy, GC, sysmon), its spawner, the
# executors (the Go runtime's start, its threads and sysmon, setup, the
# all-threads system calls that take the ids and apply landlock, the start
# of the command, the exit), /bin/true, the thin client, xargs and the
# kernel's own threads (namespace and cgroup teardown, RCU). Prints ms of
# CPU per run for each part; "idle" is CPU nobody used. Call graphs cost
# CPU of their own: compare the parts with each other, and the total with
# bench/daemoncpu.py's (no perf) for the absolute cost. Other load on the
# machine shows as "other:" rows.
import os, sys, time, subprocess, re, collections

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchdaemon

B = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
HZ = 999

d = benchdaemon.Daemon(B, 'ratecpu-')
env, spawners = d.env, d.spawners
data = d.home + '.perf'
t = time.monotonic()
subprocess.run(['perf', 'record', '-a', '-g', '-F', str(HZ), '-o', data, '--', 'sh', '-c',
                f'seq {N} | xargs -P 2 -I{{}} {B}/airlock sandbox run -- /bin/true >/dev/null 2>&1'],
               env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
w = time.monotonic() - t
stop = d.stop()
daemon = str(d.proc.pid)


def part(comm, pid, s):
    """The part of the work one sample's process and stack (s, its frames joined) belong to."""
    if pid == daemon:
        if 'runtime.sysmon' in s:
            return 'daemon: Go sysmon'
        if 'gcBgMarkWorker' in s or 'gcAssist' in s:
            return 'daemon: Go GC'
        if 'Destroy' in s or 'teardown' in s:
            return 'daemon: destroy'
        if 'linux.(*Backend).Create' in s:
            return 'daemon: create (cgroup, spawn request, handshake)'
        return 'daemon: hand-off, pool, Go runtime'
    if pid in spawners:
        return 'spawner (clone, namespaces)'
    if comm == 'airlock-exec':
        for key, name in (
            ('runtime.sysmon', 'Go sysmon'),
            ('vfork.', 'start the command (vfork, exec)'),
            ('forkExec', 'start the command (vfork, exec)'),
            ('AllThreadsSyscall', 'all-threads system calls (ids, landlock)'),
            ('executor.setup', 'setup (mounts, /dev, /etc, seccomp)'),
            ('landlock', 'setup (mounts, /dev, /etc, seccomp)'),
            ('seccomp', 'setup (mounts, /dev, /etc, seccomp)'),
            ('takeIDs', 'ids and hello'),
            ('hello', 'ids and hello'),
            ('runtime.rt0_go', 'Go runtime start (schedinit, package inits)'),
            ('runtime.doInit', 'Go runtime start (schedinit, package inits)'),
            ('runtime.newm', 'Go threads (newm, mstart)'),
            ('runtime.mstart', 'Go threads (newm, mstart)'),
            ('get_signal', 'exit (kernel)'),
            ('do_exit', 'exit (kernel)'),
            ('executor.', 'serve, other'),
            ('runtime.', 'Go runtime, other'),
        ):
            if key in s:
                return 'executor: ' + name
        return 'executor: kernel only (exec, page faults)'
    if comm == 'true':
        return '/bin/true'
    if comm == 'airlock':
        return 'client (thin entry)'
    if comm in ('xargs', 'seq', 'sh'):
        return 'xargs'
    if comm.startswith(('kworker', 'ksoftirqd', 'rcu')):
        return 'kernel threads (kworker, softirq, rcu)'
    if comm == 'swapper':
        return 'idle'
    return 'other: ' + comm


parts = collections.Counter()
total = 0
cur, frames = None, []
script = subprocess.Popen(['perf', 'script', '-i', data, '-F', 'comm,pid,tid,ip,sym'],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def flush():
    global total
    if cur is not None:
        parts[part(cur[0], cur[1], ' '.join(frames))] += 1
        total += 1


for line in script.stdout:
    if not line.strip():
        flush()
        cur, frames = None, []
    elif line[0] in ' \t':
        f = line.split(None, 1)
        frames.append(f[1].strip() if len(f) > 1 else '')
    else:
        flush()
        frames = []
        p = line.split()
        # A command name may hold spaces: pid/tid is the last field of digits and a slash.
        i = max(j for j, x in enumerate(p) if '/' in x and x.split('/')[0].isdigit())
        cur = (' '.join(p[:i]), p[i].split('/')[0])
flush()
script.wait()
os.remove(data)
print(f'{N} runs, {N / w:.1f}/s under perf; the daemon: {stop or "(no stop line)"}')
for k, v in sorted(parts.items(), key=lambda kv: (kv[0].split(':')[0], -kv[1])):
    print(f'{k:58s} {v * 1000 / HZ / N:6.2f} ms/run')
print(f'{"all CPUs, every sample":58s} {total * 1000 / HZ / N:6.2f} ms/run')
