"""A virtual X screen (Xvfb) on a free display number, for headless desktops, benches and tests.

>>> server = start_xvfb(1280, 800, workdir="/tmp/xvfb")       # doctest: +SKIP
>>> server.display, server.env["DISPLAY"]                      # doctest: +SKIP
(':90', ':90')
>>> server.stop()                                              # doctest: +SKIP

The first display number tried is ``$EMBODIA_XVFB_FIRST`` (default 90), so sessions sharing a
machine can keep to their own ranges. Raises FileNotFoundError when Xvfb is not installed.
"""
from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SIZE = (1280, 800)


def stop_process(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


@dataclass
class XServer:
    """A running Xvfb: ``display`` (":N"), its size, and the environment that reaches it."""

    display: str
    width: int
    height: int
    xauthority: str           # an empty file: python-xlib insists on a readable one
    proc: subprocess.Popen = field(repr=False)
    log: Path = field(repr=False)

    @property
    def env(self) -> dict[str, str]:
        """``os.environ`` pointed at this server, for subprocesses (apps, xdotool)."""
        return {**os.environ, "DISPLAY": self.display, "XAUTHORITY": self.xauthority}

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop_process(self.proc)


def _display_taken(n: int) -> bool:
    return Path(f"/tmp/.X{n}-lock").exists() or Path(f"/tmp/.X11-unix/X{n}").exists()


def start_xvfb(width: int = DEFAULT_SIZE[0], height: int = DEFAULT_SIZE[1], *, workdir: Path,
               depth: int = 24, first: int | None = None, tries: int = 20, timeout: float = 10.0,
               extra_args: tuple[str, ...] = ()) -> XServer:
    """Start ``Xvfb :N -screen 0 WxHxD -nolisten tcp -noreset`` on a free display number and wait
    until it accepts connections; raises FileNotFoundError if Xvfb is not installed.
    (``-noreset``: without it the server resets whenever its last client leaves, and a client
    connecting at that moment is refused.)

    Free numbers are those without a lock file or socket; if another process takes the number
    first, Xvfb exits and the next number is tried. Readiness is Xvfb's own signal (-displayfd),
    then a connection to its socket.
    """
    if shutil.which("Xvfb") is None:
        raise FileNotFoundError("Xvfb is not installed (apt-get install xvfb)")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    xauth = workdir / "xauthority"
    xauth.touch()
    if first is None:        # several sessions on one machine: $EMBODIA_XVFB_FIRST gives each its range
        first = int(os.environ.get("EMBODIA_XVFB_FIRST", "90"))
    candidates = [n for n in range(first, first + 200) if not _display_taken(n)][:tries]
    for n in candidates:
        log = workdir / f"xvfb-{n}.log"
        ready_r, ready_w = os.pipe()
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["Xvfb", f":{n}", "-screen", "0", f"{width}x{height}x{depth}", "-nolisten", "tcp",
                 "-noreset", "-displayfd", str(ready_w), *extra_args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, pass_fds=(ready_w,),
                start_new_session=True)
        os.close(ready_w)
        try:
            said = _read_line(ready_r, timeout)
        finally:
            os.close(ready_r)
        if said.strip() == str(n).encode() and _accepts(n, proc, timeout):
            return XServer(f":{n}", width, height, str(xauth), proc, log)
        stop_process(proc)     # display taken meanwhile, or the server failed: try the next number
    tail = log.read_text(errors="replace")[-2000:] if candidates else "no free display number"
    raise RuntimeError(f"could not start Xvfb {width}x{height}: {tail}")


def _read_line(fd: int, timeout: float) -> bytes:
    """Read up to a newline or EOF. Xvfb writes the number and the newline separately, and dies
    if the pipe is closed in between, so stopping at the first chunk is not enough."""
    data, deadline = b"", time.monotonic() + timeout
    while b"\n" not in data:
        readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 64) if readable else b""
        if not chunk:
            break
        data += chunk
    return data


def _accepts(n: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(f"/tmp/.X11-unix/X{n}")
                return True
            except OSError:
                time.sleep(0.02)
    return False
