"""The synchronous control loop: observe -> policy -> execute H_exec actions of the chunk -> replan.

One loop serves every device and policy. It paces steps to the control rate on real devices
("realtime" capability) and runs as fast as possible in simulation; it times the policy, the
device and its own overhead; Ctrl-C or a lost device ends the episode cleanly and saves it.
Setup, the executed step and shutdown are shared with the asynchronous loop (``core``).

>>> from embodia.devices import open_device                               # doctest: +SKIP
>>> with open_device("sim:twogap-push") as dev:                          # doctest: +SKIP
...     result = run_episode(dev, dev.expert(), seed=0)
...     result.success
True
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from embodia.agent.loop.core import EpisodeResult, EpisodeRun
from embodia.agent.loop.safety import RiskRefused, default_gate
from embodia.devices import GuiAction, as_device
from embodia.policies.base import exec_steps

__all__ = ["EpisodeResult", "run_episode"]


def run_episode(device, policy, *, seed: int | None = None, instruction: str | None = None,
                max_steps: int | None = None, exec_horizon: int | None = None, recorder=None,
                episode_meta: dict | None = None, pace: bool | None = None,
                on_step: Callable | None = None, gate=None, hz: float | None = None, labeler=None,
                takeover=None) -> EpisodeResult:
    """Run one episode; record it if `recorder` (a DatasetWriter, or a GuiRecorder for GUI
    devices) is given. (To compute the next chunk while the current one executes, run the same
    episode with `embodia.agent.loop.asynchronous.run_async`.) `hz` overrides the embodiment's
    control rate for pacing (benchmarks).

    `on_step(transition)` (a `embodia.agent.loop.core.Transition`) is called after every executed
    step; returning True stops the episode (replay uses it to stop on divergence). A policy returning None (or an empty chunk)
    has nothing more to do. GUI actions pass `gate` (a SafetyGate; by default one whose answer is
    always No, except on a "sandbox" device such as gui-sim): a refused action is recorded, not
    executed, and ends the episode. A `terminate` action ends it too. `labeler` labels the episode's
    success at its end (`embodia.agent.loop.success`; None: the device's own check). `takeover` (a
    `embodia.agent.loop.takeover.Takeover`) lets a person take the device between two decisions,
    act, and hand it back (synchronous loop only).
    """
    device = as_device(device)       # any object that acts, seen through the declared members
    run = EpisodeRun(device, policy, seed=seed, instruction=instruction, max_steps=max_steps,
                     recorder=recorder, episode_meta=episode_meta, on_step=on_step, hz=hz, labeler=labeler,
                     pace=("realtime" in device.capabilities) if pace is None else pace)
    if run.gui and gate is None:
        gate = default_gate(run.device)
    with run.guarded():
        run.start()
        if takeover is not None:
            takeover.attach()
        try:
            _steps(run, exec_steps(run.policy, device.embodiment, exec_horizon), gate, takeover)
        finally:
            if takeover is not None:
                takeover.detach()
    return run.finish(run.timing())


def _steps(run: EpisodeRun, h_exec: int, gate, takeover=None) -> None:
    """Decide, execute up to `h_exec` actions of the chunk, repeat until the episode is over; a
    person's turn, when one is asked for, comes between two decisions."""
    while run.steps < run.max_steps and not run.success:
        if takeover is not None and takeover.between_steps(run):
            return
        t0 = time.perf_counter()
        chunk = run.policy.act(run.obs, run.instruction)
        t_policy = (time.perf_counter() - t0) * 1e3
        rows = _actions(chunk)
        if not len(rows):           # the policy has nothing more to do (None, or replay ran out)
            return
        said = run.policy.step_record() if run.gui else None
        rows = rows[:min(h_exec, run.max_steps - run.steps)]
        for k, action in enumerate(rows):
            extra = {"policy_record": said} if said and k == 0 else None
            if gate is not None and isinstance(action, GuiAction):
                extra = pass_gate(run, gate, action, extra, t_policy)
            if run.execute(action, policy_ms=t_policy if k == 0 else 0.0, extra=extra,
                           busy_since=t0 if k == 0 else None,
                           decides_next=k == len(rows) - 1 and run.steps + 1 < run.max_steps):
                return


def _actions(chunk) -> list | np.ndarray:
    """A decision as a sequence of actions: [GuiAction], float32[n, D], or empty for None."""
    if chunk is None:
        return []
    if isinstance(chunk, GuiAction):
        return [chunk]
    rows = np.asarray(chunk, dtype=np.float32)
    return rows[None] if rows.ndim == 1 else rows


def pass_gate(run: EpisodeRun, gate, action: GuiAction, extra: dict | None, t_policy: float) -> dict | None:
    """The safety gate's decision goes into the step's record; a refused action is recorded as not
    executed and ends the episode (RiskRefused)."""
    decision = gate.check(action, tree=run.obs.ui_tree, screen=run.obs.screen)
    if decision["risk"] is not None:
        extra = {**(extra or {}), "safety": decision}
    if not decision["allowed"]:
        run.record_refused(action, t_policy, extra)
        raise RiskRefused(decision)
    return extra
