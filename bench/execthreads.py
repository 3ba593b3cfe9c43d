#!/usr/bin/env python3
# Usage: python3 bench/execthreads.py BINDIR [N] (root; needs perf)
# The executor's threads and its all-threads system calls, per sandbox, in
# the handed-off throughput row (an `airlock sandbox daemon` of BINDIR, N
# `airlock sandbox run -- /bin/true` with xargs -P 2). Records the whole
# machine's task:task_newtask and a few system-call tracepoints with
# `perf record -a` (no call graphs, no strace: the executor runs at its own
# pace) and counts, for every process that took its ids (setresgid: an
# executor), the threads it started and each call of interest. A call made
# on every thread (AllThreadsSyscall) shows once per thread, so its count
# per executor is the number of threads it ran on. tgkill and sched_yield
# are the cost of those calls (a signal to every other thread, and the
# caller's spin while they answer); nanosleep is sysmon's polling.
import os, sys, subprocess, collections, re

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchdaemon

B = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 100
calls = ['setresgid', 'setgroups', 'setresuid', 'capset', 'prctl', 'landlock_restrict_self',
         'seccomp', 'tgkill', 'sched_yield', 'nanosleep', 'futex', 'clone', 'clone3', 'wait4',
         'rt_sigprocmask', 'epoll_pwait', 'pidfd_open']
events = ['task:task_newtask'] + [f'syscalls:sys_enter_{c}' for c in calls]

d = benchdaemon.Daemon(B, 'execthreads-')
spawners = d.spawners
data = d.home + '.perf'
args = ['perf', 'record', '-a', '-o', data]
for e in events:
    args += ['-e', e]
subprocess.run(args + ['--', 'sh', '-c',
                       f'seq {N} | xargs -P 2 -I{{}} {B}/airlock sandbox run -- /bin/true >/dev/null 2>&1; sleep 1'],
               env=d.env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
d.stop()

out = subprocess.run(['perf', 'script', '-i', data, '-F', 'comm,pid,tid,event,trace'],
                     capture_output=True, text=True).stdout
os.remove(data)
# pid -> event -> count; pid -> threads started (CLONE_THREAD clones).
per = collections.defaultdict(collections.Counter)
ex = set()
ours = set()  # processes the daemon's spawner started: its executors
opts = collections.Counter()
for line in out.splitlines():
    m = re.match(r'\s*(.+?)\s+(\d+)/(\d+)\s+(\S+):\s*(.*)$', line)
    if not m:
        continue
    comm, pid, tid, ev, rest = m.groups()
    if comm.strip() != 'airlock-exec' and ev != 'task:task_newtask':
        continue
    ev = ev.split(':')[-1].replace('sys_enter_', '')
    if ev == 'task_newtask':
        f = re.search(r'clone_flags=([0-9a-fx]+)', rest)
        flags = int(f.group(1), 16) if f else 0
        ev = 'thread' if flags & 0x10000 else 'process'
        child = re.search(r'pid=(\d+)', rest)
        if pid in spawners and ev == 'process' and child:
            ours.add(child.group(1))
    if ev == 'setresgid':
        ex.add(pid)
    if ev == 'prctl':
        o = re.search(r'option: (0x[0-9a-f]+)', rest)
        ev = 'prctl ' + (str(int(o.group(1), 16)) if o else '?')
    per[pid][ev] += 1
ex &= ours  # other airlock daemons on the machine are not this one's
n = len(ex)
print(f'{n} executors')
tot = collections.Counter()
for p in ex:
    tot.update(per[p])
names = {'prctl 1': 'prctl PDEATHSIG', 'prctl 4': 'prctl DUMPABLE', 'prctl 38': 'prctl NO_NEW_PRIVS',
         'prctl 24': 'prctl CAPBSET_DROP', 'prctl 47': 'prctl CAP_AMBIENT', 'prctl 8': 'prctl KEEPCAPS'}
print(f'threads started: {tot["thread"] / n:.2f} per executor (so {1 + tot["thread"] / n:.2f} threads)')
if os.environ.get('HIST'):
    for k in os.environ['HIST'].split(','):
        print(f'{k} per executor:', sorted(collections.Counter(per[p][k] for p in ex).items()))
for k in sorted(tot):
    if k == 'thread':
        continue
    print(f'{names.get(k, k)}: {tot[k] / n:.2f}')
