"""What every way of running an episode shares: setup, one executed step, the error policy, shutdown.

One step, and who hears of it::

      policy.act(obs, instruction) -> chunk or GuiAction      (run_episode: in the loop;
             |                                                  run_async: in its own thread)
             v  one action of it (a GuiAction passes the safety gate first)
      device.step(action) -> (executed, next_obs)              (default: act, then observe)
             |
             v  Transition(t, obs, action=executed, next_obs, timing, extra)
      policy.after_step(obs, executed)    the recorder's ep.step(obs, executed, timing, extra)
      on_step(transition) -> stop?        then success(), done(), pacing; obs = next_obs

The synchronous loop (``episode.run_episode``) and the asynchronous one (``asynchronous.run_async``,
the one entry point to it) differ only in how they get the next action; both drive an ``EpisodeRun``:

>>> run = EpisodeRun(device, policy, seed=0)                                   # doctest: +SKIP
>>> with run.guarded():                                                        # doctest: +SKIP
...     run.start()                       # the reset, inside the guard: a device lost there ends the episode
...     while run.steps < run.max_steps and not run.execute(next_action()):
...         pass
>>> result = run.finish(run.timing())                                           # doctest: +SKIP
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from embodia.agent.loop.safety import RiskRefused
from embodia.devices import DeviceLost, Observation, as_device
from embodia.policies.base import as_policy, reads_step_images

DEFAULT_MAX_STEPS = 1000


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


@dataclass
class Transition:
    """One executed step, as every listener hears of it: the policy (``after_step``), the recorder
    (``ep.step``) and the caller's ``on_step``."""

    t: int                      # the step's index in the episode
    obs: Observation            # what the step started from
    action: Any                 # what the device executed (clipped, element resolved; a person's)
    next_obs: Observation       # what the step ended in
    timing: dict                # {"policy_ms": the decision's time, "device_ms": the device's}
    extra: dict | None = None   # the step's notes: "intervention" (a person's), the safety decision, ...


def latency_summary(ms: list[float]) -> dict:
    """n, mean, p50, p95 and max of a list of milliseconds ({"n": 0} when empty)."""
    if not ms:
        return {"n": 0}
    a = np.asarray(ms)
    return {"n": len(a), "mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p95": float(np.percentile(a, 95)), "max": float(a.max())}


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
            "policy_ms": latency_summary([m for m in policy_ms if m > 0]), "device_ms": latency_summary(device_ms),
            "step_ms": latency_summary(step_ms)}


def episode_limit(device, max_steps: int | None = None) -> int:
    """How many steps an episode may take: the caller's ``max_steps``, else the task's own limit
    (``device.max_steps``), else `DEFAULT_MAX_STEPS`."""
    return max_steps or device.max_steps or DEFAULT_MAX_STEPS


class EpisodeRun:
    """One episode in progress: ``start`` resets the device and the policy and begins the
    recorder's episode; ``execute`` runs one action; ``guarded`` turns the ways an episode can end
    early (the reset included) into its outcome; ``finish`` closes it."""

    def __init__(self, device, policy, *, seed: int | None = None, instruction: str | None = None,
                 max_steps: int | None = None, recorder=None, episode_meta: dict | None = None,
                 pace: bool = False, on_step: Callable | None = None, hz: float | None = None,
                 labeler: Callable | None = None, obs: Observation | None = None):
        """``labeler(device, first_obs, final_obs, instruction, seed)`` labels the episode at its end
        (`embodia.agent.loop.success`): its label replaces the device's own check; only a verified
        one reaches the policy's ``end_episode``; an unverified one goes to ``hold_episode``. Steps a
        person takes (`embodia.agent.loop.takeover`) come through ``record_person`` or
        ``execute(..., person=True)``. ``obs``: the device's current observation; the episode goes
        on from there without a reset, and its recording begins with its first step (a client driving
        the device by hand, `embodia.agent.serving.mcp`, may leave without taking one)."""
        device = as_device(device)
        self.device, self.policy, self.recorder = device, as_policy(policy), recorder
        self.labeler = labeler
        emb = device.embodiment
        self.gui = emb.is_gui
        self.can_verify = "success" in device.capabilities
        self.max_steps = episode_limit(device, max_steps)
        self.period = 1.0 / (hz or emb.hz)
        self.pace, self.on_step, self.seed = pace, on_step, seed
        self.asked_instruction, self.instruction = instruction, instruction or ""
        self.episode_meta = episode_meta or {}
        self.ep = None
        self.obs = self.first_obs = obs
        self.started = False           # the device reset (or taken as it is), the policy told the task
        if obs is not None:
            self._begin(record=False)
        self.steps, self.success, self.interrupted = 0, False, False
        self.person_steps = 0          # steps a person took (take over and hand back)
        self.error: str | None = None
        self.unexpected: BaseException | None = None
        self.policy_ms: list[float] = []
        self.device_ms: list[float] = []
        self.record_ms: list[float] = []
        self.step_ms: list[float] = []
        # between two decisions a "frames_on_demand" device renders no camera nobody reads
        self.lean = ("frames_on_demand" in device.capabilities and recorder is None and on_step is None
                     and labeler is None and not reads_step_images(self.policy))
        self.t_start = self.next_tick = time.perf_counter()

    def start(self) -> None:
        """Reset the device and begin the episode; call it inside ``guarded``, where a device lost
        while it resets ends the episode as a loss mid-episode does (its record saved)."""
        if not self.started:
            self.obs = self.first_obs = self.device.reset(self.seed)
            self._begin(record=True)
            self.t_start = self.next_tick = time.perf_counter()

    def _begin(self, record: bool) -> None:
        self.policy.reset(self.seed)
        self.instruction = self.asked_instruction or self.device.instruction or ""
        if record:
            self._recording()
        self.policy.instruct(self.instruction)
        self.started = True

    def _recording(self):
        """The recorder's episode, begun on first use (None without a recorder)."""
        if self.ep is None and self.recorder is not None:
            self.ep = self.recorder.begin_episode(task=self.instruction, seed=self.seed, meta=self.episode_meta)
        return self.ep

    def execute(self, action, *, policy_ms: float = 0.0, on_path: bool = True, extra: dict | None = None,
                busy_since: float | None = None, person: bool = False, decides_next: bool = True) -> bool:
        """Act, observe, tell the policy, record, pace; True when the episode should stop (success,
        ``on_step`` said so, or a GUI agent terminated). ``policy_ms`` is the decision's time (recorded
        with the step; counted in the loop's own time only when ``on_path``); ``busy_since`` is when
        this step's work began (the decision, for the first action of a chunk). ``person``: the
        action comes from a person (or their scripted stand-in), and is recorded as an intervention.
        ``decides_next=False``: no decision reads the observation this step ends in (the chunk goes
        on), so where nothing else reads frames (`lean`) the device leaves its cameras unrendered."""
        ts = time.perf_counter()
        executed, next_obs = self.device.step(action, images=not (self.lean and not decides_next))
        return self._stepped(executed, next_obs, ts, policy_ms=policy_ms, on_path=on_path, extra=extra,
                             busy_since=busy_since, person=person)

    def record_person(self, action, *, extra: dict | None = None, tell_policy: bool = True) -> bool:
        """A step a person already took on the device (their recorded input): observe its effect,
        tell the policy (a success memory stores what it sees executed; not when the action is
        unknown), record it as an intervention. True when the episode should stop."""
        ts = time.perf_counter()
        next_obs = self.device.observe()
        return self._stepped(action, next_obs, ts, extra=extra, person=True, pace=False, tell_policy=tell_policy)

    def _stepped(self, executed, next_obs, ts: float, *, policy_ms: float = 0.0, on_path: bool = True,
                 extra: dict | None = None, busy_since: float | None = None, person: bool = False,
                 pace: bool = True, tell_policy: bool = True) -> bool:
        td = time.perf_counter()
        step = Transition(self.steps, self.obs, executed, next_obs, {"policy_ms": policy_ms, "device_ms": (td - ts) * 1e3},
                          {**(extra or {}), "intervention": True} if person else extra)
        if tell_policy:
            self.policy.after_step(step.obs, step.action)
        if person:
            self.person_steps += 1
        if self._recording() is not None:
            self.ep.step(step.obs, step.action, step.timing, step.extra)
        tr = time.perf_counter()
        stop = bool(self.on_step(step)) if self.on_step else False
        self.obs = next_obs
        self.steps += 1
        self.policy_ms.append(policy_ms if on_path else 0.0)
        self.device_ms.append((td - ts) * 1e3)
        self.record_ms.append((tr - td) * 1e3)
        step_end = time.perf_counter()
        self.step_ms.append((step_end - (busy_since or ts)) * 1e3)
        if self.can_verify and self.device.success():
            self.success = True
        if self.gui and self.device.done():
            stop = True         # the agent (or the person) terminated the episode (a robot's done() is its
                                # success, which stops above only where the loop may see it: not NoOracle's)
        if stop or self.success:
            return True
        if self.pace and pace:
            self.next_tick = wait_tick(self.next_tick, self.period, step_end)
        return False

    def record_refused(self, action, policy_ms: float, extra: dict) -> None:
        """A gated action that was not executed: recorded as such (the loop's episode then ends)."""
        if self._recording() is not None:
            self.ep.step(self.obs, action, {"policy_ms": policy_ms}, {**extra, "executed": False})

    @contextmanager
    def guarded(self):
        """Ctrl-C ends the episode as interrupted; a lost device, a diverged simulation or a refused
        action end it with an error; anything else (a bug) is recorded, and ``finish`` re-raises it
        after the episode is saved."""
        try:
            yield
        except KeyboardInterrupt:
            self.interrupted = True
        except (DeviceLost, FloatingPointError, ValueError, RiskRefused) as e:
            self.error = f"{type(e).__name__}: {e}"
            if not self.started and not isinstance(e, DeviceLost):
                self.unexpected = e     # a reset refused for another reason (a bad setting) still surfaces
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            self.unexpected = e

    def timing(self) -> dict:
        return step_timing(time.perf_counter() - self.t_start, self.policy_ms, self.device_ms, self.record_ms,
                           self.step_ms)

    def finish(self, timing: dict) -> EpisodeResult:
        """The verified outcome, the device's and the policy's facts, the policy's end-of-episode
        hook and the recorder's end of the episode; then a bug seen during the episode surfaces."""
        result = self._outcome(timing)
        if not self.started:
            self._recording()           # lost at the reset: the record says so, as for a loss mid-episode
        if self.ep is not None:
            result.episode_index = self._save(result)
        if self.unexpected is not None:
            raise self.unexpected
        return result

    def _outcome(self, timing: dict) -> EpisodeResult:
        ok = self.error is None and self.started
        if self.can_verify and ok:
            self.success = bool(self.device.success())
        info = dict(self.device.info()) if ok else {}
        pinfo = self.policy.info() if self.started else {}
        if pinfo:
            info["policy"] = dict(pinfo)
        if self.person_steps:
            info["person_steps"] = self.person_steps
        success = self.success if self.can_verify else None
        if self.labeler is not None and ok and not self.interrupted:
            label = self.labeler(self.device, self.first_obs, self.obs, self.instruction, self.seed)
            info["success_label"] = label.to_dict()
            success = bool(label.success) if label.verified else None   # unverified: never steers, not counted
            if label.verified:
                self.policy.end_episode(success)
            else:       # kept aside for a person (`embodia memory review`), never steering until confirmed
                self.policy.hold_episode(info["success_label"], self.obs)
        elif self.can_verify and ok and not self.interrupted:
            self.policy.end_episode(bool(self.success))   # a success memory stores it or credits a failure
        return EpisodeResult(seed=self.seed, instruction=self.instruction,
                             success=success, steps=self.steps, info=info,
                             timing=timing, interrupted=self.interrupted, error=self.error)

    def _save(self, result: EpisodeResult) -> int | None:
        """The recorder's end of the episode, the same call for a dataset and a GUI step log: each
        keeps what its format holds of the last observation (a dataset its state; a step log its
        screen, unless ``info`` names an error) and of ``success`` (a dataset stores a bool, so an
        episode nobody could verify is stored as a failure; a step log keeps the None)."""
        end_info = {**result.info, "interrupted": self.interrupted, "error": self.error, "steps": self.steps}
        if self.error is not None:
            said = self.policy.step_record()
            if said is not None:
                end_info["last_policy_record"] = said    # e.g. the replies that never parsed
        return self.recorder.end_episode(self.ep, success=result.success, info=end_info, final_obs=self.obs)


def stop_as_ctrl_c(signum, frame):
    """SIGTERM's handler: Ctrl-C's interrupt here and in the worker processes of ``--jobs`` (a
    terminal's Ctrl-C reaches the whole process group, a ``kill`` only this process), so each worker
    ends its episode and closes its devices, and the pool's shutdown has nothing long to wait for."""
    import multiprocessing
    import os
    import signal
    for child in multiprocessing.active_children():
        try:
            os.kill(child.pid, signal.SIGINT)
        except (ProcessLookupError, TypeError):      # gone meanwhile, or not started (no pid yet)
            pass
    raise KeyboardInterrupt(f"stopped by signal {signum}")
