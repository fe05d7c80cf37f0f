"""An HTTP POST bounded end to end: one deadline for the whole exchange and a cap on the reply's size;
every HTTP client of embodia's (a success judge, the ``openai:`` GUI policy) sends through it.

``urlopen(timeout=T)`` bounds each socket operation, not the request: a server that sends one byte
every second never trips it (a judge's reply trickled that way ran 102 s past a 60 s timeout, then
ended in an ``IncompleteRead`` traceback). Here a timer shuts the request's sockets down when the
deadline passes, which ends whatever read is blocked on them, so `post` returns or raises
`ReplyError` at the deadline (plus the moment a read takes to notice), whatever the server does:
trickled headers or body, a stalled connection, a body cut short, a redirect. The reply's body is
read in blocks and refused once it passes ``max_bytes`` (a declared Content-Length above it is
refused before reading). Proxies, redirects and HTTPS are urllib's. What no timer can cut short is
a host name lookup that hangs in the C library; use an address (as a local endpoint is) to rule it out.
A reply that is not 2xx raises `HTTPStatusError` (a `ReplyError`) carrying its status, headers and the
start of its body, read within the same deadline, so a caller can retry a 503 or explain a 401.

>>> post("http://127.0.0.1:9/v1/chat/completions", b"{}", {}, deadline_s=1.0)   # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
embodia.shared.bounded_http.ReplyError: cannot reach http://127.0.0.1:9/v1/chat/completions (...)
"""
from __future__ import annotations

import http.client
import socket
import threading
import urllib.error
import urllib.request

MAX_REPLY_BYTES = 1 << 20        # a judge's reply is a few hundred bytes of JSON


class ReplyError(OSError):
    """The request failed, ran past its deadline, or its reply was too large or broken; one line."""


class HTTPStatusError(ReplyError):
    """The server answered with a status that is not 2xx: ``code``, ``reason``, ``headers`` and the
    first `ERROR_BODY_BYTES` of its ``body``."""

    def __init__(self, url: str, code: int, reason: str, headers, body: bytes):
        super().__init__(f"{url} answered HTTP {code} {reason or ''}".rstrip())
        self.url, self.code, self.reason, self.headers, self.body = url, code, reason, headers, body


class ReplyDeadline(ReplyError):
    """No complete reply within the deadline."""


class ReplyTooLarge(ReplyError):
    """The reply declared or sent more than the size cap."""


ERROR_BODY_BYTES = 4096


class _Watch:
    """The sockets of one request, shut down together when its deadline passes."""

    def __init__(self):
        self.socks: list = []
        self.expired = False
        self.lock = threading.Lock()

    def add(self, sock) -> None:
        with self.lock:
            self.socks.append(sock)
            if self.expired:
                _shut(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            for s in self.socks:
                _shut(s)


def _shut(sock) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)     # the plain socket's: ends a read blocked in SSL too
    except OSError:
        pass


def _watched(base: type, watch: _Watch) -> type:
    class Watched(base):
        def connect(self):
            super().connect()
            watch.add(self.sock)
    return Watched


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, watch: _Watch):
        super().__init__()
        self.watch = watch

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self.watch), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, watch: _Watch):
        super().__init__()
        self.watch = watch

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self.watch), req, context=self._context)


def post(url: str, data: bytes, headers: dict, *, deadline_s: float, max_bytes: int = MAX_REPLY_BYTES) -> bytes:
    """The body of a 2xx reply to a POST of ``data`` to ``url``, all of it within ``deadline_s``
    seconds and ``max_bytes`` bytes; `ReplyError` (one line, saying which) otherwise."""
    watch = _Watch()
    opener = urllib.request.build_opener(_HTTP(watch), _HTTPS(watch))
    timer = threading.Timer(deadline_s, watch.expire)
    timer.daemon = True
    timer.start()
    try:
        body = _exchange(opener, urllib.request.Request(url, data=data, headers=headers, method="POST"),
                         deadline_s, max_bytes)
    except (OSError, http.client.HTTPException, ValueError) as e:
        if watch.expired:          # whatever the shut-down sockets made the read say
            raise ReplyDeadline(f"no complete reply from {url} within {deadline_s:g} s") from None
        if isinstance(e, ReplyError):
            raise
        reason = getattr(e, "reason", None) or e
        raise ReplyError(f"cannot reach {url} ({type(e).__name__}: {str(reason)[:200]})") from None
    finally:
        timer.cancel()
    if watch.expired:
        raise ReplyDeadline(f"no complete reply from {url} within {deadline_s:g} s")
    return body


def _exchange(opener, req, deadline_s: float, max_bytes: int) -> bytes:
    try:
        r = opener.open(req, timeout=deadline_s)
    except urllib.error.HTTPError as e:
        try:
            body = e.read(ERROR_BODY_BYTES)
        finally:
            e.close()
        raise HTTPStatusError(req.full_url, e.code, e.reason, e.headers, body) from None
    with r:
        declared = r.headers.get("Content-Length")
        if declared and declared.strip().isdigit() and int(declared) > max_bytes:
            raise ReplyTooLarge(f"reply of {int(declared)} bytes from {req.full_url}, over the {max_bytes} byte limit")
        body = bytearray()
        while True:
            block = r.read1(65536)
            if not block:
                if declared and declared.strip().isdigit() and len(body) != int(declared):
                    raise ReplyError(f"reply from {req.full_url} cut short: {len(body)} of {int(declared)} bytes")
                return bytes(body)
            body += block
            if len(body) > max_bytes:
                raise ReplyTooLarge(f"reply from {req.full_url} longer than the {max_bytes} byte limit")
