#!/usr/bin/env python3
# Usage: python3 bench/v1attach.py procs self [procs self ...]   (root; cgroup v1 cpu, memory, pids
# mounted at /sys/fs/cgroup/<name>)
# What joining a sandbox's v1 groups costs, 30 rounds a mode: `procs` forks a child and the parent
# writes its pid to cgroup.procs in each group (the host's way before 2026-12-07, which waits for an
# RCU grace period on hierarchies without favordynmods); `self` has the child write "0" to each
# group's tasks file itself (the executor's way since). Prints the median, max and min in ms.
import os,time,statistics,sys
hs=['cpu','memory','pids']
for h in hs: os.makedirs(f'/sys/fs/cgroup/{h}/airlock-v1attach',exist_ok=True)
def run(mode, n=30):
    tot=[]
    for i in range(n):
        fds=[os.open(f'/sys/fs/cgroup/{h}/airlock-v1attach/'+('tasks' if mode=='self' else 'cgroup.procs'), os.O_WRONLY) for h in hs]
        r,w=os.pipe()
        pid=os.fork()
        if pid==0:
            os.close(w)
            if mode=='self':
                t=time.monotonic()
                for fd in fds: os.write(fd,b'0')
                d=(time.monotonic()-t)*1000
                with open('/tmp/airlock-v1attach-res','a') as f: f.write(f'{d}\n')
            os.read(r,1)
            os._exit(0)
        os.close(r)
        time.sleep(0.05)
        if mode=='procs':
            t=time.monotonic()
            for fd in fds: os.write(fd,str(pid).encode())
            tot.append((time.monotonic()-t)*1000)
        os.write(w,b'x'); os.close(w); os.waitpid(pid,0)
        for fd in fds: os.close(fd)
    if mode=='self':
        tot=[float(x) for x in open('/tmp/airlock-v1attach-res').read().split()]; os.unlink('/tmp/airlock-v1attach-res')
    return tot
for mode in sys.argv[1:]:
    t=run(mode)
    print(mode, 'median', round(statistics.median(t),3), 'max', round(max(t),2), 'min', round(min(t),3))
time.sleep(0.2)
for h in hs: os.rmdir(f'/sys/fs/cgroup/{h}/airlock-v1attach')
