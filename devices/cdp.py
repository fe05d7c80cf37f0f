"""Chromium over the Chrome DevTools Protocol: start the browser, talk to one page on a websocket.

>>> with Chromium.launch() as chrome:                                 # doctest: +SKIP
...     page = chrome.page()
...     page.call("Page.navigate", url="file:///tmp/form.html")
...     page.call("Runtime.evaluate", expression="document.title", returnByValue=True)["result"]["value"]
'Form'

Why CDP and not WebDriver: Debian ships ``chromium`` without ``chromedriver`` in the same package,
and CDP gives what a GUI device needs in one connection: screenshots (``Page.captureScreenshot``),
the accessibility tree (``Accessibility.getFullAXTree``), layout boxes of every node in one call
(``DOMSnapshot.captureSnapshot``), trusted input events (``Input.*``) and the network events that
tell when a page has settled. The protocol is JSON messages on a websocket: a command carries an
``id`` and gets a reply with that id; events (no id) arrive in between and are kept for whoever
asks (`Page.events`).

The browser is started with ``--remote-debugging-port=0`` (the kernel picks a free port) and a
throw-away profile directory; Chromium writes the port it got to ``DevToolsActivePort`` in that
directory. The port refuses a websocket that carries an ``Origin`` (a web page's, whatever its
origin: there is no ``--remote-allow-origins``); embodia's own client sends none. A page's downloads
are refused (``Browser.setDownloadBehavior`` deny): nothing lands in ~/Downloads.

Chromium is started by its keeper (`embodia.devices.chromium_keeper`), a small process that holds a
pipe to embodia: when embodia exits, even by ``kill -9``, the keeper ends Chromium's process group
(the renderer, GPU and zygote helpers with it) and removes the profile; a child forked from embodia
drops its copy of that pipe, so it cannot keep the browser alive. `Chromium.close` does the same at once. A browser that exits or a socket that closes raises `DeviceLost`.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from collections import deque
from typing import Any

from embodia.devices import chromium_keeper
from embodia.devices.base import DeviceLost

__all__ = ["CdpError", "Chromium", "Page", "find_chromium"]

START_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 30.0


class CdpError(RuntimeError):
    """The browser answered a command with an error (a bad parameter, a node that is gone)."""


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_args(port_dir: str, *, headless: bool, size: tuple[int, int]) -> list[str]:
    """The command line: a private profile, no first-run prompts, background work switched off
    (sync, component updates, translation), so a test or an agent sees only its own page's work."""
    args = [f"--user-data-dir={port_dir}", "--remote-debugging-port=0",
            "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-features=Translate,MediaRouter",
            "--disable-extensions", "--mute-audio", "--password-store=basic", "--use-mock-keychain",
            "--disable-smooth-scrolling",      # a scroll (wheel or key) is done when the action returns
            f"--window-size={size[0]},{size[1]}"]
    if headless:
        args += ["--headless=new", "--hide-scrollbars"]
    if os.geteuid() == 0:      # Chromium refuses to run as root with its sandbox (containers, CI)
        args.append("--no-sandbox")
    return args + ["about:blank"]


class Page:
    """One page target's websocket: ``call(method, **params)`` waits for its reply; events that
    arrive meanwhile are queued in ``events`` (bounded) and read with `drain`."""

    def __init__(self, ws_url: str, *, alive=lambda: None):
        from websockets.sync.client import connect
        self._alive = alive          # returns why the browser is gone, or None
        # entering connect() connects, in every websockets version (17 warns about a bare call)
        self._ws = connect(ws_url, max_size=None, open_timeout=START_TIMEOUT_S, close_timeout=2,
                           compression=None).__enter__()
        self._next = 0
        self.events: deque[dict] = deque(maxlen=10_000)

    def send(self, method: str, **params) -> int:
        """Send a command without waiting (pipelining); returns its id for `reply`."""
        self._next += 1
        try:
            self._ws.send(json.dumps({"id": self._next, "method": method, "params": params}))
        except Exception as e:
            raise self._lost(e, method) from e
        return self._next

    def reply(self, call_id: int, method: str = "", timeout: float = CALL_TIMEOUT_S) -> dict:
        """The result of command ``call_id``; events read on the way are queued."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self._recv(max(0.0, deadline - time.monotonic()), method)
            if msg is None:
                raise DeviceLost(f"browser: no reply to {method or call_id} within {timeout:.0f} s")
            if msg.get("id") == call_id:
                if "error" in msg:
                    err = msg["error"]
                    raise CdpError(f"{method}: {err.get('message', err)}"
                                   + (f" ({err['data']})" if err.get("data") else ""))
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def call(self, method: str, timeout: float = CALL_TIMEOUT_S, **params) -> dict:
        return self.reply(self.send(method, **params), method, timeout)

    def drain(self, wait_s: float = 0.0) -> list[dict]:
        """Every queued event, after reading what arrives within ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            msg = self._recv(max(0.0, deadline - time.monotonic()), "events")
            if msg is None:
                break
            if "method" in msg:
                self.events.append(msg)
        out = list(self.events)
        self.events.clear()
        return out

    def _recv(self, timeout: float, what: str) -> dict | None:
        try:
            raw = self._ws.recv(timeout=timeout)
        except TimeoutError:
            return None
        except Exception as e:
            raise self._lost(e, what) from e
        return json.loads(raw)

    def _lost(self, err: Exception, what: str) -> DeviceLost:
        why = self._alive() or f"the DevTools connection closed ({type(err).__name__}: {err})"
        return DeviceLost(f"browser: {why}; cannot {what}")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()


_LIVE: weakref.WeakSet = weakref.WeakSet()      # every Chromium of this process not yet closed


def _forget_in_child() -> None:
    """A child forked from embodia closes its copies of the keepers' pipes: held there, they would
    keep a browser alive after embodia itself is gone (spawned children never get them)."""
    null = os.open(os.devnull, os.O_WRONLY)
    for chrome in list(_LIVE):      # the pipe's end replaced, not closed: its file object stays valid
        with contextlib.suppress(OSError, ValueError):
            os.dup2(null, chrome.keeper.stdin.fileno(), inheritable=False)
    os.close(null)


os.register_at_fork(after_in_child=_forget_in_child)


class Chromium:
    """A Chromium process with a private profile, driven over CDP (see the module doc).
    ``keeper`` is the keeper process, ``pid`` the browser's (and its process group's) id."""

    def __init__(self, keeper: subprocess.Popen, profile: str, stderr_path: str):
        self.keeper, self.profile, self._stderr_path = keeper, profile, stderr_path
        self.pid: int | None = None
        self.port = 0
        self._gone: str | None = None
        self._pages: list[Page] = []
        _LIVE.add(self)

    @classmethod
    def launch(cls, *, executable: str | None = None, headless: bool = True, size=(1280, 800),
               env: dict | None = None) -> Chromium:
        exe = executable or find_chromium()
        if exe is None:
            raise FileNotFoundError("browser: Chromium is not installed (Debian: apt-get install chromium)")
        profile = tempfile.mkdtemp(prefix="embodia-chromium-")
        err_path = os.path.join(profile, "stderr.log")
        env = dict(os.environ if env is None else env, TMPDIR=os.path.join(profile, "tmp"))
        os.mkdir(env["TMPDIR"])          # Chromium's own temp files (its singleton socket) go with the profile
        cmd = [sys.executable, "-I", chromium_keeper.__file__, profile, exe,
               *chromium_args(profile, headless=headless, size=size)]
        with open(err_path, "wb") as err:
            keeper = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                                      start_new_session=True)
        chrome = cls(keeper, profile, err_path)
        try:
            chrome._wait_started()
        except BaseException:
            chrome.close()
            raise
        return chrome

    def _wait_started(self) -> None:
        """The browser's process id (the keeper's first line), then the DevTools port Chromium
        writes to ``DevToolsActivePort`` (first line) once it listens."""
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.pid is None and select.select([self.keeper.stdout], [], [], 0.05)[0]:
                line = self.keeper.stdout.readline().decode(errors="replace").strip()
                if line.isdigit():
                    self.pid = int(line)
                else:
                    self._gone = _exit_reason(line)
            if self._gone or self.why_gone():
                raise DeviceLost(f"browser: {self._gone} at start: {_last_error(self._stderr_path)}")
            with contextlib.suppress(OSError, ValueError), open(path) as f:
                self.port = int(f.readline().strip())
                return
            time.sleep(0.05)
        raise DeviceLost(f"browser: Chromium did not open its DevTools port within {START_TIMEOUT_S:.0f} s")

    def why_gone(self, wait_s: float = 0.0) -> str | None:
        """Why the browser cannot be driven any more (it exited), or None while it runs; waits up
        to ``wait_s`` for the keeper's word (a socket that just closed: the exit is on its way)."""
        if self._gone is None and self.pid is not None:
            if select.select([self.keeper.stdout], [], [], wait_s)[0]:
                self._gone = _exit_reason(self.keeper.stdout.readline().decode(errors="replace").strip())
        return self._gone

    def page(self) -> Page:
        """A websocket to the browser's first page tab (the one it opened at start); downloads
        are refused from then on, in every tab."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as r:
            targets = json.loads(r.read())
        pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if not pages:
            raise DeviceLost("browser: Chromium shows no page tab")
        page = Page(pages[0]["webSocketDebuggerUrl"], alive=lambda: self.why_gone(1.0))
        self._pages.append(page)
        page.call("Browser.setDownloadBehavior", behavior="deny")
        return page

    def close(self) -> None:
        """Close the sockets, end the browser and every process it started, remove the profile:
        the keeper does it when its pipe closes (see the module doc)."""
        for page in self._pages:
            page.close()
        self._pages.clear()
        _LIVE.discard(self)
        with contextlib.suppress(OSError):
            self.keeper.stdin.close()
        try:
            self.keeper.wait(15)
        except subprocess.TimeoutExpired:        # a keeper that hung: end everything here
            self.keeper.kill()
            if self.pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
            self.keeper.wait(5)
        self.keeper.stdout.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _exit_reason(line: str) -> str:
    """The keeper's ``exited CODE`` line (nothing: the keeper itself is gone) in words."""
    what = line.removeprefix("exited").strip()
    if not line:
        return "Chromium's keeper exited"
    return f"Chromium exited (code {what})" if what.lstrip("-").isdigit() else f"Chromium exited ({what})"


def _last_error(err_path: str) -> str:
    """The last line of Chromium's stderr that says something (its reason to exit)."""
    with contextlib.suppress(OSError):
        with open(err_path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip() and "dbus" not in ln]
        if lines:
            return lines[-1][-300:]
    return "no message"


def evaluate(page: Page, expression: str, timeout: float = CALL_TIMEOUT_S) -> Any:
    """The value of a JavaScript expression in the page (awaited when it is a promise); a thrown
    exception becomes `CdpError` with its message."""
    r = page.call("Runtime.evaluate", timeout=timeout, expression=expression, returnByValue=True,
                  awaitPromise=True)
    if "exceptionDetails" in r:
        d = r["exceptionDetails"]
        msg = (d.get("exception") or {}).get("description") or d.get("text", "exception")
        raise CdpError(f"JavaScript: {msg.splitlines()[0]}")
    return r.get("result", {}).get("value")
