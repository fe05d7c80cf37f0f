"""Asynchronous execution: the next action chunk is computed while the current one executes.

The control thread steps the device at the control rate from the current chunk; one inference
thread computes the next chunk from the latest observation. A chunk computed from the observation
of step s that arrives when step t is due is d = t - s steps late (the inference delay): its first d
actions were meant for steps the previous chunk already executed, so execution continues at its
index d. A new decision starts as soon as the last one arrived and `exec_horizon` steps have passed
since it started. A step with no action ready is a stall: the loop waits for the inference. In
steady state there are none as long as a chunk is longer than the delay.

The switch from one chunk to the next can jump (the two chunks were sampled from different noise
and observations); `smooth` says what to do about it:

* ``none``: switch as is.
* ``inpaint``: real-time chunking, hard-prefix variant: the new chunk is sampled with the previous
  chunk's not-yet-executed actions inpainted as its prefix (weight 1 over the expected delay, then
  decaying toward 0 at the old chunk's end), so it continues the old plan instead of starting its own
  (`VLAPolicy.predict_chunk(prefix=...)`).
* ``ensemble``: every step executes the weighted mean of what the chunks that cover it predicted
  for it, the newest weighted most (ACT-style temporal ensembling).

Pacing is on by default: holding the control rate is the point.

>>> with open_device("sim:twogap-push") as dev:                                  # doctest: +SKIP
...     r = run_async(dev, policy, seed=0, smooth="inpaint")
...     r.timing["async"]["rate_frac"], r.timing["async"]["stall_steps"]
(0.99, 0)
"""
from __future__ import annotations

import math
import os
import queue
import sys
import threading
import time
from typing import Callable

import numpy as np

from embodia.agent.loop.core import EpisodeResult, EpisodeRun, latency_summary
from embodia.devices import as_device
from embodia.policies.base import as_policy, exec_steps

SMOOTHING = ("none", "inpaint", "ensemble")
ENSEMBLE_DECAY = 0.5          # weight exp(-0.5 * age) per newer chunk that also covers the step
JOIN_TIMEOUT_S = 30.0         # the longest a decision in flight may keep the episode from closing
THREAD_NAME = "embodia-inference"


class _NothingToDo(Exception):
    """The policy returned no chunk: the episode ends, as in the synchronous loop."""


class _Inference:
    """One background thread that makes decisions, one at a time; errors come back as results."""

    def __init__(self, decide: Callable):
        self._decide = decide
        self._requests: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self.busy = False
        self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            step, args = request
            t0 = time.perf_counter()
            try:
                out = self._decide(*args)
            except BaseException as e:      # the control thread raises it (KeyboardInterrupt included)
                out = e
            self._results.put((step, out, (time.perf_counter() - t0) * 1e3))

    def submit(self, step: int, *args) -> None:
        self.busy = True
        self._requests.put((step, args))

    def poll(self, wait: bool = False):
        """(step, chunk, latency_ms) of the decision in flight if it is done (or, with `wait`,
        once it is); None otherwise."""
        while True:
            try:
                step, out, ms = self._results.get(timeout=0.05) if wait else self._results.get_nowait()
                break
            except queue.Empty:
                if not wait:
                    return None
        self.busy = False
        if isinstance(out, BaseException):
            raise out
        return step, out, ms

    def close(self) -> bool:
        """Stop the thread once its decision in flight is done; False if it did not stop in time."""
        self._requests.put(None)
        self._thread.join(JOIN_TIMEOUT_S)
        return not self._thread.is_alive()


class _Plan:
    """The chunks that cover the coming steps: a chunk computed from the observation of step s
    holds the action for step s + i at row i."""

    def __init__(self, ensemble: bool):
        self.ensemble = ensemble
        self.chunks: list[tuple[int, np.ndarray]] = []

    def add(self, start: int, chunk: np.ndarray, now: int) -> bool:
        """Take a chunk that arrived when step `now` is due; False if all its actions are past."""
        if now - start >= len(chunk):
            return False
        live = [(s, c) for s, c in self.chunks if now - s < len(c)] if self.ensemble else []
        self.chunks = live + [(start, chunk)]
        return True

    def action(self, t: int) -> np.ndarray | None:
        live = [c[t - s] for s, c in self.chunks if 0 <= t - s < len(c)]
        if not live:
            return None
        if len(live) == 1:
            return live[-1]
        w = np.exp(-ENSEMBLE_DECAY * np.arange(len(live))[::-1])
        return ((w[:, None] * np.stack(live)).sum(0) / w.sum()).astype(np.float32)

    def remaining(self, t: int) -> np.ndarray:
        """The newest chunk's actions from step t on (what is planned but not yet executed)."""
        s, c = self.chunks[-1]
        return c[t - s:]


def inpaint_weights(n: int, delay: int) -> np.ndarray:
    """Real-time chunking's soft mask over a prefix of n actions: 1 over the expected delay, then
    an exponential decay that would reach 0 just past the previous chunk's end.

    >>> [round(float(w), 2) for w in inpaint_weights(6, 2)]
    [1.0, 1.0, 0.57, 0.29, 0.11, 0.03]
    """
    i = np.arange(n)
    c = np.clip((n - i) / (n - delay + 1), 0.0, 1.0)
    w = c * np.expm1(c) / np.expm1(1.0)
    return np.where(i < delay, 1.0, w).astype(np.float32)


def check_async(device, policy, smooth: str) -> None:
    """Refuse what asynchronous execution cannot do, before the episode starts."""
    if smooth not in SMOOTHING:
        raise ValueError(f"unknown smoothing {smooth!r}; known: {', '.join(SMOOTHING)}")
    if device.embodiment.is_gui:
        raise ValueError(f"asynchronous execution drives continuous-control bodies, not the GUI body "
                         f"{device.embodiment.name!r}")
    policy = as_policy(policy)
    if policy.ensemble is not None:
        raise ValueError("the policy ensembles its own chunks into single actions; with asynchronous "
                         "execution use smooth='ensemble' instead")
    if smooth == "inpaint" and not policy.accepts_prefix:
        raise ValueError(f"smooth='inpaint' needs a policy whose sampler takes a prefix (a VLA: "
                         f"embodia-tiny or a checkpoint), not {type(policy).__name__}")


def _decider(policy, smooth: str) -> Callable:
    """(obs, instruction, prefix, weights) -> float32[H, D], or None when there is nothing to do."""
    def decide(obs, instruction, prefix, weights):
        if prefix is not None:
            chunk = policy.predict_chunk(obs, instruction, prefix=prefix, prefix_weights=weights)
        else:
            chunk = policy.act(obs, instruction)
        if chunk is None:
            return None
        chunk = np.asarray(chunk, dtype=np.float32)
        return chunk[None] if chunk.ndim == 1 else chunk
    return decide


def _limit_torch_threads() -> int | None:
    """Leave one core to the control thread; returns the old setting (None: torch not in use)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, min(old, (os.cpu_count() or 2) - 1)))
    return old


class _AsyncRun:
    """The asynchronous loop's own state beside the shared ``EpisodeRun``: the plan of chunks, the
    inference thread, and what the report says about them."""

    def __init__(self, run: EpisodeRun, smooth: str, min_gap: int):
        self.run, self.smooth, self.min_gap = run, smooth, min_gap
        self.plan = _Plan(ensemble=smooth == "ensemble")
        self.worker = _Inference(_decider(run.policy, smooth))
        self.latency_ms, self.delays, self.switches, self.sent_at = [], [], [], []
        self.superseded = []   # (step, the action the previous plan held for the step a new chunk took over)
        self.stalls, self.stall_s, self.dropped = 0, 0.0, 0
        self.last_request, self.fresh_ms = 0, 0.0

    def take(self, got) -> bool:
        """Switch to an arrived chunk; False when the policy has nothing more to do."""
        start, chunk, ms = got
        self.latency_ms.append(ms)
        if chunk is None or len(chunk) == 0:
            return False
        now = self.run.steps
        if start > 0 or now > 0:
            self.delays.append(now - start)
        planned = self.plan.action(now)
        if self.plan.add(start, chunk, now):
            self.switches.append(now)
            self.fresh_ms = ms
            if planned is not None:
                self.superseded.append([now, planned.tolist()])
        else:
            self.dropped += 1
        return True

    def request(self) -> None:
        now, prefix, weights = self.run.steps, None, None
        if self.smooth == "inpaint" and self.plan.chunks and self.plan.action(now) is not None:
            prefix = self.plan.remaining(now)
            expected = max(self.delays[-8:]) if self.delays else math.ceil(self.latency_ms[-1] / 1e3 / self.run.period)
            weights = inpaint_weights(len(prefix), min(len(prefix), max(1, expected)))
        self.worker.submit(now, self.run.obs, self.run.instruction, prefix, weights)
        self.last_request = now

    def next_action(self) -> np.ndarray:
        """The action for the current step; waits for the inference (a stall) when none is planned."""
        got = self.worker.poll()
        if got is not None and not self.take(got):
            raise _NothingToDo
        action = self.plan.action(self.run.steps)
        if action is None:                  # a stall: nothing planned for this step yet
            self.stalls += 1
            t_wait = time.perf_counter()
            while action is None:
                if not self.worker.busy:
                    self.request()
                if not self.take(self.worker.poll(wait=True)):
                    raise _NothingToDo
                action = self.plan.action(self.run.steps)
            self.stall_s += time.perf_counter() - t_wait
            self.run.next_tick = time.perf_counter()
        if not self.worker.busy and self.run.steps - self.last_request >= self.min_gap:
            self.request()
        return action

    def steps(self) -> None:
        run = self.run
        try:
            self.request()
            if not self.take(self.worker.poll(wait=True)):     # the first decision: a start-up cost, not a stall
                return
            run.next_tick = time.perf_counter()
            while run.steps < run.max_steps and not run.success:
                action = self.next_action()
                self.sent_at.append(time.perf_counter())
                fresh = self.fresh_ms if self.switches[-1] == run.steps else 0.0
                if run.execute(action, policy_ms=fresh, on_path=False):
                    return
        except _NothingToDo:
            pass

    def timing(self) -> dict:
        timing = self.run.timing()
        timing["policy_s"] = sum(self.latency_ms) / 1e3      # spent in the inference thread, off the control path
        timing["policy_ms"] = latency_summary(self.latency_ms)
        span = self.sent_at[-1] - self.sent_at[0] if len(self.sent_at) > 1 else 0.0
        achieved = (len(self.sent_at) - 1) / span if span > 0 else None
        target = 1.0 / self.run.period
        timing["async"] = {
            "smooth": self.smooth, "target_hz": target, "achieved_hz": achieved,
            "rate_frac": achieved / target if achieved else None,
            "stall_steps": self.stalls, "stall_s": self.stall_s, "chunks": len(self.switches),
            "dropped_chunks": self.dropped, "delay_steps": latency_summary(self.delays), "delays": self.delays,
            "switch_steps": self.switches, "superseded": self.superseded,
        }
        return timing


def run_async(device, policy, *, seed: int | None = None, instruction: str | None = None,
              max_steps: int | None = None, exec_horizon: int | None = None, recorder=None,
              episode_meta: dict | None = None, pace: bool = True, on_step: Callable | None = None,
              smooth: str = "none", hz: float | None = None, labeler=None) -> EpisodeResult:
    """One episode with asynchronous execution, the one entry point to it; the arguments mean what
    they mean for `embodia.agent.loop.episode.run_episode` (a person's take-over, between two
    decisions, is the synchronous loop's alone). `timing["async"]` holds the achieved control rate, the inference delays (in
    control steps), the stall steps, the steps where a new chunk took over and, for each, the action
    the previous plan held for that step (how far the switch departs from the old plan)."""
    device = as_device(device)
    check_async(device, policy, smooth)
    run = EpisodeRun(device, policy, seed=seed, instruction=instruction, max_steps=max_steps,
                     recorder=recorder, episode_meta=episode_meta, pace=pace, on_step=on_step, hz=hz,
                     labeler=labeler)
    old_threads = _limit_torch_threads()
    loop = _AsyncRun(run, smooth, exec_steps(run.policy, device.embodiment, exec_horizon))
    try:
        with run.guarded():
            run.start()
            loop.steps()
    finally:
        if not loop.worker.close():
            run.error = run.error or (f"the inference thread did not finish its decision within "
                                      f"{JOIN_TIMEOUT_S:.0f} s")
        if old_threads is not None:
            sys.modules["torch"].set_num_threads(old_threads)
    return run.finish(loop.timing())
