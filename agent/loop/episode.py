"""The control loop: observe -> policy -> execute H_exec actions of the chunk -> replan.

One loop serves every device and policy. It paces steps to the control rate on real devices
("realtime" capability) and runs as fast as possible in simulation; it times the policy, the
device and its own overhead; Ctrl-C or a lost device ends the episode cleanly and saves it.

>>> from embodia.devices import open_device                                     # doctest: +SKIP
>>> with open_device("sim:twogap-push") as dev:                          # doctest: +SKIP
...     result = run_episode(dev, dev.expert(), seed=0)
...     result.success
True
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from embodia.devices import DeviceLost, GuiAction, policy_info

from embodia.agent.loop.safety import RiskRefused, default_gate


@dataclass
class EpisodeResult:
    seed: int | None
    instruction: str
    success: bool | None       # None: the device cannot verify success
    steps: int
    info: dict = field(default_factory=dict)       # device-measured facts + policy's own (under "policy")
    timing: dict = field(default_factory=dict)
    interrupted: bool = False  # Ctrl-C
    error: str | None = None   # device lost, simulation diverged, refused action...
    episode_index: int | None = None   # where the recorder stored it

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def _summary(ms: list[float]) -> dict:
    if not ms:
        return {"n": 0}
    a = np.asarray(ms)
    return {"n": len(a), "mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p95": float(np.percentile(a, 95)), "max": float(a.max())}


def run_episode(device, policy, *, seed: int | None = None, instruction: str | None = None,
                max_steps: int | None = None, exec_horizon: int | None = None, recorder=None,
                episode_meta: dict | None = None, pace: bool | None = None,
                on_step: Callable | None = None, gate=None, async_exec: bool = False,
                smooth: str = "none", hz: float | None = None) -> EpisodeResult:
    """Run one episode; record it if `recorder` (a DatasetWriter, or a GuiRecorder for GUI
    devices) is given.

    `async_exec` computes the next chunk while the current one executes (paced by default; see
    `embodia.agent.loop.asynchronous`, and `smooth` there for the chunk boundaries). `hz` overrides the
    embodiment's control rate for pacing (benchmarks).

    `on_step(t, obs, action, next_obs)` is called after every executed step; returning True stops
    the episode (replay uses it to stop on divergence). A policy returning None (or an empty chunk)
    has nothing more to do. GUI actions pass `gate` (a SafetyGate; by default one whose answer is
    always No, except on a "sandbox" device such as gui-sim): a refused action is recorded, not
    executed, and ends the episode. A `terminate` action ends it too.
    """
    if async_exec:
        from embodia.agent.loop.asynchronous import run_async
        return run_async(device, policy, seed=seed, instruction=instruction, max_steps=max_steps,
                         exec_horizon=exec_horizon, recorder=recorder, episode_meta=episode_meta,
                         pace=True if pace is None else pace, on_step=on_step, smooth=smooth, hz=hz)
    if smooth != "none":
        raise ValueError(f"smooth={smooth!r} applies to asynchronous execution (async_exec=True)")
    emb = device.embodiment
    caps = device.capabilities
    h_exec = exec_horizon or emb.exec_horizon
    max_steps = max_steps or getattr(device, "max_steps", None) or 1000
    pace = ("realtime" in caps) if pace is None else pace
    period = 1.0 / (hz or emb.hz)

    obs = device.reset(seed)
    policy.reset(seed)
    instruction = instruction or getattr(device, "instruction", "") or ""
    ep = recorder.begin_episode(task=instruction, seed=seed, meta=episode_meta or {}) if recorder else None

    policy_ms, device_ms, record_ms, step_ms = [], [], [], []
    steps, success, interrupted, error, unexpected = 0, False, False, None, None
    can_verify = "success" in caps
    observe = getattr(policy, "observe", None)      # policies that learn from what was executed
    gui = emb.is_gui
    step_record = getattr(policy, "step_record", None)   # what a model said at this decision (GUI records)
    if gui and gate is None:
        gate = default_gate(device)
    t_start = time.perf_counter()
    next_tick = t_start
    try:
        while steps < max_steps and not success:
            t0 = time.perf_counter()
            chunk = policy.act(obs, instruction)
            t_policy = (time.perf_counter() - t0) * 1e3
            if chunk is None:           # the policy has nothing more to do
                break
            stop = False
            rows = [chunk] if isinstance(chunk, GuiAction) else np.asarray(chunk, dtype=np.float32)
            if not isinstance(chunk, GuiAction) and rows.ndim == 1:
                rows = rows[None]
            if len(rows) == 0:          # the policy has nothing more to do (replay ran out)
                break
            said = step_record() if (gui and step_record is not None) else None
            for k, action in enumerate(rows[:min(h_exec, max_steps - steps)]):
                extra = {"policy_record": said} if said and k == 0 else None
                if gate is not None and isinstance(action, GuiAction):
                    decision = gate.check(action, tree=obs.ui_tree, screen=obs.screen)
                    if decision["risk"] is not None:
                        extra = {**(extra or {}), "safety": decision}
                    if not decision["allowed"]:
                        if ep is not None:
                            ep.add_step(obs, action, {"policy_ms": t_policy}, {**extra, "executed": False})
                        raise RiskRefused(decision)
                ts = time.perf_counter()
                executed = device.act(action)
                next_obs = device.observe()
                td = time.perf_counter()
                if observe is not None:
                    observe(obs, executed)
                if ep is not None:
                    timing = {"policy_ms": t_policy if k == 0 else 0.0, "device_ms": (td - ts) * 1e3}
                    if gui:
                        ep.add_step(obs, executed, timing, extra)
                    else:
                        ep.add_step(obs, executed, timing)
                tr = time.perf_counter()
                stop = on_step(steps, obs, executed, next_obs) if on_step else False
                obs = next_obs
                steps += 1
                policy_ms.append(t_policy if k == 0 else 0.0)
                device_ms.append((td - ts) * 1e3)
                record_ms.append((tr - td) * 1e3)
                step_end = time.perf_counter()
                step_ms.append((step_end - (t0 if k == 0 else ts)) * 1e3)
                if can_verify and device.success():
                    success = True
                if gui and getattr(device, "done", False):
                    stop = True         # the agent terminated the episode
                if stop or success:
                    break
                if pace:
                    next_tick = wait_tick(next_tick, period, step_end)
            if stop:
                break
    except KeyboardInterrupt:
        interrupted = True
    except (DeviceLost, FloatingPointError, ValueError, RiskRefused) as e:   # refused action, lost or diverged device
        error = f"{type(e).__name__}: {e}"
    except Exception as e:      # a bug: save what ran, then let it surface
        error = f"{type(e).__name__}: {e}"
        unexpected = e

    timing = step_timing(time.perf_counter() - t_start, policy_ms, device_ms, record_ms, step_ms)
    result = close_episode(device, policy, seed=seed, instruction=instruction, steps=steps, success=success,
                           interrupted=interrupted, error=error, timing=timing, obs=obs, recorder=recorder,
                           ep=ep, step_record=step_record)
    if unexpected is not None:
        raise unexpected
    return result


def wait_tick(next_tick: float, period: float, step_end: float) -> float:
    """Sleep until the next control tick and return it; a step that ran late by more than a period
    resets the schedule instead of making the following steps hurry to catch up."""
    next_tick = max(next_tick + period, step_end - period)
    time.sleep(max(0.0, next_tick - time.perf_counter()))
    return next_tick


def step_timing(total_s: float, policy_ms, device_ms, record_ms, step_ms) -> dict:
    """The episode's timing from per-step milliseconds (step_ms: a step's busy time, no pacing)."""
    pol_s, dev_s, rec_s = sum(policy_ms) / 1e3, sum(device_ms) / 1e3, sum(record_ms) / 1e3
    busy = sum(step_ms) / 1e3
    return {"total_s": total_s, "policy_s": pol_s, "device_s": dev_s, "record_s": rec_s,
            "overhead_s": max(0.0, busy - pol_s - dev_s),
            "overhead_frac": max(0.0, busy - pol_s - dev_s) / busy if busy else 0.0,
            "policy_ms": _summary([m for m in policy_ms if m > 0]), "device_ms": _summary(device_ms),
            "step_ms": _summary(step_ms)}


def close_episode(device, policy, *, seed, instruction, steps, success, interrupted, error, timing, obs,
                  recorder, ep, step_record=None) -> EpisodeResult:
    """The verified outcome, the device's and the policy's facts, the policy's end-of-episode hook,
    and the recorder's end of the episode: what every way of running an episode ends with."""
    can_verify = "success" in device.capabilities
    gui = device.embodiment.is_gui
    if can_verify and error is None:
        success = bool(device.success())
    info = dict(getattr(device, "info", dict)()) if error is None else {}
    pinfo = policy_info(policy)
    if pinfo:
        info["policy"] = pinfo
    end = getattr(policy, "end_episode", None)
    if end is not None and can_verify and error is None and not interrupted:
        end(bool(success))      # the verified outcome: a success memory stores it or credits a failure
    result = EpisodeResult(seed=seed, instruction=instruction, success=success if can_verify else None,
                           steps=steps, info=info, timing=timing, interrupted=interrupted, error=error)
    if ep is not None:
        final_state = np.asarray(obs.state, dtype=np.float32) if obs is not None else None
        end_info = {**info, "interrupted": interrupted, "error": error, "steps": steps}
        if gui and error is not None and step_record is not None:
            end_info["last_policy_record"] = step_record()    # e.g. the replies that never parsed
        if gui:
            final_obs = obs if error is None else None     # a lost device has no final screen
            result.episode_index = recorder.end_episode(ep, success=result.success, info=end_info,
                                                        final_obs=final_obs)
        else:
            result.episode_index = recorder.end_episode(
                ep, success=bool(result.success), final_state=final_state, info=end_info)
    return result
