#!/usr/bin/env python3
# Usage: python3 bench/startrate.py N BLOCKS NAME=[VAR=VAL ...] CMD ...
# Throughput of each side in alternating blocks: N runs a block started by xargs -P 2 (two
# workers, as bench/compare.sh's throughput row), sandboxes/s and the CPU of the reaped
# descendants per run (processes that outlive their parent are not counted).
import os, sys, time, resource, subprocess, statistics
N=int(sys.argv[1]); B=int(sys.argv[2]); sides=[]
for a in sys.argv[3:]:
    n,c=a.split('=',1); sides.append((n,c))
res={n:[] for n,_ in sides}
for b in range(B):
    for n,c in (sides if b%2==0 else sides[::-1]):
        env=dict(os.environ)
        cc=c.split()
        while '=' in cc[0] and not cc[0].startswith('/'):
            k,v=cc.pop(0).split('=',1); env[k]=v
        r0=resource.getrusage(resource.RUSAGE_CHILDREN); t=time.monotonic()
        subprocess.run(['xargs','-P','2','-I{}']+cc, input='\n'.join(str(i) for i in range(N))+'\n', text=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        w=time.monotonic()-t; r1=resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu=(r1.ru_utime+r1.ru_stime-r0.ru_utime-r0.ru_stime)*1000/N
        res[n].append((N/w,cpu)); print(b,n,f"{N/w:.1f}/s cpu {cpu:.1f} ms/sandbox",flush=True)
        time.sleep(1)
for n,_ in sides:
    print(n, 'median rate %.1f/s'%statistics.median(x[0] for x in res[n]), 'cpu %.1f ms'%statistics.median(x[1] for x in res[n]))
