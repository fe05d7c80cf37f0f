"""`--policy openai:<model>` against an endpoint that misbehaves (issue 55): a reply trickled byte by
byte, its status line trickled, or a body far over the size cap (declared, or sent without a length).
The decision ends within the policy's deadline plus a second, the episode's error is one line that
names the cause, and the device executes nothing.

Before: the policy read replies with ``urlopen(timeout=T)``, which bounds each socket read, not the
reply: a trickled reply ran on for as long as the server kept sending, and any body was read whole."""
import json
import socketserver
import threading
import time

import numpy as np
import pytest

from embodia.agent.loop.episode import run_episode
from embodia.devices import Screen
from embodia.devices.gui import GuiDevice, gui_embodiment
from embodia.policies.gui.remote import EndpointError, OpenAIPolicy

DEADLINE = 2.0
CAP = 64 << 10
GOOD = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant",
                                                        "content": '{"type": "click", "point": [500, 500]}'}}]}).encode()


class Endpoint(socketserver.ThreadingTCPServer):
    """A loopback chat endpoint on raw sockets that answers as ``mode`` says."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mode: str):
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode, self.stop = mode, threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        s, srv = self.request, self.server
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
        while len(body) < length:
            body += s.recv(65536)
        header = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(GOOD)}\r\n\r\n".encode()
        try:
            if srv.mode in ("trickle", "trickle-headers"):
                sent = header if srv.mode == "trickle-headers" else header + GOOD
                start = 0 if srv.mode == "trickle-headers" else len(header)
                s.sendall(sent[:start])
                for b in sent[start:]:                      # one byte every 0.2 s: minutes in all
                    if srv.stop.wait(0.2):
                        return
                    s.sendall(bytes([b]))
            elif srv.mode == "huge-declared":
                s.sendall(header.replace(str(len(GOOD)).encode(), b"50000000"))
                srv.stop.wait(30)
            elif srv.mode == "huge-chunked":                # no length: the body just keeps coming
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
                block = b" " * 65536
                while not srv.stop.is_set():
                    s.sendall(block)
        except OSError:
            pass


class Phone(GuiDevice):
    """A screen that records every action it is asked to execute."""

    supported = frozenset({"click", "type"})

    def __init__(self):
        super().__init__()
        self.embodiment = gui_embodiment("fake-phone", "gui-phone", Screen(400, 800))
        self.log = []

    def _screen(self):
        return Screen(400, 800)

    def _grab(self):
        return np.zeros((800, 400, 3), np.uint8)

    def _execute(self, action, p, q):
        self.log.append(action)


@pytest.fixture
def endpoint(request):
    srv = Endpoint(request.param)
    yield srv
    srv.stop.set()
    srv.shutdown()
    srv.server_close()


CAUSES = {"trickle": f"within {DEADLINE:g} s", "trickle-headers": f"within {DEADLINE:g} s",
          "huge-declared": f"over the {CAP} byte limit", "huge-chunked": f"longer than the {CAP} byte limit"}


@pytest.mark.parametrize("endpoint", list(CAUSES), indirect=True)
def test_a_trickled_or_oversized_reply_ends_the_decision_in_time_and_executes_nothing(endpoint):
    dev = Phone()
    pol = OpenAIPolicy("test", endpoint.url, api_key_env=None, timeout_s=DEADLINE, max_reply_bytes=CAP,
                       backoff_s=0.01).bind(dev.embodiment)
    t0 = time.monotonic()
    r = run_episode(dev, pol, instruction="press it", max_steps=3)
    took = time.monotonic() - t0
    assert took <= DEADLINE + 1.0, (endpoint.mode, took)
    assert dev.log == [] and r.steps == 0
    assert r.error.startswith("EndpointError") and "\n" not in r.error, r.error
    assert CAUSES[endpoint.mode] in r.error and endpoint.url in r.error, r.error


@pytest.mark.parametrize("endpoint", ["trickle"], indirect=True)
def test_the_deadline_covers_the_whole_decision_and_a_direct_call_raises_one_line(endpoint):
    pol = OpenAIPolicy("test", endpoint.url, api_key_env=None, timeout_s=1.0, http_retries=5).bind(Phone().embodiment)
    t0 = time.monotonic()
    with pytest.raises(EndpointError) as e:
        pol.act(Phone().observe(), "press it")
    assert time.monotonic() - t0 <= 2.0 and "\n" not in str(e.value) and "within 1 s" in str(e.value)


def test_a_deadline_or_a_cap_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="timeout_s and max_reply_bytes must be > 0"):
        OpenAIPolicy("test", "http://127.0.0.1:9/v1", timeout_s=0)
