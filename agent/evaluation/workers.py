"""Worker processes for whole tasks (`in_processes`: suites, recording, frame loading with
``--jobs``) and what every pool of spawned workers here shares: one torch thread each, and Ctrl-C
(or a `kill`, through `embodia.agent.loop.core.stop_as_ctrl_c`) ending the calls in flight while
starting no more."""
from __future__ import annotations

from contextlib import contextmanager


class TaskFailed(RuntimeError):
    """A task failed in a worker process: one line naming the task and the worker's error."""


def in_processes(fn, calls: list[tuple], jobs: int, on_task, doing: str) -> dict:
    """``fn(*call)`` for every call in ``jobs`` spawned worker processes; each call's first item is
    its task, each returns ``(task, row)``; ``on_task(task, row)`` as each finishes. The first failure
    stops the run: tasks not started are cancelled, and TaskFailed names the task (a worker's error
    never leaves a task silently missing)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool
    done: dict[str, dict] = {}
    # spawn: a fresh interpreter per worker (no GL context or torch pool inherited through fork)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                             initializer=idle_workers_ignore_ctrl_c) as ex, _one_thread_children(), \
            _cancel_on_interrupt(ex):
        futures = {ex.submit(interruptible, fn, *call): call[0] for call in calls}
        for fut in as_completed(futures):
            try:
                task, row = fut.result()
            except BrokenProcessPool:
                ex.shutdown(wait=False, cancel_futures=True)
                raise TaskFailed(f"{doing} {futures[fut]}: a worker process died (killed, or out of memory)") from None
            except Exception as e:  # noqa: BLE001 - any worker error ends the run, named in one line
                ex.shutdown(wait=False, cancel_futures=True)
                msg = " ".join(str(e).split()) or type(e).__name__
                raise TaskFailed(f"{doing} {futures[fut]} failed in a worker process: {type(e).__name__}: {msg}") from e
            done[task] = row
            if on_task:
                on_task(task, row)
    return done


@contextmanager
def _cancel_on_interrupt(pool):
    """Ctrl-C (or a `kill`, see `stop_as_ctrl_c`) while the workers run: the tasks not started are
    dropped, so the pool's shutdown waits only for those in flight, which the same interrupt ends."""
    try:
        yield
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        raise


_WORKER = {"in_call": False, "stopped": False}


def idle_workers_ignore_ctrl_c() -> None:
    """A pool worker's initializer: Ctrl-C interrupts a worker only while it runs a call
    (`interruptible`); an idle worker remembers it and runs nothing more. (An idle worker killed by
    it would break the pool, whose manager then terminates the others in the middle of closing their
    devices, a browser left behind; and a call already queued to a worker cannot be cancelled.)"""
    import signal

    def on_ctrl_c(signum, frame):
        _WORKER["stopped"] = True
        if _WORKER["in_call"]:
            raise KeyboardInterrupt
    signal.signal(signal.SIGINT, on_ctrl_c)


def interruptible(fn, *args):
    """``fn(*args)`` in a worker, Ctrl-C's interrupt on while it runs (an episode in flight ends as
    interrupted and its device closes); after an interrupt the worker starts no further call."""
    if _WORKER["stopped"]:
        raise KeyboardInterrupt("the run was stopped before this call began")
    _WORKER["in_call"] = True
    try:
        return fn(*args)
    finally:
        _WORKER["in_call"] = False


@contextmanager
def _one_thread_children():
    """While workers start, ``OMP_NUM_THREADS=1`` (unless set) in the environment they inherit: N
    workers on N cores, each with a core-sized OpenMP/torch pool, oversubscribe the machine."""
    import os
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
