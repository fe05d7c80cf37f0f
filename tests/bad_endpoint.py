"""A loopback 'OpenAI-compatible' endpoint on raw sockets that misbehaves on purpose, for the tests
of every client that must bound a reply (the judge, the `openai:` policy). It reads a request whole,
then answers as ``mode`` says:

- ``trickle``: the headers, then the body one byte every ``byte_s`` seconds;
- ``trickle-headers``: the status line and headers themselves, byte by byte;
- ``truncate``: Content-Length promises 500 bytes more than are sent, then the socket closes;
- ``stall``: never answers; ``huge``: declares 50 MB and sends nothing more;
- ``huge-chunked``: no length, and the body keeps coming;
- anything else: the reply, at once.

``replies`` is the body for every mode, or a dict mode -> body."""
from __future__ import annotations

import socketserver
import threading


class BadEndpoint(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, replies: bytes | dict[str, bytes], mode: str = "trickle", byte_s: float = 0.25):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies, self.mode, self.byte_s = replies, mode, byte_s
        self.stop = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def reply(self) -> bytes:
        return self.replies if isinstance(self.replies, bytes) else self.replies[self.mode]

    def close(self) -> None:
        self.stop.set()
        self.shutdown()
        self.server_close()


def _read_request(s) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
    while len(body) < length:
        body += s.recv(65536)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        s, srv = self.request, self.server
        _read_request(s)
        reply, mode = srv.reply(), srv.mode
        header = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(reply)}\r\n\r\n".encode()
        try:
            if mode in ("trickle", "trickle-headers"):
                start = 0 if mode == "trickle-headers" else len(header)
                s.sendall((header + reply)[:start])
                for b in (header + reply)[start:]:
                    if srv.stop.wait(srv.byte_s):
                        return
                    s.sendall(bytes([b]))
            elif mode == "truncate":
                s.sendall(header.replace(str(len(reply)).encode(), str(len(reply) + 500).encode()) + reply)
            elif mode == "stall":
                srv.stop.wait(60)
            elif mode == "huge":
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n")
                srv.stop.wait(60)
            elif mode == "huge-chunked":
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
                while not srv.stop.is_set():
                    s.sendall(b" " * 65536)
            else:
                s.sendall(header + reply)
        except OSError:
            pass
