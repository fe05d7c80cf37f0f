"""The policy server's requests, checked at the edge (`embodia.agent.serving.server`): the observation
and episode fields of a request and the executed steps an ``episode_end`` may carry, each read into
our vocabulary and refused with a one-line ValueError naming the key before any model work
(`Limits`: what one request may ask of the server)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from embodia.devices import Embodiment, Observation
from embodia.devices.observation import ACTION, STATE, image_key


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the server; everything is checked before the model runs.

    ``max_prompt_chars``: instruction length (a 1 MB prompt held the model for minutes);
    ``max_prompt_tokens``: the same in the policy's own tokens, what a decision's cost grows with
    (2,000 emoji are 8,000 byte-level tokens; policies without a tokenizer are bounded by characters);
    ``max_abs``: the bound on a state or action value where the embodiment gives none;
    ``max_steps``: executed steps an episode_end may carry; ``max_queue``: model calls waiting
    before new ones are refused; ``stall_s``: a model call running longer makes /healthz fail;
    ``max_connections`` (``_per_peer``: from one client, a host range or a client named by its token,
    below it so that one client cannot hold every place; 8 loopback addresses took all 256 when it
    counted addresses): more are refused at the handshake (503); ``idle_s``: a connection that sends
    no valid request for this long is closed, even if it answers pings or sends junk (idle ones held
    places for ever)."""
    max_prompt_chars: int = 2000
    max_prompt_tokens: int = 256
    max_abs: float = 1e4
    max_steps: int = 10_000
    max_queue: int = 64
    stall_s: float = 30.0
    max_connections: int = 256
    max_connections_per_peer: int = 32
    idle_s: float = 120.0

    def __post_init__(self):
        if not 1 <= self.max_connections_per_peer < self.max_connections:
            raise ValueError(f"max_connections_per_peer ({self.max_connections_per_peer}) must be at least 1 and "
                             f"below max_connections ({self.max_connections})")


def _bounds(channels, max_abs: float):
    low = np.array([c.low if math.isfinite(c.low) else -max_abs for c in channels], np.float64)
    high = np.array([c.high if math.isfinite(c.high) else max_abs for c in channels], np.float64)
    return low, high


def _in_range(name: str, a: np.ndarray, channels, max_abs: float, slack: float) -> None:
    """Refuse values outside the channels' limits (widened by ``slack`` of their span; a measured
    state may overshoot a little, an executed action was clipped to them)."""
    low, high = _bounds(channels, max_abs)
    span = np.where(np.isfinite(high - low), high - low, 0.0) * slack
    bad = np.flatnonzero(((a < low - span) | (a > high + span)).reshape(-1, len(channels)).any(axis=0))
    if bad.size:
        c = channels[int(bad[0])]
        raise ValueError(f"{name}: channel {c.name!r} out of range [{low[bad[0]]:g}, {high[bad[0]]:g}] "
                         f"(got {float(np.max(np.abs(a.reshape(-1, len(channels))[:, bad[0]]))):g})")


def _float_array(msg: dict, key: str) -> np.ndarray:
    a = _array(msg, key)
    if a.dtype.kind not in "iuf":
        raise ValueError(f"{key}: expected numbers, got {a.dtype}")
    return a


def read_observation(msg: dict, emb: Embodiment, limits: Limits = Limits()) -> tuple[Observation, str, dict]:
    """The observation, instruction and episode fields of one request; ValueError naming the key.

    >>> from embodia.devices import Channel
    >>> e = Embodiment("p", "pusher", actions=(Channel("vx", -1, 1),), state=(Channel("x"),))
    >>> read_observation({"observation.state": np.array([1e300]), "prompt": "go"}, e)
    Traceback (most recent call last):
    ValueError: observation.state: channel 'x' out of range [-10000, 10000] (got 1e+300)
    """
    prompt = msg.get("prompt", msg.get("task"))
    if not isinstance(prompt, str):
        raise ValueError(f"'prompt': expected the instruction as a string, got {type(prompt).__name__}")
    if len(prompt) > limits.max_prompt_chars:
        raise ValueError(f"'prompt': {len(prompt)} characters, the limit is {limits.max_prompt_chars}")
    state = _float_array(msg, STATE)
    if state.shape != (emb.state_dim,):
        raise ValueError(f"{STATE}: expected shape ({emb.state_dim},) for embodiment {emb.name!r}, "
                         f"got {tuple(state.shape)}")
    images = {}
    for c in emb.cameras:
        img = _array(msg, image_key(c.name))
        if img.dtype != np.uint8 or img.shape != (c.height, c.width, 3):
            raise ValueError(f"{image_key(c.name)}: expected uint8 ({c.height}, {c.width}, 3), "
                             f"got {img.dtype} {tuple(img.shape)}")
        images[c.name] = img
    seed, reset = msg.get("seed"), msg.get("reset", False)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise ValueError(f"'seed': expected an int, got {type(seed).__name__}")
    if seed is not None and not 0 <= int(seed) < 2 ** 63:
        raise ValueError(f"'seed': expected 0 <= seed < 2**63, got {seed}")
    if not isinstance(reset, bool):
        raise ValueError(f"'reset': expected true or false, got {type(reset).__name__}")
    obs = Observation(images=images, state=state).validate(emb)        # NaN/inf named by channel
    _in_range(STATE, obs.state, emb.state, limits.max_abs, 1.0)
    return obs, prompt, {"reset": reset or seed is not None, "seed": None if seed is None else int(seed)}


def read_steps(msg: dict, emb: Embodiment, limits: Limits = Limits()) -> tuple[np.ndarray, np.ndarray]:
    """The executed states [T, S] and actions [T, D] an episode_end may carry, range-checked."""
    states, actions = _float_array(msg, STATE), _float_array(msg, ACTION)
    if states.ndim != 2 or states.shape[1] != emb.state_dim or actions.shape != (len(states), emb.action_dim):
        raise ValueError(f"episode_end: expected {STATE} [T, {emb.state_dim}] and {ACTION} [T, {emb.action_dim}], "
                         f"got {list(states.shape)} and {list(actions.shape)}")
    if not 1 <= len(states) <= limits.max_steps:
        raise ValueError(f"episode_end: {len(states)} executed steps, expected 1..{limits.max_steps}")
    if not (np.all(np.isfinite(states)) and np.all(np.isfinite(actions))):
        raise ValueError("episode_end: executed steps must be non-empty and finite")
    _in_range(f"episode_end {STATE}", states, emb.state, limits.max_abs, 1.0)
    _in_range(f"episode_end {ACTION}", actions, emb.actions, limits.max_abs, 1e-3)
    return states, actions


def _array(msg: dict, key: str) -> np.ndarray:
    if key not in msg:
        raise ValueError(f"missing {key!r} (got keys {sorted(map(str, msg))})")
    value = msg[key]
    if isinstance(value, list):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        raise ValueError(f"{key}: expected a numeric array, got {getattr(value, 'dtype', type(value).__name__)}")
    return value

