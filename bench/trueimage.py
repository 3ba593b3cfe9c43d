#!/usr/bin/env python3
# Usage: python3 bench/trueimage.py OUT.tar [NAME:TAG]
# Writes a docker save archive of a one-layer image whose root holds the host's
# /usr/bin/true and the shared libraries it loads (ldd), under Debian's merged
# /usr (bin, lib, lib64, sbin -> usr/...), with /tmp, /proc and /dev: the
# smallest image root a sandbox can run /bin/true in (bench/compare.sh's image
# row, which runs bwrap on the same unpacked tree).
import hashlib, io, json, os, re, subprocess, sys, tarfile
out = sys.argv[1]
name = sys.argv[2] if len(sys.argv) > 2 else "airlock-bench/true:latest"
files = ["/usr/bin/true"]
for line in subprocess.run(["ldd", "/usr/bin/true"], capture_output=True, text=True, check=True).stdout.splitlines():
    m = re.search(r"(/\S+) \(0x", line)
    if m:
        files.append(os.path.realpath(m.group(1)))
        if os.path.realpath(m.group(1)) != m.group(1):
            files.append(m.group(1))  # the loader's own path, a link
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
    def add_dir(p):
        ti = tarfile.TarInfo(p.lstrip("/")); ti.type = tarfile.DIRTYPE; ti.mode = 0o755
        t.addfile(ti)
    for d in ["/usr", "/usr/bin", "/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/sbin", "/proc", "/dev", "/etc"]:
        add_dir(d)
    ti = tarfile.TarInfo("tmp"); ti.type = tarfile.DIRTYPE; ti.mode = 0o1777; t.addfile(ti)
    for l in ["bin", "lib", "lib64", "sbin"]:
        ti = tarfile.TarInfo(l); ti.type = tarfile.SYMTYPE; ti.linkname = "usr/" + l; t.addfile(ti)
    done = set()
    for f in files:
        dst = f if f.startswith("/usr/") else "/usr" + f  # /lib/... is /usr/lib/... under the links
        if dst in done:
            continue
        done.add(dst)
        if os.path.islink(f):
            ti = tarfile.TarInfo(dst.lstrip("/")); ti.type = tarfile.SYMTYPE; ti.linkname = os.readlink(f)
            t.addfile(ti)
            continue
        data = open(f, "rb").read()
        ti = tarfile.TarInfo(dst.lstrip("/")); ti.size = len(data); ti.mode = 0o755
        t.addfile(ti, io.BytesIO(data))
lb = layer.getvalue()
diff = hashlib.sha256(lb).hexdigest()
cfg = json.dumps({"architecture": "amd64", "os": "linux",
                  "config": {"Cmd": ["/bin/true"], "Env": ["PATH=/usr/bin:/bin"]},
                  "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff]}}).encode()
cd = hashlib.sha256(cfg).hexdigest()
man = json.dumps([{"Config": cd + ".json", "RepoTags": [name], "Layers": [diff + "/layer.tar"]}]).encode()
with tarfile.open(out, "w") as t:
    for n, b in [(diff + "/layer.tar", lb), (cd + ".json", cfg), ("manifest.json", man)]:
        ti = tarfile.TarInfo(n); ti.size = len(b); ti.mode = 0o644
        t.addfile(ti, io.BytesIO(b))
print(name, "sha256:" + diff)
