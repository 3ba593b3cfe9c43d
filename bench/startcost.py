#!/usr/bin/env python3
# Usage: python3 bench/startcost.py ROUNDS NAME=[VAR=VAL ...] CMD ... (root for sandboxes)
# Runs each side's command once a round, the sides alternating, PAUSE (0.05) s apart, and
# prints per side the medians of wait4's rusage of the whole tree: CPU (user + system),
# minor page faults, context switches, and wall. AIRLOCK_NO_HANDOFF=1 unless the
# environment sets it to 0 (then a running sandbox daemon serves the runs). Counts and CPU
# hold at load; wall does not.
import os, sys, time, statistics, subprocess
rounds=int(sys.argv[1]); sides=[]
for a in sys.argv[2:]:
    n,c=a.split('=',1); sides.append((n,c.split()))
env=dict(os.environ); env.setdefault("AIRLOCK_NO_HANDOFF","1")
if env["AIRLOCK_NO_HANDOFF"]=="0": del env["AIRLOCK_NO_HANDOFF"]
pause=float(os.environ.get("PAUSE","0.05"))
res={n:{'cpu':[],'flt':[],'csw':[],'wall':[]} for n,_ in sides}
for r in range(rounds):
    order = sides if r%2==0 else sides[::-1]
    for n,c in order:
        time.sleep(pause)
        t=time.monotonic()
        e=dict(env); cc=list(c)
        while cc and '=' in cc[0] and not cc[0].startswith('/'):
            k,v=cc.pop(0).split('=',1); e[k]=v
        p=subprocess.Popen(cc, env=e, stdout=subprocess.DEVNULL)
        _,st,ru=os.wait4(p.pid,0)
        w=time.monotonic()-t
        if st!=0: print("fail",n,st); continue
        d=res[n]; d['cpu'].append((ru.ru_utime+ru.ru_stime)*1000); d['flt'].append(ru.ru_minflt); d['csw'].append(ru.ru_nvcsw+ru.ru_nivcsw); d['wall'].append(w*1000)
for n,_ in sides:
    d=res[n]; m=lambda k: statistics.median(d[k]); q=lambda k: statistics.quantiles(d[k],n=4)
    print(f"{n}: cpu {m('cpu'):.2f} ms (q {q('cpu')[0]:.1f}-{q('cpu')[2]:.1f})  faults {m('flt'):.0f}  csw {m('csw'):.0f}  wall {m('wall'):.2f} ms  (n={len(d['cpu'])})")
