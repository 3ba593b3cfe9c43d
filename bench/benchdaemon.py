# A sandbox daemon for the bench scripts that measure the handed-off row
# (ratecpu.py, execthreads.py): start runs BINDIR/airlock sandbox daemon in
# an AIRLOCK_HOME of its own and waits for its socket and its pool's first
# sandboxes; stop ends it, sweeps its home and returns its stop line.
import os, re, shutil, signal, subprocess, tempfile, time


class Daemon:
    def __init__(self, bindir, prefix):
        self.bindir = bindir
        self.home = tempfile.mkdtemp(prefix=prefix)
        self.env = dict(os.environ, AIRLOCK_HOME=self.home)
        self.log = open(self.home + '.log', 'w')
        self.proc = subprocess.Popen([f'{bindir}/airlock', 'sandbox', 'daemon'], env=self.env, stderr=self.log)
        for _ in range(200):
            if os.path.exists(self.home + '/sandbox.sock'):
                break
            time.sleep(0.05)
        time.sleep(1.5)  # the pool's first sandboxes
        # Its spawner: the parent of every executor it makes.
        self.spawners = set(subprocess.run(['pgrep', '-P', str(self.proc.pid)],
                                           capture_output=True, text=True).stdout.split())

    def stop(self):
        """Stops the daemon, sweeps its home; returns its stop line's counters, or ''."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
        self.log.close()
        found = re.findall(r'served=\S+ in_words=\S+ refused=\S+ pool_hits=\S+ pool_misses=\S+',
                           open(self.home + '.log').read())
        subprocess.run([f'{self.bindir}/airlock', 'sandbox', 'gc', '--forget'], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.home, ignore_errors=True)
        os.remove(self.home + '.log')
        return found[-1] if found else ''
