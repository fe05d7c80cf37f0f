"""A loopback OpenAI-compatible chat server for tests: scripted replies, every request kept.

Use it from a test module with ``pytest_plugins = ("fake_openai",)``::

    def test_retry(fake_openai):
        fake_openai.script(503, "Action: click(start_box='(10,20)')")
        pol = OpenAIPolicy("test", fake_openai.url, backoff_s=0.01).bind(embodiment)
        pol.act(obs, "press it")
        assert fake_openai.requests[1].body["model"] == "test"

Each POST ``/v1/chat/completions`` takes the next entry of the script:

- ``str``: a 200 chat completion (id, object, created, model, choices[0].message {role, content},
  finish_reason, usage) whose content is that text;
- ``int``: that HTTP status with an OpenAI-style ``{"error": {...}}`` body;
- `Reply`: full control (content, native tool calls, status, headers, finish reason, a raw body);
- a callable: called with the `Request`, returns one of the above (a reply computed from what
  the client sent, e.g. a point in the pixels of the image it received).

A request with no script entry left is answered 400 with a message saying so, so a test fails
instead of hanging. ``GET /v1/models`` lists the model. With ``require_key`` set, a request
without ``Authorization: Bearer <key>`` gets a 401 whose message echoes the key it was given (as
some servers do), without taking a script entry.
"""
from __future__ import annotations

import base64
import io
import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Union

import pytest

CHAT_PATH = "/v1/chat/completions"


@dataclass
class Reply:
    """One scripted answer; ``body`` (bytes) replaces the JSON the server would build."""

    content: str | None = ""
    tool_calls: list | None = None      # OpenAI form: [{"id", "type": "function", "function": {"name", "arguments"}}]
    status: int = 200
    headers: dict = field(default_factory=dict)
    finish_reason: str = "stop"
    body: bytes | None = None


Entry = Union[str, int, Reply, Callable[["Request"], Union[str, int, Reply]]]


@dataclass
class Request:
    """A request the server received: ``headers`` with lower-case names, ``body`` parsed JSON (None
    when it is not JSON)."""

    method: str
    path: str
    headers: dict
    body: dict | None
    raw: bytes

    def texts(self) -> list[str]:
        """Every text part of every message, in order."""
        out = []
        for m in (self.body or {}).get("messages", []):
            c = m.get("content")
            if isinstance(c, str):
                out.append(c)
            elif isinstance(c, list):
                out += [p["text"] for p in c if p.get("type") == "text"]
        return out

    def image_urls(self) -> list[str]:
        return [p["image_url"]["url"] for m in (self.body or {}).get("messages", [])
                if isinstance(m.get("content"), list) for p in m["content"] if p.get("type") == "image_url"]

    def image_sizes(self) -> list[tuple[int, int]]:
        """(width, height) of every image sent as a base64 data URL."""
        from PIL import Image
        sizes = []
        for url in self.image_urls():
            head, _, data = url.partition(",")
            assert head.startswith("data:image/") and head.endswith(";base64"), head[:40]
            with Image.open(io.BytesIO(base64.b64decode(data, validate=True))) as im:
                sizes.append(im.size)
        return sizes


def completion(text: str | None, model: str, n: int, *, tool_calls=None, finish_reason="stop",
               prompt_chars: int = 0) -> dict:
    """A chat completion in the OpenAI wire format (token counts are rough: 4 characters a token)."""
    message = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    out_tokens = len(text or "") // 4 + 1
    return {"id": f"chatcmpl-fake-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": out_tokens,
                      "total_tokens": prompt_chars // 4 + out_tokens}}


def error_body(status: int, message: str) -> dict:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
             429: "rate_limit_error"}
    return {"error": {"message": message, "type": kinds.get(status, "server_error"), "code": status}}


class FakeOpenAI:
    """The server; `start()` binds 127.0.0.1 on a free port (``url`` is the base URL, ending in /v1)."""

    def __init__(self, *entries: Entry, model: str = "test", require_key: str | None = None):
        self.model, self.require_key = model, require_key
        self.requests: list[Request] = []
        self._script: deque = deque(entries)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def chats(self) -> list[Request]:
        """The chat-completion requests, in order."""
        return [r for r in self.requests if r.path == CHAT_PATH]

    def script(self, *entries: Entry) -> "FakeOpenAI":
        """Append replies to the script."""
        with self._lock:
            self._script.extend(entries)
        return self

    @property
    def left(self) -> int:
        return len(self._script)

    def start(self) -> "FakeOpenAI":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):      # quiet: tests read `requests` instead
                pass

            def do_GET(self):
                fake._handle(self, "GET")

            def do_POST(self):
                fake._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- serving -----------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = h.path.split("?", 1)[0]
        req = Request(method, path, {k.lower(): v for k, v in h.headers.items()}, body, raw)
        with self._lock:
            self.requests.append(req)
        status, payload, headers = self._answer(req)
        data = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode("utf-8")
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            h.send_header(k, str(v))
        h.end_headers()
        h.wfile.write(data)

    def _answer(self, req: Request) -> tuple[int, dict | bytes, dict]:
        if req.method == "GET" and req.path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0,
                                                     "owned_by": "fake_openai"}]}, {}
        if req.method != "POST" or req.path != CHAT_PATH:
            return 404, error_body(404, f"no route {req.method} {req.path}"), {}
        if self.require_key is not None:
            given = req.headers.get("authorization", "")
            if given != f"Bearer {self.require_key}":
                shown = given.removeprefix("Bearer ") or "(none)"
                return 401, error_body(401, f"Incorrect API key provided: {shown}"), {}
        body = req.body
        if not isinstance(body, dict) or not isinstance(body.get("model"), str) \
                or not isinstance(body.get("messages"), list) or not body["messages"]:
            return 400, error_body(400, "the body must be JSON with 'model' and a non-empty 'messages' list"), {}
        n = next(self._ids)
        with self._lock:
            entry = self._script.popleft() if self._script else None
        if entry is None:
            return 400, error_body(400, f"fake_openai: no scripted reply left for chat request {n}"), {}
        if callable(entry):
            entry = entry(req)
        if isinstance(entry, str):
            entry = Reply(entry)
        elif isinstance(entry, int):
            entry = Reply(status=entry)
        if entry.body is not None:
            return entry.status, entry.body, entry.headers
        if entry.status != 200:
            return entry.status, error_body(entry.status, f"scripted HTTP {entry.status}"), entry.headers
        return 200, completion(entry.content, body["model"], n, tool_calls=entry.tool_calls,
                               finish_reason=entry.finish_reason, prompt_chars=len(req.raw)), entry.headers


@pytest.fixture
def fake_openai():
    """A started `FakeOpenAI` with an empty script; stopped after the test."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
