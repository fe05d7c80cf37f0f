"""``--policy lerobot:<dir>``: a policy LeRobot saved, run in LeRobot's own environment and reached
over the websocket protocol, steerable by the success memory (docs/lerobot.md).

LeRobot's pins (torch<2.11, transformers 4.x) cannot share a process with embodia's, so the policy
runs in `embodia.policies.lerobot_server` under LeRobot's Python, started here and stopped when the
policy closes (or when this process dies: it watches its standard input). ``lerobot:ws://host:port``
connects to one already running instead.

>>> pol = open_lerobot("out/smolvla-small", device.embodiment)      # doctest: +SKIP
>>> pol.origin                                                       # doctest: +SKIP
'started the LeRobot side (pid 4242, .venv-lerobot/bin/python) on ws://127.0.0.1:39113'
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embodia.devices import Embodiment
from embodia.policies.ws_policy import DEFAULT_KEY_ENV, PolicyServerError, WebsocketPolicy

PYTHON_ENV = "EMBODIA_LEROBOT_PYTHON"
VENV = ".venv-lerobot"
SERVER = Path(__file__).resolve().parents[1] / "lerobot_server.py"
SETUP = (f'python3 -m venv {VENV} && {VENV}/bin/pip install "lerobot[smolvla,async]==0.4.4" '
         f'"websockets>=13" msgpack')


def lerobot_dir(target: str) -> Path:
    """The folder ``lerobot:<target>`` names: a path, or the name of a bundled one (``smolvla-mt6``)."""
    from embodia.policies import BUNDLED_CHECKPOINTS
    bundled = BUNDLED_CHECKPOINTS / target
    if "/" not in target and (bundled / "bundle.json").is_file():
        return bundled
    return Path(target).expanduser()


class LeRobotSideError(PolicyServerError):
    """The LeRobot side cannot be started or refused the directory (the message says why, in one line)."""


def lerobot_python() -> str:
    """The Python of LeRobot's environment: ``$EMBODIA_LEROBOT_PYTHON``, else ``.venv-lerobot`` in the
    working directory or beside this source checkout."""
    env = os.environ.get(PYTHON_ENV, "").strip()
    if env:
        if not os.access(env, os.X_OK):
            raise LeRobotSideError(f"${PYTHON_ENV}={env!r} is not an executable Python")
        return env
    for root in (Path.cwd(), SERVER.parents[1]):
        py = root / VENV / "bin" / "python"
        if py.is_file():
            return str(py)
    raise LeRobotSideError(f"no LeRobot environment: make one with `{SETUP}` (docs/lerobot.md), "
                           f"or set ${PYTHON_ENV} to its python")


class LeRobotSide:
    """The server process: started with a free port, its one ready line read, stopped on `stop`."""

    def __init__(self, policy_dir: str | Path, embodiment: Embodiment | None, *, python: str | None = None,
                 timeout_s: float = 180.0, threads: int = 1):
        self.python = python or lerobot_python()
        path = lerobot_dir(str(policy_dir))
        if not path.is_dir():
            raise LeRobotSideError(f"{path}: not a directory (lerobot:<dir> takes a folder LeRobot saved)")
        self.log = tempfile.NamedTemporaryFile("w+b", prefix="embodia-lerobot-", suffix=".log", delete=False)
        cmd = [self.python, str(SERVER), "--policy", str(path.resolve()), "--port", "0", "--exit-with-stdin",
               "--threads", str(threads)] + (["--embodiment", embodiment.name] if embodiment else [])
        # its own child on loopback: no key (the parent's $EMBODIA_API_KEY is for servers it connects to)
        env = {k: v for k, v in os.environ.items() if k != DEFAULT_KEY_ENV}
        env["HF_HUB_OFFLINE"] = os.environ.get("HF_HUB_OFFLINE", "1")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env)
        self.url = self._ready(timeout_s)

    def _ready(self, timeout_s: float) -> str:
        deadline, buf = time.monotonic() + timeout_s, b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise LeRobotSideError(f"the LeRobot side did not start within {timeout_s:g} s (log: {self.log.name})")
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:       # it exited: its last line says why
                    self.proc.wait(10)
                    raise LeRobotSideError(self._last_error())
                buf += chunk
            elif self.proc.poll() is not None:
                raise LeRobotSideError(self._last_error())
        try:
            return json.loads(buf.splitlines()[-1])["ready"]
        except (ValueError, KeyError, TypeError):
            self.stop()
            raise LeRobotSideError(f"the LeRobot side said {buf[:200]!r} instead of its address") from None

    def _last_error(self) -> str:
        self.log.flush()
        lines = [ln for ln in Path(self.log.name).read_text(errors="replace").splitlines() if ln.strip()]
        said = next((ln for ln in reversed(lines) if ln.startswith("error:")), lines[-1] if lines else "")
        said = said.removeprefix("error: ")
        return f"the LeRobot side exited ({self.proc.returncode}): {said or 'no message'} (log: {self.log.name})"

    def stop(self, *, keep_log: bool = True) -> None:
        """End the process; its log is removed unless ``keep_log`` (an error names it)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()
        self.log.close()
        if not keep_log:
            Path(self.log.name).unlink(missing_ok=True)


def open_lerobot(target: str, embodiment: Embodiment, *, api_key_env: str | None = DEFAULT_KEY_ENV,
                 threads: int = 1) -> WebsocketPolicy:
    """The policy behind ``lerobot:<target>``: a directory LeRobot saved (its side started here) or
    ``ws://...`` (connected to). ``origin`` on the policy says which."""
    if target.startswith(("ws://", "wss://")):
        policy = WebsocketPolicy(target, api_key_env=api_key_env).bind(embodiment)
        policy.origin = f"connected to the LeRobot side at {target}"
        print(policy.origin, file=sys.stderr)
        return policy
    side = LeRobotSide(target, embodiment, threads=threads)
    try:
        policy = WebsocketPolicy(side.url, api_key_env=None)
    except BaseException:
        side.stop()
        raise
    policy.process = side       # close() stops it
    policy.origin = f"started the LeRobot side (pid {side.proc.pid}, {side.python}) on {side.url}"
    print(policy.origin, file=sys.stderr)      # the user sees which, before the episode's lines
    return policy.bind(embodiment)
