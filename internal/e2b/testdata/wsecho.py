# A test server for preview URLs, run inside a sandbox: python3 only (no
# websockets package), one thread, so it holds many connections under a
# sandbox's pids limit. Usage: python3 wsecho.py PORT
#   GET /         a page whose script opens a WebSocket to /ws on its own
#                 host, sends "ping" and shows what comes back in #out
#   GET /stream   three chunks, 100 ms apart (a streamed response)
#   GET /ws       a WebSocket that echoes each text message
#   anything else 200 "hello from the sandbox"
import asyncio
import base64
import hashlib
import struct
import sys

PAGE = b"""<!doctype html><title>ws</title><p id=out>waiting</p><script>
const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
ws.onopen = () => ws.send('ping');
ws.onmessage = (e) => { document.getElementById('out').textContent = 'echo: ' + e.data; };
ws.onerror = () => { document.getElementById('out').textContent = 'error'; };
</script>"""

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def respond(w, status, ctype, body):
    w.write(b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (status, ctype, len(body)) + body)
    await w.drain()


async def frame(r):
    head = await r.readexactly(2)
    op, n = head[0] & 0x0F, head[1] & 0x7F
    if n == 126:
        n = struct.unpack(">H", await r.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", await r.readexactly(8))[0]
    mask = await r.readexactly(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = bytearray(await r.readexactly(n))
    for i in range(n):
        data[i] ^= mask[i % 4]
    return op, bytes(data)


def encode(op, data):
    n = len(data)
    if n < 126:
        return bytes([0x80 | op, n]) + data
    if n < 1 << 16:
        return bytes([0x80 | op, 126]) + struct.pack(">H", n) + data
    return bytes([0x80 | op, 127]) + struct.pack(">Q", n) + data


async def serve(r, w):
    try:
        request = await r.readuntil(b"\r\n\r\n")
        lines = request.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if path == "/ws" and headers.get("upgrade", "").lower() == "websocket":
            accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + GUID).digest())
            w.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
            await w.drain()
            while True:
                op, data = await frame(r)
                if op == 8:
                    w.write(encode(8, data[:2]))
                    await w.drain()
                    return
                if op == 9:
                    w.write(encode(10, data))
                elif op in (1, 2):
                    w.write(encode(op, data))
                await w.drain()
        elif path == "/":
            await respond(w, b"200 OK", b"text/html", PAGE)
        elif path == "/stream":
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            for i in range(3):
                chunk = b"chunk %d\n" % i
                w.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await w.drain()
                await asyncio.sleep(0.1)
            w.write(b"0\r\n\r\n")
            await w.drain()
        else:
            await respond(w, b"200 OK", b"text/plain", b"hello from the sandbox host=" + headers.get("host", "").encode())
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        w.close()


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
