#!/usr/bin/env python3
# Usage: python3 bench/phases.py ROUNDS NAME=[VAR=VAL ...] CMD ... (root for sandboxes)
# Runs each side's command once a round, the sides alternating, 0.05 s apart, with
# AIRLOCK_TRACE (set to the CLOCK_MONOTONIC time in ns just before the start) and
# AIRLOCK_NO_HANDOFF=1, and prints per side the medians of the wall time and of every
# `trace NAME:` phase the runs print (create, teardown, run; the executor's exec and cmd;
# front: the time from here to the front end's first traced phase, tocreate, and its steps
# before it, pkginit (to its first Go code, with its CPU and faults by then) to last).
import os,sys,subprocess,statistics,re,time
R=int(sys.argv[1]); sides=[a.split('=',1) for a in sys.argv[2:]]
res={n:{} for n,_ in sides}
for r in range(R):
    for n,c in (sides if r%2==0 else sides[::-1]):
        env=dict(os.environ,AIRLOCK_TRACE="1",AIRLOCK_NO_HANDOFF="1"); cc=c.split()
        while '=' in cc[0] and not cc[0].startswith('/'):
            k,v=cc.pop(0).split('=',1); env[k]=v
        time.sleep(0.05); t=time.monotonic(); env["AIRLOCK_TRACE"]=str(time.monotonic_ns())
        p=subprocess.run(cc,env=env,stdout=subprocess.DEVNULL,stderr=subprocess.PIPE,text=True)
        res[n].setdefault('wall',[]).append((time.monotonic()-t)*1000)
        for line in p.stderr.splitlines():
            m=re.match(r'trace (\w+): (.*)',line)
            if not m: continue
            for kv in m.group(2).split():
                k,v=kv.split('='); res[n].setdefault(m.group(1)+'.'+k,[]).append(float(v.rstrip('ms')))
for n,_ in sides:
    print(n, ' '.join('%s=%.2f'%(k,statistics.median(v)) for k,v in res[n].items()))
