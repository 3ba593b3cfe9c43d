#!/usr/bin/env python3
# Usage: python3 bench/perfcat.py PERF.DATA COMM HZ RUNS (after perf record -g -F HZ over RUNS runs)
# Splits the samples of processes named COMM into the host-side paths of a sandbox start
# (first match of the call stack wins, in the order below) and prints ms per run, kernel
# and user: what bench/compare.sh's rate row spends in the front end (COMM airlock) or
# the daemon (airlock-host). docs/benchmarks.md, tput29.
import sys, subprocess, collections
f, comm, hz, runs = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
out = subprocess.run(['perf','script','-i',f,'--comm',comm,'-F','ip,sym,dso'], capture_output=True, text=True).stdout
samples = out.split('\n\n')
cats = [
 ('namespaces at clone (copy_namespaces; copy_net_ns)', ['copy_namespaces']),
 ('exec of the executor (vfork.Exec: clone, maps, exec wait)', ['vfork.Exec']),
 ('cgroup: detect + parent groups (cgroups()/located)', ['linux.(*Backend).cgroups','cgroup.init.','cgroup.NewManagerWith']),
 ('cgroup: make the group + limits (makeCgroup)', ['makeCgroup']),
 ('cgroup: v1 tasks files (OpenV1Tasks)', ['OpenV1Tasks']),
 ('cgroup: reap leftovers (Prepare/reapDetached)', ['reapDetached','Backend).Prepare']),
 ('cgroup: counters per command (Start/Wait stats)', ['cgroup.(*Group).stats','Counters','checkLimits']),
 ('random bytes: sandbox id, uid slot start (crypto/rand, sandbox.Random)', ['crypto/rand', 'sandbox.Random']),
 ('id lock + uid slot (idLocks.hold, uidAllocator)', ['idLocks','uidAllocator']),
 ('teardown (DestroyDetached)', ['teardownMode','DestroyDetached']),
 ('handshake + command I/O (execconn)', ['execconn.']),
 ('GOMAXPROCS(1)', ['runtime.GOMAXPROCS']),
 ('page faults elsewhere (runtime heap/stacks, init)', ['exc_page_fault']),
 ('thread create/exit (newm, clone, do_exit)', ['runtime.newm','do_exit','runtime.clone']),
 ('scheduler: futex/nanosleep/yield', ['futex','nanosleep','sched_yield','runtime.usleep']),
 ('process start/exit (execve, exit_mmap)', ['execve','exit_mmap','do_group_exit','bprm']),
]
k = collections.Counter(); u = collections.Counter(); tot_k = tot_u = 0
for s in samples:
    lines = [l.strip() for l in s.strip().split('\n') if l.strip()]
    if not lines: continue
    kern = 'kernel.kallsyms' in lines[0]
    if kern: tot_k += 1
    else: tot_u += 1
    st = '\n'.join(lines)
    for name, keys in cats:
        if any(x in st for x in keys):
            (k if kern else u)[name] += 1
            break
    else:
        (k if kern else u)['other'] += 1
ms = lambda n: n / hz * 1000 / runs
print(f'{comm}: kernel {ms(tot_k):.2f} ms/run, user {ms(tot_u):.2f} ms/run (perf at {hz:.0f} Hz, {runs} runs)')
for name, _ in cats + [('other', 0)]:
    print(f'  {name:60s} kernel {ms(k[name]):6.2f}  user {ms(u[name]):6.2f}  ({100*k[name]/max(tot_k,1):4.1f}% of its kernel)')
