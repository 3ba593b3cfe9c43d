"""airlock's code interpreter server: runs inside a sandbox.

It speaks the wire of E2B's code interpreter (what @e2b/code-interpreter
talks to on port 49999) over Jupyter kernels that jupyter_client starts:

  GET    /health                 "OK" once the default Python context is up
  POST   /execute                {code, context_id?, language?, env_vars?}
                                 -> NDJSON: stdout, stderr, result, error,
                                    number_of_executions, keepalive,
                                    end_of_execution
  POST   /contexts               {language?, cwd?} -> {id, language, cwd}
  GET    /contexts               -> [{id, language, cwd}]
  POST   /contexts/ID/restart
  DELETE /contexts/ID

Python contexts run on Jupyter kernels; so does any language a Jupyter
kernel is installed for. Bash, JavaScript and TypeScript contexts without
a Jupyter kernel are airlock's own (ProcessContext): one long-lived bash,
or node, process per context, driven over two pipes of its own.

Only the Python standard library, jupyter_client and ipykernel (Debian's
python3-jupyter-client and python3-ipykernel), bash, and node (with
Debian's node-typescript for TypeScript); nothing is installed.
Everything it answers is untrusted on the host, which bounds and checks
it; this file keeps no secret.
"""

import codecs
import datetime
import hashlib
import json
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(os.environ.get("AIRLOCK_INTERP_PORT", "49999"))
HOST = os.environ.get("AIRLOCK_INTERP_HOST", "127.0.0.1")
# KEEPALIVE is how often, in seconds, an execution that prints nothing
# writes a keepalive line: a write is how a vanished client is noticed.
KEEPALIVE = 1.0
# MAX_BODY bounds a request's body.
MAX_BODY = 16 << 20
# MAX_CONTEXTS bounds how many kernels one server runs.
MAX_CONTEXTS = 32

ALIASES = {"py": "python", "python3": "python", "js": "javascript", "ts": "typescript", "sh": "bash"}


def normalize(language):
    if not language:
        return "python"
    language = str(language).strip().lower()
    return ALIASES.get(language, language)


def state_dir():
    """A writable directory for Jupyter's and IPython's files."""
    d = os.environ.get("AIRLOCK_INTERP_STATE") or "/tmp/airlock-interp"
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def setup_env():
    d = state_dir()
    for k, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_DATA_DIR", "data"),
                   ("JUPYTER_CONFIG_DIR", "config"), ("IPYTHONDIR", "ipython"),
                   ("MPLCONFIGDIR", "matplotlib")):
        if not os.environ.get(k):
            os.environ[k] = os.path.join(d, sub)
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    # Debian's matplotlib reads /etc/matplotlibrc, which a sandbox on the
    # host's root does not see (it gets a few of /etc's files only).
    if not os.environ.get("MATPLOTLIBRC") and not os.path.exists("/etc/matplotlibrc"):
        rc = "/usr/share/matplotlib/mpl-data/matplotlibrc"
        if os.path.exists(rc):
            os.environ["MATPLOTLIBRC"] = rc
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def kernel_names():
    """language -> kernel spec name, for the kernels installed here."""
    from jupyter_client.kernelspec import KernelSpecManager

    out = {}
    ksm = KernelSpecManager()
    for name in sorted(ksm.find_kernel_specs()):
        try:
            lang = normalize(ksm.get_kernel_spec(name).language)
        except Exception:  # a broken spec is not a language
            continue
        out.setdefault(lang, name)
    if "javascript" in out:
        out.setdefault("typescript", out["javascript"])
    return out


class HTTPError(Exception):
    def __init__(self, status, text):
        super().__init__(text)
        self.status = status
        self.text = text


class Context:
    """One Jupyter kernel: its manager, its client, and a lock that serializes
    executions (a kernel runs one cell at a time; the client is not safe
    for concurrent use)."""

    def __init__(self, language, kernel, cwd):
        from jupyter_client import KernelManager

        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.km = KernelManager(kernel_name=kernel)
        self.km.start_kernel(cwd=cwd, env=dict(os.environ))
        self.kc = None
        self.connect()

    def connect(self):
        if self.kc is not None:
            self.kc.stop_channels()
        kc = self.km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        self.kc = kc

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def check_env(self, env_vars):
        """Any names do: the kernel sets them in os.environ."""

    def interrupt(self):
        try:
            self.km.interrupt_kernel()
        except Exception as e:  # the kernel may be gone; the caller goes on
            log("interrupt %s: %s" % (self.id, e))

    def restart(self):
        self.interrupt()
        with self.lock:
            self.km.restart_kernel(now=True)
            self.connect()

    def shutdown(self):
        self.interrupt()
        with self.lock:
            try:
                self.kc.stop_channels()
            finally:
                self.km.shutdown_kernel(now=True)

    def run_silent(self, code):
        """Runs code without output to the client (env vars), waiting for
        it to end. Preconditions: self.lock is held."""
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        while True:
            msg = self.kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                return

    def execute(self, code, env_vars, emit, gone):
        """Runs code, calling emit(dict) with each output line. gone() says
        whether the client went away; then the kernel is interrupted.
        Preconditions: self.lock is held."""
        if env_vars:
            self.run_silent(env_code(env_vars))
        try:
            self._execute(code, emit, gone)
        finally:
            if env_vars:
                self.run_silent(env_reset_code(env_vars))

    def _execute(self, code, emit, gone):
        # stop_on_error=False: the kernel's abort of what is queued behind
        # a failed cell has nothing to abort here (the lock serializes a
        # context's calls) and races with the next call, which it would
        # abort in its place when it comes at once (after a timeout's
        # interrupt, say). An aborted call still says so (started below).
        msg_id = self.kc.execute(code, silent=False, store_history=True, allow_stdin=False, stop_on_error=False)
        errored = False
        started = False
        interrupted = False
        while True:
            if not interrupted and gone():
                interrupted = True
                self.interrupt()
            try:
                msg = self.kc.get_iopub_msg(timeout=KEEPALIVE)
            except queue.Empty:
                if not self.km.is_alive():
                    emit({"type": "error", "name": "KernelDied", "value": "the kernel died while it ran the code", "traceback": ""})
                    return
                if not interrupted:
                    emit({"type": "keepalive"})
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            t, c = msg["msg_type"], msg["content"]
            if t == "stream":
                name = c.get("name")
                if name in ("stdout", "stderr"):
                    emit({"type": name, "text": c.get("text", ""), "timestamp": str(msg["header"].get("date", ""))})
            elif t == "execute_input":
                started = True
                emit({"type": "number_of_executions", "execution_count": c.get("execution_count")})
            elif t == "execute_result":
                emit(result(c.get("data", {}), True))
            elif t == "display_data":
                emit(result(c.get("data", {}), False))
            elif t == "error":
                if not errored:
                    errored = True
                    emit({"type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""),
                          "traceback": "\n".join(c.get("traceback", []))})
            elif t == "status" and c.get("execution_state") == "idle":
                if not started:
                    emit({"type": "error", "name": "ExecutionAborted",
                          "value": "the kernel aborted the execution before it ran", "traceback": ""})
                return


def env_code(env_vars):
    lines = ["import os as __airlock_os"]
    for k, v in env_vars.items():
        lines.append("__airlock_os.environ[%r] = %r" % (k, v))
    lines.append("del __airlock_os")
    return "\n".join(lines)


def env_reset_code(env_vars):
    lines = ["import os as __airlock_os"]
    for k in env_vars:
        if k in os.environ:
            lines.append("__airlock_os.environ[%r] = %r" % (k, os.environ[k]))
        else:
            lines.append("__airlock_os.environ.pop(%r, None)" % k)
    lines.append("del __airlock_os")
    return "\n".join(lines)


# BASH_DRIVER is the loop a bash context's process runs. Each request is
# one line on the command pipe: marker, cell file, and the files that set
# and put back the call's env vars ("-" for none), tab-separated. The cell
# is sourced into the shell itself, so what it defines (variables,
# functions, the working directory) stays for the next one. After it, the
# marker goes to stdout and stderr (so the server knows it has all of the
# cell's output) and the status to the reply pipe. The cell's stdin is
# /dev/null: the commands come on a pipe of their own.
#
# The interrupt is SIGINT to the process group: the foreground command
# dies of it, and the trap returns from the sourced cell (from the
# innermost function, when one runs) with status 130, so the shell and its
# state go on. A SIGINT that lands while the loop waits interrupts read,
# which is not an end.
BASH_DRIVER = r"""exec </dev/null
shopt -s expand_aliases
trap 'return 130 2>/dev/null' INT
__airlock_cmd=$AIRLOCK_CMD_FD __airlock_reply=$AIRLOCK_REPLY_FD
unset AIRLOCK_CMD_FD AIRLOCK_REPLY_FD
while :; do
  IFS=$'\t' read -r -u "$__airlock_cmd" __airlock_marker __airlock_cell __airlock_pre __airlock_post
  __airlock_rc=$?
  if [ "$__airlock_rc" -ne 0 ]; then
    [ "$__airlock_rc" -gt 128 ] && continue
    exit 0
  fi
  [ "$__airlock_pre" = - ] || . "$__airlock_pre"
  . "$__airlock_cell"
  __airlock_rc=$?
  [ "$__airlock_post" = - ] || . "$__airlock_post"
  printf '%s' "$__airlock_marker"
  printf '%s' "$__airlock_marker" >&2
  printf '%d\n' "$__airlock_rc" >&"$__airlock_reply"
done
"""

# NODE_DRIVER is the program a JavaScript or TypeScript context's node
# process runs (a file: a module's own variables are not the cells'
# globals). Each request is a JSON line on the command pipe {marker, code,
# typescript, env}; each cell runs with vm.runInThisContext, so its
# top-level declarations are the next cell's globals, and the value of its
# last expression (awaited, when it is a promise) is the result. A cell
# with a top-level await runs as the body of an async function: its
# declarations are its own, and its value is what it returns. TypeScript
# is transpiled (types dropped) with Debian's node-typescript first. The
# reply is a JSON line {result?, error?} after the marker went to stdout
# and stderr. SIGINT interrupts a cell (breakOnSigint, or the wait for its
# promise); it never ends the process, nor does an error a callback throws
# after its cell ended (it goes to stderr).
NODE_DRIVER = r"""'use strict'
const fs = require('fs')
const net = require('net')
const path = require('path')
const readline = require('readline')
const util = require('util')
const vm = require('vm')
const { createRequire } = require('module')

const cmdFd = Number(process.env.AIRLOCK_CMD_FD)
const replyFd = Number(process.env.AIRLOCK_REPLY_FD)
const tsPath = process.env.AIRLOCK_TYPESCRIPT
delete process.env.AIRLOCK_CMD_FD
delete process.env.AIRLOCK_REPLY_FD
delete process.env.AIRLOCK_TYPESCRIPT
globalThis.require = createRequire(path.join(process.cwd(), '[cell]'))

let ts = null
let interrupt = null
process.on('SIGINT', () => { if (interrupt) interrupt() })
process.on('uncaughtException', (e) => { process.stderr.write(`${(e && e.stack) || e}\n`) })
process.on('unhandledRejection', (e) => { process.stderr.write(`Unhandled rejection: ${(e && e.stack) || e}\n`) })

function compile(code, typescript) {
  if (!typescript) return code
  if (ts === null) ts = require(tsPath)
  return ts.transpile(code, { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.CommonJS, esModuleInterop: true })
}

async function evaluate(code) {
  const opts = { filename: 'cell', breakOnSigint: true }
  let value
  try {
    value = vm.runInThisContext(code, opts)
  } catch (e) {
    if (!(e instanceof SyntaxError) || !/await is only valid/.test(e.message)) throw e
    value = vm.runInThisContext(`(async () => {\n${code}\n})()`, { ...opts, lineOffset: -1 })
  }
  if (value !== null && (typeof value === 'object' || typeof value === 'function') && typeof value.then === 'function') {
    value = await new Promise((resolve, reject) => {
      interrupt = () => reject(new Error('Script execution was interrupted by `SIGINT`'))
      value.then(resolve, reject)
    })
  }
  return value
}

function errorOf(e) {
  if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
    // The frames under the cell's are the driver's.
    const stack = String(e.stack || '').split('\n')
    const end = stack.findIndex((l) => /^\s+at (sigintHandlersWrap|Script\.runInThisContext) /.test(l))
    return { name: String(e.name || 'Error'), value: String(e.message ?? ''), traceback: (end < 0 ? stack : stack.slice(0, end)).join('\n') }
  }
  return { name: 'Error', value: util.inspect(e), traceback: '' }
}

async function run(req) {
  const saved = {}
  for (const [k, v] of Object.entries(req.env || {})) {
    saved[k] = process.env[k]
    process.env[k] = v
  }
  const reply = {}
  try {
    const value = await evaluate(compile(req.code, req.typescript))
    if (value !== undefined) reply.result = { 'text/plain': util.inspect(value) }
  } catch (e) {
    reply.error = errorOf(e)
  } finally {
    interrupt = null
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
  // Writes to a pipe are synchronous on Linux: the marker follows all of
  // the cell's output, and the reply follows the marker.
  process.stdout.write(req.marker)
  process.stderr.write(req.marker)
  fs.writeSync(replyFd, JSON.stringify(reply) + '\n')
}

let chain = Promise.resolve()
const lines = readline.createInterface({ input: new net.Socket({ fd: cmdFd, readable: true, writable: false }), crlfDelay: Infinity })
lines.on('line', (line) => { chain = chain.then(() => run(JSON.parse(line))) })
lines.on('close', () => process.exit(0))
"""

# ENV_NAME is what a bash context takes as an env var's name.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# MARKER_WAIT bounds, in seconds, the wait for a cell's output to come
# through after its end was reported (it was written before the report).
MARKER_WAIT = 10.0


def typescript_module():
    """The path of node's typescript module (Debian's node-typescript), or
    None."""
    dirs = [d for d in os.environ.get("NODE_PATH", "").split(":") if d]
    dirs += ["/usr/share/nodejs", "/usr/lib/nodejs", "/usr/lib/node_modules", "/usr/local/lib/node_modules"]
    for d in dirs:
        p = os.path.join(d, "typescript")
        if os.path.isfile(os.path.join(p, "package.json")):
            return p
    return None


def builtin_languages():
    """language -> the ProcessContext class for it, for the languages
    whose programs are here."""
    out = {}
    if shutil.which("bash"):
        out["bash"] = BashContext
    if shutil.which("node"):
        out["javascript"] = NodeContext
        if typescript_module():
            out["typescript"] = NodeContext
    return out


def partial_suffix(text, marker):
    """The length of the longest end of text that begins marker."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


class ProcessContext:
    """A context that is one long-lived process of airlock's own (a
    driver: BASH_DRIVER, NODE_DRIVER), for a language with no Jupyter
    kernel here. The process gets its requests on a command pipe and
    answers each on a reply pipe; its stdout and stderr are read all
    along, and what comes while a cell runs is that cell's output, up to
    the cell's marker. The process runs in a session of its own, so an
    interrupt (SIGINT) reaches what the cell started too. A process that
    dies (a cell's exit) is reported as the cell's error, and the next
    call starts a fresh one."""

    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()  # serializes executions, as a kernel's
        # cond's lock guards sink, marker and seen, and is held for every
        # write to the client (the reader threads and the executing one
        # write).
        self.cond = threading.Condition()
        self.sink = None
        self.marker = None
        self.seen = {}
        self.proc = None
        self.count = 0
        self.start()

    def argv(self):
        raise NotImplementedError

    def extra_env(self):
        return {}

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start(self):
        """Starts the process. Preconditions: self.lock is held, or the
        context is not yet shared."""
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = dict(os.environ)
        env.update(self.extra_env())
        env["AIRLOCK_CMD_FD"], env["AIRLOCK_REPLY_FD"] = str(cmd_r), str(rep_w)
        try:
            proc = subprocess.Popen(self.argv(), cwd=self.cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    pass_fds=(cmd_r, rep_w), start_new_session=True)
        except OSError:
            for fd in (cmd_r, cmd_w, rep_r, rep_w):
                os.close(fd)
            raise
        os.close(cmd_r)
        os.close(rep_w)
        self.proc, self.cmd_fd, self.reply_fd, self.reply_buf = proc, cmd_w, rep_r, b""
        self.count = 0
        for name, f in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            threading.Thread(target=self.pump, args=(proc, name, f), daemon=True).start()

    def pump(self, proc, name, f):
        """Reads one of proc's output streams to its end, giving what
        comes to the running cell (if any) up to the cell's marker."""
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        fd = f.fileno()
        while True:
            try:
                b = os.read(fd, 65536)
            except OSError:
                b = b""
            text = pending + (dec.decode(b) if b else dec.decode(b"", final=True))
            pending = ""
            with self.cond:
                if self.proc is not proc:
                    break
                marker = self.marker
                if marker and not self.seen.get(name):
                    i = text.find(marker)
                    if i >= 0:
                        self.forward(name, text[:i])
                        text = text[i + len(marker):]
                        self.seen[name] = True
                        self.cond.notify_all()
                    elif b:
                        k = partial_suffix(text, marker)
                        if k:
                            text, pending = text[:-k], text[-k:]
                self.forward(name, text)
            if not b:
                break
        f.close()

    def forward(self, name, text):
        """Preconditions: self.cond is held."""
        if text and self.sink is not None:
            self.sink({"type": name, "text": text, "timestamp": now()})

    def emit(self, obj):
        with self.cond:
            if self.sink is not None:
                self.sink(obj)

    def interrupt(self):
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except OSError as e:  # it ended meanwhile
            log("interrupt %s: %s" % (self.id, e))

    def kill(self):
        """Ends the process and what it started. Preconditions: self.lock
        is held, or no execution can start."""
        proc = self.proc
        if proc is None:
            return
        with self.cond:
            self.proc = None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        for fd in (self.cmd_fd, self.reply_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def restart(self):
        self.interrupt()
        with self.lock:
            self.kill()
            self.start()

    def shutdown(self):
        self.interrupt()
        with self.lock:
            self.kill()

    def read_reply(self, timeout):
        """The next reply line, None when none came within timeout.
        Raises EOFError when the process closed its end (it died)."""
        while b"\n" not in self.reply_buf:
            r, _, _ = select.select([self.reply_fd], [], [], timeout)
            if not r:
                return None
            b = os.read(self.reply_fd, 65536)
            if not b:
                raise EOFError
            self.reply_buf += b
        line, self.reply_buf = self.reply_buf.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    def execute(self, code, env_vars, emit, gone):
        """Runs code as execute of a Jupyter context does.
        Preconditions: self.lock is held."""
        if self.proc is None or self.proc.poll() is not None:
            self.kill()
            self.start()
        marker = "\x02airlock-%s\x03" % uuid.uuid4().hex
        request = self.request(code, env_vars, marker)
        with self.cond:
            self.sink, self.marker, self.seen = emit, marker, {"stdout": False, "stderr": False}
        try:
            self.count += 1
            self.emit({"type": "number_of_executions", "execution_count": self.count})
            self._execute(request, gone)
        finally:
            with self.cond:
                self.sink, self.marker = None, None
            self.cleanup()

    def _execute(self, request, gone):
        try:
            os.write(self.cmd_fd, request.encode())
            interrupted = False
            while True:
                if not interrupted and gone():
                    interrupted = True
                    self.interrupt()
                line = self.read_reply(KEEPALIVE)
                if line is not None:
                    break
                # A process that ended while what it started in the
                # background holds the reply pipe open sends no EOF.
                if self.proc.poll() is not None:
                    raise EOFError
                if not interrupted:
                    self.emit({"type": "keepalive"})
        except (EOFError, OSError):
            try:
                status = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # it closed its reply pipe and lives on
                self.kill()
                status = "killed"
            with self.cond:
                self.cond.wait_for(lambda: all(self.seen.values()) or self.proc is None, timeout=0.2)
            self.emit({"type": "error", "name": "KernelDied",
                       "value": "the %s process exited (status %s); the context starts afresh at its next call" % (self.language, status),
                       "traceback": ""})
            return
        with self.cond:
            self.cond.wait_for(lambda: all(self.seen.values()), timeout=MARKER_WAIT)
        self.finish(line)

    def check_env(self, env_vars):
        """Raises HTTPError when env_vars cannot be set in this context."""

    def request(self, code, env_vars, marker):
        raise NotImplementedError

    def finish(self, line):
        raise NotImplementedError

    def cleanup(self):
        pass


class BashContext(ProcessContext):
    """A bash context: one bash process running BASH_DRIVER. A cell that
    ends with a status other than 0 is an error ExitError, "exit status
    N", the way envd reports a command's."""

    def argv(self):
        return ["bash", "--noprofile", "--norc", "-c", BASH_DRIVER]

    def path(self, what):
        return os.path.join(state_dir(), "bash-%s-%s.sh" % (self.id, what))

    def check_env(self, env_vars):
        for k in env_vars:
            if not ENV_NAME.match(k):
                raise HTTPError(400, "env_vars: %r is not a shell variable's name" % k)

    def request(self, code, env_vars, marker):
        files = {"cell": code, "pre": None, "post": None}
        if env_vars:
            pre, post = [], []
            for i, (k, v) in enumerate(env_vars.items()):
                saved = "__airlock_saved_%d" % i
                pre.append("%s=$(declare -p %s 2>/dev/null); export %s=%s" % (saved, k, k, shell_quote(v)))
                post.append('export -n %s; if [ -n "$%s" ]; then eval "$%s"; else unset %s; fi; unset %s' % (k, saved, saved, k, saved))
            files["pre"], files["post"] = "\n".join(pre) + "\n", "\n".join(post) + "\n"
        names = []
        for what, text in files.items():
            if text is None:
                names.append("-")
                continue
            p = self.path(what)
            with open(p, "w") as f:
                f.write(text)
            names.append(p)
        return "%s\t%s\t%s\t%s\n" % (marker, names[0], names[1], names[2])

    def finish(self, line):
        try:
            status = int(line)
        except ValueError:
            status = -1
        if status != 0:
            self.emit({"type": "error", "name": "ExitError", "value": "exit status %d" % status, "traceback": ""})

    def cleanup(self):
        for what in ("cell", "pre", "post"):
            try:
                os.remove(self.path(what))
            except OSError:
                pass


class NodeContext(ProcessContext):
    """A JavaScript or TypeScript context: one node process running
    NODE_DRIVER."""

    def argv(self):
        # Named by its content: a state directory kept from another
        # version of this server holds another driver.
        digest = hashlib.sha256(NODE_DRIVER.encode()).hexdigest()[:16]
        p = os.path.join(state_dir(), "node-driver-%s.js" % digest)
        if not os.path.exists(p):
            tmp = "%s.%s" % (p, uuid.uuid4().hex)
            with open(tmp, "w") as f:
                f.write(NODE_DRIVER)
            os.replace(tmp, p)
        return ["node", p]

    def extra_env(self):
        ts = typescript_module() if self.language == "typescript" else None
        return {"AIRLOCK_TYPESCRIPT": ts} if ts else {}

    def request(self, code, env_vars, marker):
        return json.dumps({"marker": marker, "code": code, "typescript": self.language == "typescript",
                           "env": env_vars}) + "\n"

    def finish(self, line):
        try:
            reply = json.loads(line)
        except ValueError:
            reply = {"error": {"name": "KernelError", "value": "the node process answered %r" % line[:200], "traceback": ""}}
        if reply.get("result") is not None:
            self.emit(result(reply["result"], True))
        err = reply.get("error")
        if err:
            self.emit({"type": "error", "name": str(err.get("name", "")), "value": str(err.get("value", "")),
                       "traceback": str(err.get("traceback", ""))})


def shell_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


# Jupyter MIME types -> the wire's result fields.
FORMATS = {
    "text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg",
    "image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex",
    "application/json": "json", "application/javascript": "javascript", "e2b/data": "data", "e2b/chart": "chart",
}


def result(data, main):
    out = {"type": "result", "is_main_result": main}
    extra = {}
    for mime, v in data.items():
        key = FORMATS.get(mime)
        if key is None:
            extra[mime] = v
            continue
        if key in ("png", "jpeg") and isinstance(v, str):
            v = v.replace("\n", "")
        out[key] = v
    text = out.get("text")
    # As E2B's server: a string's repr loses its quotes.
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        out["text"] = text[1:-1]
    if extra:
        out["extra"] = extra
    return out


def log(msg):
    sys.stderr.write("airlock-interp: %s\n" % msg)
    sys.stderr.flush()


class Server:
    def __init__(self):
        self.mu = threading.Lock()
        self.contexts = {}  # guarded by mu
        self.defaults = {}  # language -> context id; guarded by mu
        self.kernels = kernel_names()
        self.builtins = builtin_languages()
        self.ready = threading.Event()
        self.cwd = os.getcwd()

    def create(self, language, cwd):
        language = normalize(language)
        kernel = self.kernels.get(language)
        if kernel is None and language not in self.builtins:
            have = ", ".join(sorted(set(self.kernels) | set(self.builtins))) or "none"
            # 404 and not E2B's 500: the SDK shows a 404's body to the
            # caller, and any other status's only as its code.
            raise HTTPError(404, "no %s kernel in this sandbox (languages here: %s)" % (language, have))
        cwd = cwd or self.cwd
        if not os.path.isdir(cwd):
            raise HTTPError(400, "cwd %s: not a directory in this sandbox" % cwd)
        with self.mu:
            if len(self.contexts) >= MAX_CONTEXTS:
                raise HTTPError(429, "at most %d contexts; remove one first" % MAX_CONTEXTS)
        if kernel is not None:
            ctx = Context(language, kernel, cwd)
        else:
            ctx = self.builtins[language](language, cwd)
        with self.mu:
            self.contexts[ctx.id] = ctx
        return ctx

    def default(self, language):
        language = normalize(language)
        with self.mu:
            cid = self.defaults.get(language)
            ctx = self.contexts.get(cid) if cid else None
        if ctx is not None:
            return ctx
        ctx = self.create(language, None)
        with self.mu:
            cid = self.defaults.get(language)
            if cid in self.contexts:  # another request made one first
                other = self.contexts[cid]
            else:
                self.defaults[language] = ctx.id
                other = None
        if other is not None:
            self.remove(ctx.id)
            return other
        return ctx

    def get(self, cid):
        with self.mu:
            ctx = self.contexts.get(cid)
        if ctx is None:
            raise HTTPError(404, "context %s not found" % cid)
        return ctx

    def remove(self, cid):
        with self.mu:
            ctx = self.contexts.pop(cid, None)
            for lang, d in list(self.defaults.items()):
                if d == cid:
                    del self.defaults[lang]
        if ctx is None:
            raise HTTPError(404, "context %s not found" % cid)
        ctx.shutdown()

    def list(self):
        with self.mu:
            return [c.info() for c in self.contexts.values()]

    def start(self):
        try:
            ctx = self.default("python")
            # Matplotlib builds its font cache on first import; do it
            # now, not in the first cell that plots.
            with ctx.lock:
                ctx.run_silent("import matplotlib.font_manager as __airlock_fm\ndel __airlock_fm")
        except Exception as e:
            log("default python context: %s" % e)
            return
        self.ready.set()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "airlock-interp"

    def log_message(self, fmt, *args):
        pass

    def send_text(self, status, text, ctype="text/plain; charset=utf-8"):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status, obj):
        self.send_text(status, json.dumps(obj), "application/json")

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0 or n > MAX_BODY:
            raise HTTPError(413, "request body too large")
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        try:
            obj = json.loads(raw)
        except ValueError:
            raise HTTPError(400, "request body: not JSON")
        if not isinstance(obj, dict):
            raise HTTPError(400, "request body: not a JSON object")
        return obj

    def route(self, method):
        app = self.server.app
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        parts = path.strip("/").split("/")
        if method == "GET" and path == "/health":
            if not app.ready.is_set():
                raise HTTPError(503, "starting")
            return self.send_json(200, "OK")
        if method == "POST" and path == "/execute":
            return self.execute(self.body())
        if path == "/contexts":
            if method == "GET":
                return self.send_json(200, app.list())
            if method == "POST":
                req = self.body()
                ctx = app.create(str_field(req, "language"), str_field(req, "cwd"))
                return self.send_json(200, ctx.info())
        if len(parts) == 2 and parts[0] == "contexts" and method == "DELETE":
            app.remove(parts[1])
            return self.send_json(200, None)
        if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart" and method == "POST":
            app.get(parts[1]).restart()
            return self.send_json(200, None)
        raise HTTPError(404, "not found")

    def handle_method(self, method):
        try:
            self.route(method)
        except HTTPError as e:
            self.send_text(e.status, e.text)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:
            log("%s %s: %r" % (method, self.path, e))
            self.send_text(500, "internal error: %s" % e)

    def do_GET(self):
        self.handle_method("GET")

    def do_POST(self):
        self.handle_method("POST")

    def do_DELETE(self):
        self.handle_method("DELETE")

    def execute(self, req):
        app = self.server.app
        code = req.get("code")
        if not isinstance(code, str):
            raise HTTPError(400, "code: want a string")
        cid, language = str_field(req, "context_id"), str_field(req, "language")
        if cid and language:
            raise HTTPError(400, "Only one of context_id or language can be provided")
        env_vars = req.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()):
            raise HTTPError(400, "env_vars: want an object of strings")
        ctx = app.get(cid) if cid else app.default(language or "python")
        ctx.check_env(env_vars)

        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        state = {"gone": False}

        def write(obj):
            if state["gone"]:
                return
            line = (json.dumps(obj) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            except OSError:
                state["gone"] = True

        # A client that went away is noticed when a write fails (a
        # keepalive at the latest), not by a read that sees EOF: a client
        # (or a relay) may half-close once its request is sent.
        def gone():
            return state["gone"]

        with ctx.lock:
            ctx.execute(code, env_vars, write, gone)
        write({"type": "end_of_execution"})
        if state["gone"]:
            self.close_connection = True
            return
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True


def str_field(req, key):
    v = req.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise HTTPError(400, "%s: want a string" % key)
    return v


def main():
    setup_env()
    # A handled signal is reset to its default in a child, an ignored one
    # stays ignored: a server started with SIGINT ignored (a background
    # job of a shell) would give its contexts' processes an interrupt
    # they cannot take.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    app = Server()
    httpd = ThreadingHTTPServer((HOST, PORT), Handler)
    httpd.daemon_threads = True
    httpd.app = app
    threading.Thread(target=app.start, daemon=True).start()
    log("listening on %s:%d" % (HOST, PORT))
    httpd.serve_forever()


if __name__ == "__main__":
    main()
