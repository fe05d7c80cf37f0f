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
...     r = run_episode(dev, policy, seed=0, async_exec=True, smooth="inpaint")
...     r.timing["async"]["rate_frac"], r.timing["async"]["stall_steps"]
(0.99, 0)
"""
from __future__ import annotations

import inspect
import math
import os
import queue
import sys
import threading
import time
from typing import Callable

import numpy as np

from embodia.devices import DeviceLost

from embodia.agent.loop.episode import EpisodeResult, _summary, close_episode, step_timing, wait_tick

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
    if getattr(policy, "ensemble", None) is not None:
        raise ValueError("the policy ensembles its own chunks into single actions; with asynchronous "
                         "execution use smooth='ensemble' instead")
    if smooth == "inpaint":
        predict = getattr(policy, "predict_chunk", None)
        if predict is None or "prefix" not in inspect.signature(predict).parameters:
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


def run_async(device, policy, *, seed: int | None = None, instruction: str | None = None,
              max_steps: int | None = None, exec_horizon: int | None = None, recorder=None,
              episode_meta: dict | None = None, pace: bool = True, on_step: Callable | None = None,
              smooth: str = "none", hz: float | None = None) -> EpisodeResult:
    """One episode with asynchronous execution; the arguments mean what they mean for
    `run_episode`. `timing["async"]` holds the achieved control rate, the inference delays (in
    control steps), the stall steps, the steps where a new chunk took over and, for each, the action
    the previous plan held for that step (how far the switch departs from the old plan)."""
    check_async(device, policy, smooth)
    emb, caps = device.embodiment, device.capabilities
    min_gap = exec_horizon or emb.exec_horizon       # steps between the starts of two decisions
    max_steps = max_steps or getattr(device, "max_steps", None) or 1000
    period = 1.0 / (hz or emb.hz)
    can_verify = "success" in caps
    observe = getattr(policy, "observe", None)

    obs = device.reset(seed)
    policy.reset(seed)
    instruction = instruction or getattr(device, "instruction", "") or ""
    ep = recorder.begin_episode(task=instruction, seed=seed, meta=episode_meta or {}) if recorder else None

    plan = _Plan(ensemble=smooth == "ensemble")
    device_ms, record_ms, step_ms, latency_ms, delays, switches, sent_at = [], [], [], [], [], [], []
    superseded = []      # (step, the action the previous plan held for the step a new chunk took over)
    steps, stalls, stall_s, dropped, success, interrupted, error, unexpected = 0, 0, 0.0, 0, False, False, None, None
    last_request, fresh_ms = 0, 0.0
    old_threads = _limit_torch_threads()
    worker = _Inference(_decider(policy, smooth))
    t_start = time.perf_counter()

    def take(got) -> bool:
        """Switch to an arrived chunk; False when the policy has nothing more to do."""
        nonlocal dropped, fresh_ms
        start, chunk, ms = got
        latency_ms.append(ms)
        if chunk is None or len(chunk) == 0:
            return False
        if start > 0 or steps > 0:
            delays.append(steps - start)
        planned = plan.action(steps)
        if plan.add(start, chunk, steps):
            switches.append(steps)
            fresh_ms = ms
            if planned is not None:
                superseded.append([steps, planned.tolist()])
        else:
            dropped += 1
        return True

    def request() -> None:
        nonlocal last_request
        prefix = weights = None
        if smooth == "inpaint" and plan.chunks and plan.action(steps) is not None:
            prefix = plan.remaining(steps)
            expected = max(delays[-8:]) if delays else math.ceil(latency_ms[-1] / 1e3 / period)
            weights = inpaint_weights(len(prefix), min(len(prefix), max(1, expected)))
        worker.submit(steps, obs, instruction, prefix, weights)
        last_request = steps

    try:
        request()
        if not take(worker.poll(wait=True)):     # the first decision: a start-up cost, not a stall
            raise _NothingToDo
        next_tick = time.perf_counter()
        while steps < max_steps and not success:
            got = worker.poll()
            if got is not None and not take(got):
                break
            action = plan.action(steps)
            if action is None:                  # a stall: nothing planned for this step yet
                stalls += 1
                t_wait = time.perf_counter()
                while action is None:
                    if not worker.busy:
                        request()
                    if not take(worker.poll(wait=True)):
                        raise _NothingToDo
                    action = plan.action(steps)
                stall_s += time.perf_counter() - t_wait
                next_tick = time.perf_counter()
            if not worker.busy and steps - last_request >= min_gap:
                request()
            ts = time.perf_counter()
            executed = device.act(action)
            next_obs = device.observe()
            td = time.perf_counter()
            sent_at.append(ts)
            if observe is not None:
                observe(obs, executed)
            if ep is not None:
                ep.add_step(obs, executed, {"policy_ms": fresh_ms if switches[-1] == steps else 0.0,
                                            "device_ms": (td - ts) * 1e3})
            tr = time.perf_counter()
            stop = on_step(steps, obs, executed, next_obs) if on_step else False
            obs = next_obs
            steps += 1
            device_ms.append((td - ts) * 1e3)
            record_ms.append((tr - td) * 1e3)
            step_end = time.perf_counter()
            step_ms.append((step_end - ts) * 1e3)
            if can_verify and device.success():
                success = True
            if stop or success:
                break
            if pace:
                next_tick = wait_tick(next_tick, period, step_end)
    except _NothingToDo:
        pass
    except KeyboardInterrupt:
        interrupted = True
    except (DeviceLost, FloatingPointError, ValueError) as e:    # lost or diverged device, bad action
        error = f"{type(e).__name__}: {e}"
    except Exception as e:      # a bug: save what ran, then let it surface
        error = f"{type(e).__name__}: {e}"
        unexpected = e
    finally:
        if not worker.close():
            error = error or f"the inference thread did not finish its decision within {JOIN_TIMEOUT_S:.0f} s"
        if old_threads is not None:
            sys.modules["torch"].set_num_threads(old_threads)

    timing = step_timing(time.perf_counter() - t_start, [], device_ms, record_ms, step_ms)
    timing["policy_s"] = sum(latency_ms) / 1e3      # spent in the inference thread, off the control path
    timing["policy_ms"] = _summary(latency_ms)
    span = sent_at[-1] - sent_at[0] if len(sent_at) > 1 else 0.0
    achieved = (len(sent_at) - 1) / span if span > 0 else None
    target = 1.0 / period
    timing["async"] = {
        "smooth": smooth, "target_hz": target, "achieved_hz": achieved,
        "rate_frac": achieved / target if achieved else None,
        "stall_steps": stalls, "stall_s": stall_s, "chunks": len(switches), "dropped_chunks": dropped,
        "delay_steps": _summary(delays), "delays": delays, "switch_steps": switches,
        "superseded": superseded,
    }
    result = close_episode(device, policy, seed=seed, instruction=instruction, steps=steps, success=success,
                           interrupted=interrupted, error=error, timing=timing, obs=obs, recorder=recorder, ep=ep)
    if unexpected is not None:
        raise unexpected
    return result
