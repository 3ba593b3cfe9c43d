#!/usr/bin/env python3
"""The executor's own CPU and context switches per command.

Usage (root): bench/execcpu.py [-n COMMANDS] [-r ROUNDS] NAME=BINDIR [NAME=BINDIR ...]

Each BINDIR holds airlock, airlock-host and airlock-exec (a `make build`'s
bin/, copied). For each build it creates one sandbox (in a throwaway
AIRLOCK_HOME of its own), then, in alternating rounds, runs COMMANDS times
`airlock sandbox exec SID -- /bin/true` and reads the executor's threads'
schedstat and context-switch counts around them (the command itself, its
own process, is not counted). Wall times on a loaded machine do not tell
two builds apart; these counts move much less with the load.
"""
import argparse
import glob
import os
import shutil
import statistics
import subprocess
import tempfile


def counters(pid):
    """CPU ns and context switches summed over pid's threads."""
    cpu = switches = 0
    for t in glob.glob(f"/proc/{pid}/task/*"):
        try:
            cpu += int(open(f"{t}/schedstat").read().split()[0])
            for line in open(f"{t}/status"):
                if "ctxt_switches" in line:
                    switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended
    return cpu, switches


def executor_of(bindir):
    """The pid of the executor under bindir's newest supervisor."""
    want = os.path.join(bindir, "airlock-host")
    best = None
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = open(f"/proc/{p}/cmdline").read().split("\0")
        except OSError:
            continue
        if cmd[:3] == [want, "sandbox", "supervise"] and (best is None or int(p) > best):
            best = int(p)
    if best is None:
        raise SystemExit(f"no supervisor of {bindir}")
    for t in glob.glob(f"/proc/{best}/task/*/children"):
        kids = open(t).read().split()
        if kids:
            return int(kids[0])
    raise SystemExit(f"no executor under supervisor {best}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=100, help="commands per round")
    ap.add_argument("-r", type=int, default=6, help="rounds per build")
    ap.add_argument("builds", nargs="+", help="NAME=BINDIR")
    a = ap.parse_args()
    builds = {}
    homes = []
    try:
        for b in a.builds:
            name, d = b.split("=", 1)
            d = os.path.abspath(d)
            home = tempfile.mkdtemp(prefix="execcpu-")
            homes.append(home)
            env = dict(os.environ, AIRLOCK_HOME=home)
            out = subprocess.run([f"{d}/airlock", "sandbox", "create"], env=env, check=True, capture_output=True, text=True)
            sid = out.stdout.split()[-1]
            builds[name] = (d, env, sid, executor_of(d))
        res = {name: [] for name in builds}
        for r in range(a.r):
            order = list(builds) if r % 2 == 0 else list(builds)[::-1]
            for name in order:
                d, env, sid, ex = builds[name]
                cpu0, sw0 = counters(ex)
                for _ in range(a.n):
                    subprocess.run([f"{d}/airlock", "sandbox", "exec", sid, "--", "/bin/true"], env=env, check=True)
                cpu1, sw1 = counters(ex)
                res[name].append(((cpu1 - cpu0) / a.n / 1000, (sw1 - sw0) / a.n))
        for name, rs in res.items():
            rounds = "  ".join(f"{c:.0f}/{s:.1f}" for c, s in rs)
            print(f"{name}: median {statistics.median(c for c, _ in rs):.0f} µs CPU, "
                  f"{statistics.median(s for _, s in rs):.1f} context switches a command (rounds, µs/switches: {rounds})")
    finally:
        for name, (d, env, sid, _) in builds.items():
            subprocess.run([f"{d}/airlock", "sandbox", "rm", sid], env=env, capture_output=True)
            subprocess.run([f"{d}/airlock", "sandbox", "gc", "--forget"], env=env, capture_output=True)
        for h in homes:
            shutil.rmtree(h, ignore_errors=True)


if __name__ == "__main__":
    main()
