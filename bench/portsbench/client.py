# The client side of bench/ports.sh, the same code inside the sandbox (the
# direct loopback request) and on the host (through the preview URL), so
# that the two differ only by the path.
#   client.py http HOST:PORT N [NAME=VALUE...]   N GETs of /, one connection
#       each (the server closes it); prints {"p50_ms", "p99_ms", "n"}
#   client.py ws HOST:PORT N [NAME=VALUE...]     opens N WebSockets to /ws,
#       each echoes one message, holds them all, prints {"held": N} and
#       waits for stdin to close
import asyncio
import base64
import json
import os
import socket
import sys
import time


def request(addr, headers):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    extra = "".join("%s: %s\r\n" % h for h in headers)
    s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n" % (addr, extra)).encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    if not data.startswith(b"HTTP/1.1 200"):
        raise SystemExit("unexpected answer: %r" % data[:600])


def http(addr, n, headers):
    for _ in range(20):
        request(addr, headers)  # warm-up
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        request(addr, headers)
        ts.append(time.perf_counter() - t0)
    ts.sort()
    print(json.dumps({"n": n, "p50_ms": round(ts[n // 2] * 1000, 3), "p99_ms": round(ts[min(n - 1, n * 99 // 100)] * 1000, 3)}))


async def ws_open(addr, headers):
    host, port = addr.rsplit(":", 1)
    r, w = await asyncio.open_connection(host, int(port))
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join("%s: %s\r\n" % h for h in headers)
    w.write(("GET /ws HTTP/1.1\r\nHost: %s\r\n%sUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (addr, extra, key)).encode())
    head = await r.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise SystemExit("no upgrade: %r" % head[:200])
    msg, mask = b"ping", os.urandom(4)
    w.write(bytes([0x81, 0x80 | len(msg)]) + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(msg)))
    await w.drain()
    echo = await r.readexactly(2 + len(msg))
    if echo[2:] != msg:
        raise SystemExit("bad echo %r" % echo)
    return w


async def ws(addr, n, headers):
    conns = []
    for i in range(0, n, 50):  # 50 at a time: a burst of 1,000 handshakes would only measure the backlog
        conns += await asyncio.gather(*(ws_open(addr, headers) for _ in range(min(50, n - i))))
    print(json.dumps({"held": len(conns)}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for w in conns:
        w.close()


mode, addr, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
headers = [tuple(a.split("=", 1)) for a in sys.argv[4:]]
if mode == "http":
    http(addr, n, headers)
else:
    asyncio.run(ws(addr, n, headers))
