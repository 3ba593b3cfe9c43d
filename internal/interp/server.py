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

Only the Python standard library, jupyter_client and ipykernel (Debian's
python3-jupyter-client and python3-ipykernel); nothing is installed.
Everything it answers is untrusted on the host, which bounds and checks
it; this file keeps no secret.
"""

import json
import os
import queue
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
    """One kernel: its manager, its client, and a lock that serializes
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
        msg_id = self.kc.execute(code, silent=False, store_history=True, allow_stdin=False, stop_on_error=True)
        errored = False
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
        self.ready = threading.Event()
        self.cwd = os.getcwd()

    def create(self, language, cwd):
        language = normalize(language)
        kernel = self.kernels.get(language)
        if kernel is None:
            have = ", ".join(sorted(self.kernels)) or "none"
            # 404 and not E2B's 500: the SDK shows a 404's body to the
            # caller, and any other status's only as its code.
            raise HTTPError(404, "no %s kernel in this sandbox (languages here: %s)" % (language, have))
        cwd = cwd or self.cwd
        if not os.path.isdir(cwd):
            raise HTTPError(400, "cwd %s: not a directory in this sandbox" % cwd)
        with self.mu:
            if len(self.contexts) >= MAX_CONTEXTS:
                raise HTTPError(429, "at most %d contexts; remove one first" % MAX_CONTEXTS)
        ctx = Context(language, kernel, cwd)
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
    app = Server()
    httpd = ThreadingHTTPServer((HOST, PORT), Handler)
    httpd.daemon_threads = True
    httpd.app = app
    threading.Thread(target=app.start, daemon=True).start()
    log("listening on %s:%d" % (HOST, PORT))
    httpd.serve_forever()


if __name__ == "__main__":
    main()
