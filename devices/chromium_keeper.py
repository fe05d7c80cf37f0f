"""Chromium's keeper: a small process that starts Chromium, and ends it and removes its profile when
the embodia process that owns it goes, however it goes (``kill -9`` included).

    python chromium_keeper.py PROFILE EXECUTABLE [ARG ...]

The owner holds the write end of the keeper's stdin and never writes to it; the kernel closes that
end when the owner exits or is killed, and the keeper reads end-of-file. Then it ends Chromium's
process group (`end_group`) and removes PROFILE. On stdout the keeper tells its owner Chromium's
process id (first line, the id of its process group too) and, should Chromium exit first, a line
``exited CODE``; it then waits for its owner all the same, so that the profile never outlives it.

Why a keeper and not ``PR_SET_PDEATHSIG``: that signal reaches the browser alone (its renderer, GPU
and zygote helpers stay behind, reparented to PID 1) and nobody removes the profile. The keeper is
the browser's parent, so it reaps it too. It reads the standard library only (it starts in
``python -I``, without embodia's imports), and it ignores the terminal's Ctrl-C: the owner, which
gets it, closes the browser itself.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading

__all__ = ["end_group", "main"]


def end_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the browser alone first: it shuts down its renderer, GPU and zygote helpers and
    reaps them (killed together, they would stay zombies where PID 1 reaps nothing, as in a
    container); then SIGKILL whatever is left of its process group, and reap the browser."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)     # helpers that outlived the browser, or a browser that hung
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace_s)


def _say(line: str) -> None:
    with contextlib.suppress(OSError):          # an owner that is gone reads nothing
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _report_exit(proc: subprocess.Popen) -> None:
    """Tell the owner when Chromium exits by itself, and end the helpers it left."""
    code = proc.wait()
    _say(f"exited {code}")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    profile, cmd = argv[0], argv[1:]
    try:        # Chromium writes to the keeper's stderr, the owner's log file
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        _say(f"exited cannot start {cmd[0]}: {e}")
        proc = None
    else:
        _say(str(proc.pid))
        threading.Thread(target=_report_exit, args=(proc,), daemon=True).start()
    with contextlib.suppress(OSError):
        while os.read(0, 4096):                 # the owner never writes: this waits for it to go
            pass
    if proc is not None:
        end_group(proc)
    shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
