"""The Policy base class: every hook the runtime calls on a brain; then the small policies that
need no model (random actions, replay of recorded actions). The body's side is
`embodia.devices.base.Device`."""
from __future__ import annotations

import numpy as np

from embodia.devices.embodiment import Embodiment
from embodia.devices.observation import Observation


class Policy:
    """What the runtime needs from a brain; subclass it and implement ``act``.

    Every other hook has a default that does nothing, and the runtime (the loop, the server, the
    fleet) calls exactly these, never anything else:

    - ``reset(seed)``: a new episode starts (seed its sampler, clear its history).
    - ``instruct(instruction)``: the episode's instruction, told once after ``reset`` (a policy that
      learns from steps it did not decide, such as a person's after a take-over, needs it early).
    - ``act(obs, instruction)``: a float32[H, D] chunk in the body's units, a ``GuiAction``, or None
      (an empty chunk too) when it has nothing more to do.
    - ``after_step(obs, executed)``: after every executed step, the observation the step started
      from and what the device actually did (not necessarily what ``act`` returned: clipped, a
      person's step, a resolved element reference).
    - ``step_record()``: what the model said at the latest decision (GUI step logs keep it).
    - ``end_episode(success)``: the verified outcome (a success memory stores it or credits a failure).
    - ``hold_episode(label, final_obs)``: the episode ended with an outcome nobody verified (``label``:
      its success label as a dict); a success memory keeps it aside for a person to review, unused.
    - ``info()``: facts about the episode for reports (e.g. the expert's chosen mode).
    - ``close()``: release what it holds (a connection, a process).
    - ``predict_chunk(obs, instruction, prefix=, prefix_weights=)``: continue an unexecuted plan
      (only with ``accepts_prefix``).
    - ``propose(obs, instruction, n)``: up to ``n`` candidate GuiActions for one decision (only with
      ``proposes``; a screen memory re-ranks them).
    - ``prompt_tokens(instruction)``: the prompt's length in its own tokenizer's tokens (None: it
      has none), what a policy server bounds a client's prompt by.
    - ``steer_chunk(obs, instruction, prior, tau0)`` and ``body_norms()`` (only with ``steerable``):
      a chunk whose flow starts at ``tau0`` from ``(1 - tau0) * noise + tau0 * prior`` (``prior``:
      float[H, D] normalized by ``body_norms()["action"]``), and the state and action normalizers the
      success memory keys and stores by (`embodia.policies.robot.steered`).
    - ``bind(embodiment)`` (only with ``rebinds``): switch the loaded model to another body it was
      trained on, so that a suite of tasks loads it once.
    - ``teacher_force(obs, executed)``: offline evaluation scored a decision and the recorded action
      takes its place in the policy's history (default: ``after_step``).
    - ``show_exemplars(exemplars)`` (only with ``takes_exemplars``): verified successes a screen memory
      retrieved for the next decision, each a list of steps (``ScreenMemory.exemplars``), for the
      policy to read as examples (a chat model gets them in its prompt).

    Capabilities and facts the runtime asks about: ``ensemble`` (not None: the policy blends its own
    chunks into single actions, which asynchronous execution must not do again), ``accepts_prefix``,
    ``steerable`` (a flow policy the success memory can steer: ``steer_chunk``, ``body_norms``, ``steps``),
    ``steer_local`` (its sampler runs in this process, which the memory's select and noise-recall
    ablations reach into: ``predict_candidates``, ``generator``),
    ``proposes``, ``takes_exemplars``, ``rebinds``, ``placement`` (where its model runs in this process, a
    `embodia.policies.placement.Placement`; None: it holds no model here), ``loop_threads`` (a
    bundled-size model that runs at the runtime's torch threads, `policy_threads`),
    ``horizon`` (the length of the chunks it returns; None: the embodiment's chunk),
    ``exec_horizon`` (how many actions of each chunk run before it decides again; None: the
    embodiment's ``exec_horizon``, see `exec_steps`),
    ``embodiment`` (the body it was built for; None: not bound to one), ``memory`` (the success or
    screen memory it steers with, which the runtime saves and reports; None: none) and
    ``step_images`` (whether ``after_step`` reads ``obs.images``; None: assumed of a policy with an
    ``after_step`` of its own. Where nothing reads them, a "frames_on_demand" device renders only
    the frames a decision reads: `reads_step_images`).

    >>> import numpy as np
    >>> class Still(Policy):
    ...     def act(self, obs, instruction):
    ...         return np.zeros((1, 2), np.float32)
    >>> p = Still(); p.reset(0); p.info(), p.step_record()
    ({}, None)
    """

    ensemble: float | None = None
    accepts_prefix: bool = False
    steerable: bool = False
    steer_local: bool = False
    proposes: bool = False
    takes_exemplars: bool = False
    rebinds: bool = False
    placement = None
    loop_threads: bool = False
    horizon: int | None = None
    exec_horizon: int | None = None
    embodiment: Embodiment | None = None
    memory = None
    step_images: bool | None = None

    def reset(self, seed: int | None = None) -> None:
        pass

    def instruct(self, instruction: str) -> None:
        pass

    def act(self, obs: Observation, instruction: str):
        raise NotImplementedError(f"{type(self).__name__}.act")

    def after_step(self, obs: Observation, executed) -> None:
        pass

    def step_record(self) -> dict | None:
        return None

    def end_episode(self, success: bool) -> None:
        pass

    def hold_episode(self, label: dict, final_obs: Observation | None) -> None:
        pass

    def info(self) -> dict:
        return {}

    def close(self) -> None:
        pass

    def predict_chunk(self, obs: Observation, instruction: str, *, prefix=None, prefix_weights=None):
        raise NotImplementedError(f"{type(self).__name__} does not continue a prefix (accepts_prefix is False)")

    def steer_chunk(self, obs: Observation, instruction: str, prior, tau0: float) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} cannot be steered (steerable is False)")

    def body_norms(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} cannot be steered (steerable is False)")

    def propose(self, obs: Observation, instruction: str, n: int | None = None) -> list:
        raise NotImplementedError(f"{type(self).__name__} proposes no candidates (proposes is False)")

    def prompt_tokens(self, instruction: str) -> int | None:
        return None

    def bind(self, embodiment: Embodiment) -> "Policy":
        raise NotImplementedError(f"{type(self).__name__} is not rebound to another body (rebinds is False)")

    def teacher_force(self, obs: Observation, executed) -> None:
        self.after_step(obs, executed)

    def show_exemplars(self, exemplars: list) -> None:
        raise NotImplementedError(f"{type(self).__name__} reads no exemplars (takes_exemplars is False)")


class _Adapted(Policy):
    """A duck-typed policy (any object with ``act``, and ``reset``) seen through the declared hooks:
    the hooks it defines are used, the others keep the defaults."""

    _HOOKS = ("reset", "instruct", "after_step", "step_record", "end_episode", "hold_episode", "info", "close",
              "predict_chunk", "propose", "prompt_tokens", "steer_chunk", "body_norms", "bind", "teacher_force",
              "show_exemplars")

    def __init__(self, inner):
        if callable(getattr(inner, "observe", None)) and not callable(getattr(inner, "after_step", None)):
            # the hook's old name: silently never calling it would starve the policy of what ran
            raise TypeError(f"{type(inner).__name__}.observe(obs, executed) is now after_step(obs, executed)")
        self.inner = inner
        for name in self._HOOKS:
            fn = getattr(inner, name, None)
            if callable(fn):
                setattr(self, name, fn)
        self.act = inner.act
        self.ensemble = getattr(inner, "ensemble", None)
        self.accepts_prefix = bool(getattr(inner, "accepts_prefix", False))
        self.horizon = getattr(inner, "horizon", None)
        self.exec_horizon = getattr(inner, "exec_horizon", None)
        self.proposes = callable(getattr(inner, "propose", None))
        self.takes_exemplars = callable(getattr(inner, "show_exemplars", None))
        self.embodiment = getattr(inner, "embodiment", None)
        self.memory = getattr(inner, "memory", None)
        self.step_images = getattr(inner, "step_images", None)

    def __getattr__(self, name: str):      # what else the object offers (e.g. a chat policy's propose)
        return getattr(self.inner, name)


def as_policy(obj) -> Policy:
    """``obj`` itself when it is a ``Policy``; otherwise an adapter over its ``act`` and whatever
    hooks it defines. The loop calls this once at the edge, then only the declared hooks."""
    if isinstance(obj, Policy):
        return obj
    if not callable(getattr(obj, "act", None)):
        raise TypeError(f"{type(obj).__name__} is not a policy: it has no act(obs, instruction)")
    return _Adapted(obj)


def exec_steps(policy: Policy, embodiment: Embodiment, asked: int | None = None) -> int:
    """How many actions of each chunk the loop runs before the next decision: what the caller
    ``asked`` (e.g. ``run_episode(exec_horizon=...)``), else the policy's own ``exec_horizon`` (a
    checkpoint may decide more often than its body's default), else the embodiment's."""
    return int(asked or policy.exec_horizon or embodiment.exec_horizon)


def reads_step_images(policy: Policy) -> bool:
    """Whether ``policy`` reads the images of the observations it is shown after each step (its own
    ``step_images``, else whether it has an ``after_step`` of its own, which might)."""
    if policy.step_images is not None:
        return bool(policy.step_images)
    return type(policy).after_step is not Policy.after_step or "after_step" in vars(policy)


class RandomPolicy(Policy):
    """Uniform actions within the embodiment's limits (unbounded channels: N(0, 1))."""

    def __init__(self, embodiment: Embodiment):
        self.embodiment = embodiment
        self.reset(None)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Observation, instruction: str) -> np.ndarray:
        low, high = self.embodiment.action_bounds()
        h = self.embodiment.exec_horizon
        finite = np.isfinite(low) & np.isfinite(high)
        a = self.rng.standard_normal((h, len(low)))
        a[:, finite] = self.rng.uniform(low[finite], high[finite], (h, int(finite.sum())))
        return a.astype(np.float32)


class ReplayPolicy(Policy):
    """Returns recorded actions in order, open loop; an empty chunk once they run out.

    >>> p = ReplayPolicy(np.zeros((3, 2), np.float32), chunk=2)
    >>> [len(p.act(None, "")) for _ in range(3)]
    [2, 1, 0]
    """

    def __init__(self, actions: np.ndarray, chunk: int = 8):
        self.actions = np.asarray(actions, dtype=np.float32)
        self.chunk = chunk
        self.cursor = 0

    def reset(self, seed: int | None = None) -> None:
        self.cursor = 0

    def act(self, obs: Observation, instruction: str) -> np.ndarray:
        out = self.actions[self.cursor:self.cursor + self.chunk]
        self.cursor += len(out)
        return out


def screen_divergence(a: np.ndarray | None, b: np.ndarray | None, size: tuple[int, int] = (96, 64)) -> float:
    """How different two screenshots look, 0 (same) .. 1: mean absolute difference of both images
    shrunk to ``size`` (box filter), so compression noise and sub-pixel shifts barely count while a
    changed dialog does. Missing images count as fully different.

    >>> x = np.zeros((80, 120, 3), np.uint8)
    >>> screen_divergence(x, x), screen_divergence(x, 255 - x)
    (0.0, 1.0)
    """
    if a is None or b is None:
        return 1.0
    from PIL import Image
    small = [np.asarray(Image.fromarray(np.ascontiguousarray(im, dtype=np.uint8)).resize(size, Image.BOX),
                        np.float32) for im in (a, b)]
    return float(np.abs(small[0] - small[1]).mean() / 255.0)


class GuiReplayPolicy(Policy):
    """Returns recorded GuiActions in order, then None (nothing more to do).

    With ``screens`` (the recorded screenshot before each action) and ``stop_on_divergence``, it
    compares the live screen with the recorded one before returning each action and returns None
    instead of an action meant for a screen that is no longer there; ``diverged_at`` says where.
    """

    def __init__(self, actions, screens=None, stop_on_divergence: float | None = None):
        self.actions = list(actions)
        self.screens = screens
        self.stop_on_divergence = stop_on_divergence
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self.cursor = 0
        self.divergence: list[float] = []
        self.diverged_at: int | None = None

    def act(self, obs: Observation, instruction: str):
        t = self.cursor
        if t >= len(self.actions):
            return None
        if self.screens is not None and t < len(self.screens) and self.screens[t] is not None:
            d = screen_divergence((obs.images or {}).get("screen"), self.screens[t])
            self.divergence.append(d)
            if self.stop_on_divergence is not None and d > self.stop_on_divergence:
                self.diverged_at = t
                return None
        self.cursor += 1
        return self.actions[t]

    def info(self) -> dict:
        out = {"replayed": self.cursor, "of": len(self.actions)}
        if self.divergence:
            out["max_divergence"] = max(self.divergence)
        if self.diverged_at is not None:
            out["diverged_at"] = self.diverged_at
        return out
