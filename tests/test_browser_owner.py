"""Chromium belongs to the embodia process that started it: an `embodia run` killed with ``kill -9``
leaves no browser process and no profile behind; a page's download lands nowhere (not in
~/Downloads); the DevTools port refuses a web page's websocket. Real processes throughout."""
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from embodia.devices.cdp import Chromium, find_chromium

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (apt-get install chromium)")

DOWNLOAD = """<!doctype html><html><head><title>Download</title></head><body>
<a id="get" href="data:application/octet-stream;base64,c2VjcmV0" download="secret.bin">Get it</a>
<script>document.getElementById('get').click(); document.title = 'clicked';</script></body></html>"""


def _running(text: str) -> list[int]:
    """Processes (not zombies: they are dead) whose command line names ``text``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in cmd and state != "Z":
            out.append(int(pid))
    return out


def _wait_for_title(tmp, title: str, timeout_s: float = 60) -> None:
    """Until a browser under ``tmp`` shows a tab titled ``title`` (its page ran its script)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for port_file in tmp.glob("embodia-chromium-*/DevToolsActivePort"):
            try:
                port = int(port_file.read_text().split()[0])
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                    if any(t.get("title") == title for t in json.loads(r.read())):
                        return
            except (OSError, ValueError, IndexError):
                pass
        time.sleep(0.2)
    raise AssertionError(f"no browser tab titled {title!r} within {timeout_s} s")


def test_a_killed_embodia_run_takes_chromium_and_its_profile_and_downloads_nothing(tmp_path):
    page = tmp_path / "download.html"
    page.write_text(DOWNLOAD, encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    # a short temp folder: Chromium's singleton socket path must fit in 108 bytes
    tmp = Path(tempfile.mkdtemp(prefix="embodia-t-", dir="/tmp"))
    actions = tmp_path / "wait.jsonl"                   # a run that lasts: a wait action is a second each
    actions.write_text("\n".join(json.dumps({"type": "wait"}) for _ in range(600)), encoding="utf-8")
    env = dict(os.environ, HOME=str(home), TMPDIR=str(tmp))
    cmd = [sys.executable, "-m", "embodia", "run", "-d", f"browser:{page.as_uri()}", "--policy", f"actions:{actions}",
           "--no-record"]
    run = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        _wait_for_title(tmp, "clicked")
        time.sleep(1.5)                                 # time for a download to be written, were it allowed
        assert _running(str(tmp)), "the browser should run while embodia does"
        run.send_signal(signal.SIGKILL)
        run.wait(10)
        deadline = time.monotonic() + 10
        while (_running(str(tmp)) or list(tmp.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _running(str(tmp)) == [], "Chromium outlived the embodia that started it"
        assert list(tmp.iterdir()) == [], "the profile (or Chromium's temp files) outlived embodia"
        downloads = home / "Downloads"
        assert not downloads.exists() or list(downloads.iterdir()) == []
    finally:
        run.kill()
        for pid in _running(str(tmp)):                  # whatever a failing run left
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_devtools_port_refuses_a_web_pages_websocket():
    with Chromium.launch() as chrome:
        with urllib.request.urlopen(f"http://127.0.0.1:{chrome.port}/json/version", timeout=10) as r:
            browser_ws = json.loads(r.read())["webSocketDebuggerUrl"]
        with pytest.raises(InvalidStatus, match="403"):
            connect(browser_ws, origin="http://attacker.example", open_timeout=10)
        with connect(browser_ws, open_timeout=10) as ws:         # embodia's own client: no Origin
            ws.send(json.dumps({"id": 1, "method": "Browser.getVersion"}))
            assert "product" in json.loads(ws.recv(timeout=10))["result"]


def test_a_child_forked_from_embodia_does_not_keep_the_browser():
    with Chromium.launch() as chrome:
        fd = chrome.keeper.stdin.fileno()
        pid = os.fork()
        if pid == 0:                                   # the child: is the keeper's pipe still held here?
            os._exit(1 if stat.S_ISFIFO(os.fstat(fd).st_mode) else 0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "a forked child holds the keeper's pipe"
        assert chrome.why_gone() is None and stat.S_ISFIFO(os.fstat(fd).st_mode)     # the parent still does
