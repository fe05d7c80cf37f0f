"""The serving core both other-environment sides share (`lerobot_server`, `openpi_server`): embodia's
websocket protocol (openpi's wire) around any *served* policy, with `embodia serve`'s rules.

A served policy gives ``metadata`` (a dict sent on connect), ``read(msg) -> request`` (ValueError in
one line for anything malformed), ``generator()`` (a fresh noise generator for a connection),
``seed(generator, seed)`` and ``decide(request, generator) -> reply``. This file imports numpy and
the standard library only, and loads the wire format (`wire.py` beside it) by its path, so a
server in another environment runs it without embodia installed.
"""
from __future__ import annotations

import asyncio
import hmac
import importlib.util
import ipaddress
import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

log = logging.getLogger("embodia.flow_server")
API_KEY_ENV = "EMBODIA_API_KEY"
MIN_KEY_CHARS = 16      # as embodia serve: a short key is guessed


def load_sibling(name: str):
    """The module ``<name>.py`` beside this file, loaded by its path (embodia is not installed here)."""
    spec = importlib.util.spec_from_file_location(f"_embodia_{name}", Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


wire = load_sibling("wire")


def shape_of(x) -> str:
    """What a field holds, for a one-line error."""
    return f"{x.dtype} {list(x.shape)}" if isinstance(x, np.ndarray) else type(x).__name__


def check_noise(noise, shape: tuple[int, int]):
    """The request's ``noise`` field as float32 ``shape``, or None; ValueError naming what is wrong."""
    if noise is None:
        return None
    if not isinstance(noise, np.ndarray) or noise.shape != shape or noise.dtype.kind != "f":
        raise ValueError(f"'noise' must be float32 {list(shape)}, got {shape_of(noise)}")
    if not np.all(np.isfinite(noise)):
        raise ValueError("'noise' has NaN or inf")
    return noise.astype(np.float32)


class FlowServer:
    """The websocket side: one model worker, per-connection noise generators (seeded by a request's
    ``seed``), embodia serve's limits: bounded frames, a connection cap, the API key, idle close."""

    def __init__(self, served, *, api_key: str | None = None, max_message_bytes: int = 1 << 24,
                 max_connections: int = 16, idle_s: float = 300.0):
        self.served, self.api_key = served, api_key
        self.max_message_bytes, self.max_connections, self.idle_s = max_message_bytes, max_connections, idle_s
        self.metadata = {**served.metadata, "max_message_bytes": max_message_bytes}
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="lerobot-model")
        self.open = 0
        self.port = None

    def check_handshake(self, connection, request):
        from http import HTTPStatus
        if request.path.split("?")[0] == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if self.open >= self.max_connections:
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections; retry later\n")
        if self.api_key is not None:
            sent = request.headers.get("Authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Api-Key {self.api_key}".encode()):
                return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong API key "
                                                                   "(send 'Authorization: Api-Key <key>')\n")
        return None

    async def handle(self, ws) -> None:
        from websockets.exceptions import ConnectionClosed
        self.open += 1
        generator = self.served.generator()
        try:
            await ws.send(wire.packb(self.metadata))
            valid, errors = time.monotonic(), 0        # idle means no valid request: junk does not hold a place
            while True:
                try:
                    frame = await asyncio.wait_for(ws.recv(), max(0.0, valid + self.idle_s - time.monotonic()))
                except TimeoutError:
                    await ws.close(1000, f"no valid request for {self.idle_s:g} s")
                    return
                reply = await self.answer(frame, generator)
                await ws.send(wire.packb(reply))
                errors = errors + 1 if "error" in reply else 0
                if errors:      # a flood of refused messages waits longer each time (up to 0.5 s)
                    await asyncio.sleep(min(0.5, 0.001 * 2 ** min(errors, 10)))
                else:
                    valid = time.monotonic()
        except ConnectionClosed:
            pass
        finally:
            self.open -= 1

    async def answer(self, frame, generator) -> dict:
        try:
            if not isinstance(frame, bytes):
                raise ValueError("expected a binary msgpack frame, got text")
            msg = wire.unpackb(frame)
            if not isinstance(msg, dict):
                raise ValueError(f"expected a map (an observation or a control), got a {type(msg).__name__}")
            if "__ctrl__" in msg:
                kind = msg["__ctrl__"]
                return {"__ack__": kind if kind in ("episode_start", "episode_end") else "ignored"}
            req = self.served.read(msg)
            seed = msg.get("seed")
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63):
                raise ValueError(f"'seed' must be a whole number from 0 to 2**63 - 1, got {seed!r}")
            t = time.perf_counter()
            loop = asyncio.get_running_loop()
            out = await loop.run_in_executor(self.worker, self._decide, req, generator, seed, msg.get("reset"))
            return {**out, "server_timing": {"infer_ms": (time.perf_counter() - t) * 1e3}}
        except ValueError as e:
            return {"error": str(e).splitlines()[0] if str(e) else "malformed request"}
        except Exception as e:      # noqa: BLE001 - a model error must not take the server down for every client
            log.exception("request failed")
            return {"error": f"internal error: {type(e).__name__}: {e}".splitlines()[0]}

    def _decide(self, req, generator, seed, reset) -> dict:
        if seed is not None or reset:
            self.served.seed(generator, 0 if seed is None else int(seed))
        return self.served.decide(req, generator)

    async def serve(self, host: str, port: int, on_ready) -> None:
        from websockets.asyncio.server import serve
        async with serve(self.handle, host, port, compression=None, max_size=self.max_message_bytes,
                         process_request=self.check_handshake) as srv:
            self.port = srv.sockets[0].getsockname()[1]
            on_ready(self)
            await asyncio.Future()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exit_with_stdin() -> None:
    """Exit when standard input closes: the process that started this one is gone."""
    def watch():
        while sys.stdin.buffer.read(1 << 16):
            pass
        os._exit(0)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def add_server_options(ap) -> None:
    """The options every side takes beside its policy."""
    ap.add_argument("--host", default="127.0.0.1", help="the address to bind (not loopback: needs $EMBODIA_API_KEY)")
    ap.add_argument("--port", type=int, default=8000, help="the port (0: any free one)")
    ap.add_argument("--max-message-bytes", type=int, default=1 << 24)
    ap.add_argument("--exit-with-stdin", action="store_true", help="exit when standard input closes")
    ap.add_argument("--idle-s", type=float, default=300.0, help="close a connection with no valid request for this long")


def check_key(host: str) -> str | None:
    """``$EMBODIA_API_KEY`` (None: unset), or SystemExit(2) with one line: a short key, or none on a
    non-loopback address."""
    key = os.environ.get(API_KEY_ENV) or None
    if key is not None and len(key) < MIN_KEY_CHARS:
        print(f"error: ${API_KEY_ENV} has {len(key)} characters; a key needs at least {MIN_KEY_CHARS}", file=sys.stderr)
        raise SystemExit(2)
    if not is_loopback(host) and key is None:
        print(f"error: --host {host} is not loopback: set ${API_KEY_ENV} so every client must send it",
              file=sys.stderr)
        raise SystemExit(2)
    return key


def run(served, a, key: str | None, ready_out=None) -> int:
    """Serve ``served`` until interrupted; one JSON line ``{"ready": url, ...}`` on ``ready_out`` (stdout)."""
    server = FlowServer(served, api_key=key, max_message_bytes=a.max_message_bytes, idle_s=a.idle_s)
    out = ready_out or sys.stdout

    def ready(s):
        print(json.dumps({"ready": f"ws://{a.host}:{s.port}", "policy": served.metadata.get("policy"),
                          "pid": os.getpid()}), file=out, flush=True)
    try:
        asyncio.run(server.serve(a.host, a.port, ready))
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        print(f"error: cannot serve on {a.host}:{a.port}: {e}", file=sys.stderr)
        return 2
    return 0
