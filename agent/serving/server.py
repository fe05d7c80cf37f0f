"""`embodia serve`: one policy behind a websocket that speaks openpi's websocket policy protocol, so
a robot wired to `openpi-client` (``WebsocketClientPolicy``) or to ``--policy remote:ws://HOST:PORT``
drives it without code changes.

    embodia serve --policy embodia-tiny --device sim:twogap-push --port 8000

Messages are msgpack maps, numpy arrays encoded as openpi-client encodes them (`embodia.policies.ws_policy`).

* On connect the server sends its metadata: ``server``, ``policy``, ``embodiment`` (name and
  ``embodiment_prompt``), ``state_dim``, ``action_dim``, ``action_horizon``, ``exec_horizon``, ``hz``,
  ``observation`` (each key's dtype and shape), ``memory`` (bool) and ``max_message_bytes``.
* A request is one observation (our feature vocabulary, `embodia.devices.observation`)::

      "observation.state"             float32 [S] (float64 accepted)
      "observation.images.<camera>"   uint8 [H, W, 3], every camera the embodiment declares
      "prompt"                        str, the instruction ("task" accepted)
      "seed"                          int, optional: starts a new episode, sampler seeded with it
      "reset"                         bool, optional: True starts a new episode

  and is answered by ``{"actions": float32 [H, D], "server_timing": {"infer_ms", "queue_ms",
  "prev_total_ms"}}`` (plus ``"policy_info"`` when the policy reports something).
* ``{"__ctrl__": "episode_start"}``: the next request starts a new episode. ``{"__ctrl__":
  "episode_end", "__success__": bool, "__token__": str}``: the episode's verified outcome; the next
  request starts a new episode. With ``--memory`` a success is stored in the success memory (saved
  at once) and a failure credits the entries that steered it; without ``__success__`` the memory is
  left alone. Such a write changes what every later client gets, so it needs the server's memory
  token (``$EMBODIA_MEMORY_TOKEN``; without one memory writes are off, metadata ``memory_writes``
  says which), its steps are range-checked, and each write is logged with the client that made it
  (``writes.jsonl`` in the memory folder; ``"__client__"`` may name the client).
  Both are answered by ``{"__ack__": ...}``, other controls by ``{"__ack__": "ignored"}`` (as
  openpi's server does).
* ``embodia serve --success check:<predicate>|judge:<model>`` (`server_labeler`): for clients that
  send no outcome, the server labels each episode itself when it ends (an ``episode_end`` without
  ``__success__``, the next request that starts an episode, or the connection closing), from the
  observations the client sent (a check on the last one's state channels; a judge shown the first,
  the last and a few in between). The ack of an ``episode_end`` carries the ``"label"``. A verified
  label stores a success or credits a failure (logged in ``writes.jsonl`` as ``--success <source>``);
  any other keeps the episode pending in the memory folder for `embodia memory review`. The
  observations are the client's: serve with ``--success`` to clients you trust (an API key).
* What ran: the server only sees the states it was sent and the chunks it returned, and assumes the
  first ``exec_horizon`` actions of each chunk were executed from the state sent (true for every
  chunk but the last of an episode run by `embodia.agent.loop.episode`). A client that knows better sends the
  executed steps with ``episode_end``: ``"observation.state"`` [T, S] and ``"action"`` [T, D]
  (``--policy remote:`` does).
* Bounds checked before any model work (`Limits`): prompt length, the state's shape, dtype and range
  (finite, within the embodiment's limits or ``max_abs`` where a channel is unbounded), every
  camera's exact uint8 shape, episode_end's step count and ranges (actions within the action
  limits). A malformed or refused request (not msgpack, not a map, a missing key, a wrong dtype or
  shape, NaN, 1e300) is answered by ``{"error": "..."}`` and the connection stays open; a message
  over ``--max-message-mb`` closes the connection (code 1009). Neither affects other connections.
* ``GET /healthz`` on the same port answers 200 ``OK``, or 503 when a model
  call has run longer than ``Limits.stall_s`` (plain HTTP, no key). With an API key, a websocket
  handshake without ``Authorization: Api-Key <key>`` (as openpi-client sends it) gets HTTP 401.

Each connection is a session of its own (sampler seed, executed-step history, memory credit) over
one shared model. Model calls and memory updates run one at a time on one worker thread, taking
turns between client addresses (`FairWorker`; in arrival order within one address): an address with
many connections gets no more turns than one with a single connection, so a client waits about one
bounded decision (``Limits.max_prompt_tokens``) per other address ahead of it. A ``--success`` label (a judge's
HTTP call or generate, up to its timeout) is asked on a thread of its own, so it holds up only the
connection whose episode it labels; the memory write it decides then takes its turn on the worker.
With more than ``Limits.max_queue`` calls waiting a request is refused ("busy") instead of queued. Connections
beyond ``Limits.max_connections`` (``max_connections_per_peer`` from one address) are refused at
the handshake (503), a connection that keeps sending refused messages is slowed down, and one that
sends no request for ``Limits.idle_s`` is closed (answering pings does not keep it). `embodia serve`
beyond loopback refuses to start without an API key.

>>> server = PolicyServer(policy, device.embodiment)           # doctest: +SKIP
>>> with server.running() as url:                               # doctest: +SKIP
...     remote = WebsocketPolicy(url).bind(device.embodiment)
"""
from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import numpy as np
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from embodia.agent.loop.success import JudgeLabeler
from embodia.agent.serving.access import same_secret
from embodia.devices import Device, Embodiment, Observation
from embodia.devices.observation import ACTION, STATE, image_key
from embodia.policies.base import as_policy
from embodia.policies.ws_policy import MEMORY_TOKEN_ENV, packb, unpackb

log = logging.getLogger("embodia.serve")
MAX_MESSAGE_MB = 16.0
BYTES_PER_TOKEN = 8        # no tokenizer we serve averages more UTF-8 bytes per token (English: ~4)


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the server; everything is checked before the model runs.

    ``max_prompt_chars``: instruction length (a 1 MB prompt held the model for minutes);
    ``max_prompt_tokens``: the same in the policy's own tokens, what a decision's cost grows with
    (2,000 emoji are 8,000 byte-level tokens; policies without a tokenizer are bounded by characters);
    ``max_abs``: the bound on a state or action value where the embodiment gives none;
    ``max_steps``: executed steps an episode_end may carry; ``max_queue``: model calls waiting
    before new ones are refused; ``stall_s``: a model call running longer makes /healthz fail;
    ``max_connections`` (``_per_peer``: from one address, below it so that one address cannot
    hold every place): more are refused at the handshake (503); ``idle_s``: a connection that sends
    no request for this long is closed, even if it answers pings (idle ones held places for ever)."""
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


class ClientBody(Device):
    """The body a client drives, as a success source sees it from the server: its embodiment and
    nothing else (no simulator check, no scene to read; the observations are the client's)."""

    def __init__(self, embodiment: Embodiment):
        self.embodiment = embodiment


def server_labeler(spec: str, embodiment: Embodiment, *, base_url: str | None = None,
                   api_key_env: str | None = "OPENAI_API_KEY"):
    """The labeler for ``embodia serve --success spec``: ``check:`` on the last observation a client
    sent (state channels), or ``judge:...`` on its frames. ``ask`` (nobody sits at a server's
    terminal for each robot), ``oracle`` (the served body is not simulated here) and ``body.*``
    atoms (the scene is the client's) are refused with a one-line SuccessSourceError.

    >>> from embodia.devices import Channel
    >>> e = Embodiment("p", "pusher", actions=(Channel("vx", -1, 1),), state=(Channel("x"),))
    >>> server_labeler("ask", e)
    Traceback (most recent call last):
    embodia.agent.loop.success.SuccessSourceError: serve --success ask: a server has nobody at its terminal to answer for each client; use check:<predicate> or judge:<model>
    """
    from embodia.agent.loop.success import SuccessSourceError, atoms, check_source, make_labeler, parse_predicate
    check_source(spec)
    if spec == "ask":
        raise SuccessSourceError("serve --success ask: a server has nobody at its terminal to answer for each "
                                 "client; use check:<predicate> or judge:<model>")
    if spec == "oracle":
        raise SuccessSourceError("serve --success oracle: the served body is the client's, not a simulation here; "
                                 "use check:<predicate> or judge:<model>")
    if spec.startswith("check:") and any(a[0] == "body" for a in atoms(parse_predicate(spec[len("check:"):]))):
        raise SuccessSourceError("serve --success: body.NAME positions are not sent by clients; check the "
                                 "observation's state.NAME channels")
    return make_labeler(spec, ClientBody(embodiment), base_url=base_url, api_key_env=api_key_env)


class _Session:
    """One connection's episode over the shared model: its own sampler, history and memory credit."""

    def __init__(self, server: "PolicyServer"):
        self.server = server
        self.policy = as_policy(copy.copy(server.policy))   # shares model and normalizers; reset() gives it
        self.policy.reset(None)                             # its own generator and history
        if server.memory is not None:
            from embodia.policies.robot.steered import SteeredPolicy
            self.policy = SteeredPolicy(self.policy, server.memory, namespace=server.namespace)
            self.policy.autosave = server.memory_path    # saved after each stored or held episode
        self.credit: dict = {}      # SuccessMemory.lend_episode's bookkeeping for this connection
        self.peer = self.host = "?"
        self.counted: str | None = None      # the last prompt whose tokens were counted and allowed
        self.fresh = True           # the next request starts an episode
        # --success on the server: its own copy (a judge keeps this connection's frames), and the
        # episode in progress as the client sent it (first and last observation, prompt, seed)
        self.labeler = copy.copy(server.labeler) if server.labeler is not None else None
        if isinstance(self.labeler, JudgeLabeler):
            self.labeler._kept = []         # its frames are this connection's own (the model is shared)
        self.episode: dict | None = None

    def act(self, obs: Observation, prompt: str, begin: dict, label: dict | None = None) -> np.ndarray:
        if begin["reset"] or self.fresh:
            self.close_episode(label)    # a client that starts anew without episode_end ended the last one
            self.policy.reset(begin["seed"])
            self.fresh = False
            self.episode = {"first": obs, "last": obs, "prompt": prompt, "seed": begin["seed"], "t": 0}
        elif self.episode is not None:
            if isinstance(self.labeler, JudgeLabeler):      # a few frames in between, as in the loop
                self.labeler.on_step(self.episode["t"], self.episode["last"], None, obs)
            self.episode["last"], self.episode["t"] = obs, self.episode["t"] + 1
        with self._credit():
            chunk = np.atleast_2d(np.asarray(self.policy.act(obs, prompt), np.float32))
        for a in chunk[:self.server.embodiment.exec_horizon]:    # assumed executed; episode_end may
            self.policy.after_step(obs, a)                          # send what really ran
        return chunk

    def end(self, success: bool | None, steps, label: dict | None = None) -> tuple[int | None, dict | None]:
        """Close the episode; with a memory and a known outcome, store a success or credit a failure.
        No outcome from the client and ``--success`` on the server: the server labels it (a verified
        label is the outcome; any other keeps the episode pending; ``label``: already judged, see
        ``judge``). (memory entries, the label)."""
        self.fresh = True
        mem = self.server.memory
        if steps is not None and mem is not None:
            self.policy.set_executed(steps[0], steps[1])
        if success is None:
            label = self.close_episode(label)
        else:
            self.episode = None          # the client's outcome: the server's source is not asked
        if success is not None and mem is not None:
            with self._credit():
                self.policy.end_episode(success)     # saves the memory (autosave)
        return (None if mem is None else len(mem)), label

    def judge(self) -> dict | None:
        """The server's ``--success`` label of the episode in progress (None: no source or no episode);
        changes nothing. A judge may take seconds, so the server asks it off the model's thread."""
        ep = self.episode
        if self.labeler is None or ep is None:
            return None
        return self.labeler(self.server.body, ep["first"], ep["last"], ep["prompt"], ep["seed"]).to_dict()

    def close_episode(self, label: dict | None = None) -> dict | None:
        """Close the episode in progress with its ``--success`` label (``label``, or asked here; None:
        no source or no episode): verified, the memory stores it or credits a failure; else it is
        held pending."""
        if label is None:
            label = self.judge()
        ep, self.episode = self.episode, None
        if label is None or ep is None:
            return None
        mem = self.server.memory
        if mem is not None:
            with self._credit():
                if label["verified"]:
                    self.policy.end_episode(bool(label["success"]))
                else:
                    self.policy.hold_episode(label, ep["last"])
            if label["verified"]:
                self.server.log_label(self, label, len(mem))
        return label

    def _credit(self):
        # every connection runs an episode of its own: it lends its bookkeeping of the entries that
        # steered it to the memory while it acts or ends (always under the server's lock)
        mem = self.server.memory
        return mem.lend_episode(self.credit) if mem is not None else nullcontext()


class FairWorker:
    """One thread that runs calls one at a time, taking turns between keys (client addresses): the
    next call is the oldest of the first address in line, and an address just served goes behind
    every address that was waiting. So an address with many connections gets no more turns than
    one with a single connection, and a client waits at most about one other decision. The thread
    picks the next call itself, the moment the last one ends (no trip through the event loop)."""

    def __init__(self, name: str):
        self._lines: dict[str, deque] = {}       # key -> its waiting (future, fn, args), in arrival order
        self._cv = threading.Condition()
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def submit(self, key: str, fn, *args) -> Future:
        f: Future = Future()
        with self._cv:
            self._lines.setdefault(key, deque()).append((f, fn, args))
            self._cv.notify()
        return f

    def _next(self):
        with self._cv:
            while not self._lines:
                self._cv.wait()
            key = next(iter(self._lines))
            line = self._lines[key]
            job = line.popleft()
            if not line:
                del self._lines[key]
            return key, job

    def _loop(self) -> None:
        while True:
            key, (f, fn, args) = self._next()
            if f.set_running_or_notify_cancel():     # False: its connection went away while it waited
                try:
                    f.set_result(fn(*args))
                except BaseException as e:           # noqa: BLE001 - handed to the caller
                    f.set_exception(e)
            with self._cv:                           # served: behind every address that came meanwhile
                if key in self._lines:
                    self._lines[key] = self._lines.pop(key)


class PolicyServer:
    """Serves ``policy`` (bound to ``embodiment``) to any number of connections; see the module doc.
    ``memory`` (a SuccessMemory, with its ``namespace``) is saved to ``memory_path`` after every
    episode_end and when the server stops."""

    def __init__(self, policy, embodiment: Embodiment, *, spec: str = "", memory=None, memory_path=None,
                 namespace: str | None = None, api_key: str | None = None, memory_token: str | None = None,
                 max_message_bytes: int = int(MAX_MESSAGE_MB * 2 ** 20), limits: Limits = Limits(),
                 labeler=None):
        if embodiment.is_gui:
            raise ValueError(f"embodia serve serves robot policies; {embodiment.name!r} is a GUI body")
        if memory is not None and (memory_path is None or namespace is None):
            raise ValueError("a served memory needs memory_path and namespace")
        self.policy, self.embodiment = policy, embodiment
        self.memory, self.memory_path, self.namespace = memory, memory_path, namespace
        self.api_key = api_key or None
        self.memory_token = memory_token or None      # None: memory writes from clients are off
        self.limits = limits
        self.max_message_bytes = int(max_message_bytes)
        self.labeler = labeler          # --success: the server labels episodes whose client sends no outcome
        self.body = ClientBody(embodiment)
        self.port: int | None = None
        self._lock = threading.Lock()
        # one worker thread runs every model call and memory update, first come first served
        self._worker = FairWorker("embodia-model")
        # --success labels are asked on a thread of their own: a judge's HTTP call (up to its timeout)
        # or generate() must not hold up the other connections' model calls
        self._judge = (ThreadPoolExecutor(max_workers=1, thread_name_prefix="embodia-judge")
                       if labeler is not None else None)
        self._queued = 0                   # calls submitted and not finished (event-loop thread only)
        # the policy's own token count of a prompt, if it has a tokenizer (what its cost grows with)
        counter = as_policy(policy)     # None: no tokenizer, so prompts are bounded in characters only
        self._count_tokens = counter.prompt_tokens if counter.prompt_tokens("") is not None else None
        self._conns: dict[str, int] = {}   # open connections per peer address (event-loop thread only)
        self._busy_since: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        horizon = as_policy(policy).horizon or embodiment.chunk
        observation = {STATE: {"dtype": "float32", "shape": [embodiment.state_dim]},
                       **{image_key(c.name): {"dtype": "uint8", "shape": [c.height, c.width, 3]}
                          for c in embodiment.cameras},
                       "prompt": {"dtype": "str", "shape": []}}
        self.metadata = {"server": "embodia", "policy": spec, "embodiment": embodiment.name,
                         "embodiment_prompt": embodiment.prompt(), "state_dim": embodiment.state_dim,
                         "action_dim": embodiment.action_dim, "action_horizon": horizon,
                         "exec_horizon": embodiment.exec_horizon, "hz": embodiment.hz,
                         "observation": observation, "memory": memory is not None,
                         "memory_writes": "token" if memory is not None and self.memory_token else "off",
                         "labels": "server" if labeler is not None else "client",
                         "max_message_bytes": self.max_message_bytes,
                         "max_prompt_chars": limits.max_prompt_chars, "max_steps": limits.max_steps,
                         "max_prompt_tokens": limits.max_prompt_tokens if self._count_tokens else None}

    # -- running ------------------------------------------------------------------------------------
    async def serve(self, host: str = "127.0.0.1", port: int = 8000, *, on_ready=None) -> None:
        """Serve until `stop()` (or cancellation, e.g. Ctrl-C); the memory is saved on the way out.
        ``on_ready(self)`` runs once the port is bound (``self.port``: the real one, for port 0)."""
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            async with serve(self._handle, host, port, compression=None, max_size=self.max_message_bytes,
                             process_request=self._http) as srv:
                self.port = srv.sockets[0].getsockname()[1]
                if on_ready is not None:
                    on_ready(self)
                await self._stop.wait()
        finally:
            self.save_memory()

    def stop(self) -> None:
        """Stop serving (from any thread)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    @contextmanager
    def running(self, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 30.0):
        """Serve from a background thread for the duration of a ``with`` block; yields the URL."""
        ready, failed = threading.Event(), []

        def main():
            try:
                asyncio.run(self.serve(host, port, on_ready=lambda _: ready.set()))
            except OSError as e:        # e.g. the port is taken
                failed.append(e)
                ready.set()
        thread = threading.Thread(target=main, name="embodia-serve", daemon=True)
        thread.start()
        if not ready.wait(timeout_s) or failed:
            raise OSError(f"the policy server did not start on {host}:{port}: "
                          f"{failed[0] if failed else f'not ready after {timeout_s:g} s'}")
        try:
            yield f"ws://{host}:{self.port}"
        finally:
            self.stop()
            thread.join(timeout_s)

    def save_memory(self) -> None:
        if self.memory is not None:
            with self._lock:
                self.memory.save(self.memory_path)

    # -- the protocol -------------------------------------------------------------------------------
    def _http(self, connection, request):
        """/healthz, and the API key check of every websocket handshake."""
        if request.path.split("?")[0] == "/healthz":
            busy = self._busy_since
            if busy is not None and time.monotonic() - busy > self.limits.stall_s:
                return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE,
                                          f"stalled: a model call has run for {time.monotonic() - busy:.0f} s "
                                          f"(limit {self.limits.stall_s:g} s)\n")
            return connection.respond(HTTPStatus.OK, "OK\n")
        peer = connection.remote_address[0] if connection.remote_address else "?"
        if sum(self._conns.values()) >= self.limits.max_connections or \
                self._conns.get(peer, 0) >= self.limits.max_connections_per_peer:
            log.warning("refused %s: too many connections", connection.remote_address)
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections; retry later\n")
        if self.api_key is not None:
            sent = request.headers.get("Authorization", "")
            if not same_secret(sent, f"Api-Key {self.api_key}"):
                log.warning("refused %s: missing or wrong API key", connection.remote_address)
                return connection.respond(HTTPStatus.UNAUTHORIZED,
                                          "missing or wrong API key (send 'Authorization: Api-Key <key>')\n")
        return None

    async def _handle(self, ws) -> None:
        session, prev_ms = _Session(self), None
        session.peer = "%s:%s" % tuple(ws.remote_address[:2]) if ws.remote_address else "?"
        host = session.host = ws.remote_address[0] if ws.remote_address else "?"
        self._conns[host] = self._conns.get(host, 0) + 1
        log.info("connection from %s", ws.remote_address)
        try:
            await ws.send(packb(self.metadata))
            errors = 0
            while True:
                try:
                    frame = await asyncio.wait_for(ws.recv(), self.limits.idle_s)
                except TimeoutError:        # pings answered or not: an idle connection gives its place back
                    log.info("closing %s: no request for %g s", ws.remote_address, self.limits.idle_s)
                    await ws.close(1000, f"idle for {self.limits.idle_s:g} s")
                    break
                t0 = time.perf_counter()
                reply = await self._answer(session, frame)
                if prev_ms is not None and "server_timing" in reply:
                    reply["server_timing"]["prev_total_ms"] = prev_ms
                await ws.send(packb(reply))
                prev_ms = (time.perf_counter() - t0) * 1e3
                # a connection that keeps sending refused messages waits longer each time (up to
                # 0.5 s), so its flood cannot crowd the event loop; one good request resets it
                errors = errors + 1 if "error" in reply else 0
                if errors:
                    await asyncio.sleep(min(0.5, 0.001 * 2 ** min(errors, 10)))
        except ConnectionClosed as e:
            log.info("connection from %s closed: %s", ws.remote_address, e)
        finally:
            if session.episode is not None and session.labeler is not None:    # gone without episode_end
                try:
                    label = await self._label(session)
                    await self._run(session, session.close_episode, label)
                except Exception:      # noqa: BLE001 - a failed label must not take the server down
                    log.exception("labelling the episode of a closed connection failed")
            self._conns[host] -= 1
            if not self._conns[host]:
                del self._conns[host]

    async def _answer(self, session: _Session, frame) -> dict:
        try:
            if not isinstance(frame, bytes):
                raise ValueError("expected a binary msgpack frame, got text")
            msg = unpackb(frame)
            if not isinstance(msg, dict):
                raise ValueError(f"expected a map (an observation or a control), got a {type(msg).__name__}")
            if "__ctrl__" in msg:
                return await self._control(session, msg)
            obs, prompt, begin = read_observation(msg, self.embodiment, self.limits)
            self._check_tokens(session, prompt)
            label = await self._label(session) if begin["reset"] or session.fresh else None
            chunk, timing = await self._run(session, session.act, obs, prompt, begin, label)
            info = dict(session.policy.info())
            return {"actions": chunk, "server_timing": timing} | ({"policy_info": info} if info else {})
        except ValueError as e:         # a refused request: the client can fix it and go on
            return {"error": str(e)}
        except Exception as e:          # a policy bug must not take the server down for every robot
            log.exception("request failed")
            return {"error": f"internal error: {type(e).__name__}: {e}"}

    async def _control(self, session: _Session, msg: dict) -> dict:
        kind = msg["__ctrl__"]
        if kind == "episode_start":
            session.fresh = True
            return {"__ack__": "episode_start"}
        if kind != "episode_end":
            return {"__ack__": "ignored"}
        success = msg.get("__success__")        # absent: an outcome nobody verified, learned from by no one
        if success is not None and not isinstance(success, bool):
            raise ValueError(f"episode_end: '__success__' must be true or false, got {success!r}")
        if success is not None and self.memory is not None:
            self._check_token(msg.get("__token__"))
        steps = read_steps(msg, self.embodiment, self.limits) if STATE in msg or ACTION in msg else None
        client = msg.get("__client__")
        client = client[:64] if isinstance(client, str) else None
        before = len(self.memory) if self.memory is not None else None
        label = await self._label(session) if success is None else None
        (entries, label), timing = await self._run(session, session.end, success, steps, label)
        if success is not None and self.memory is not None:
            self._log_write(session, client, success, steps, before, entries)
        return {"__ack__": "episode_end", "memory_entries": entries, "server_timing": timing} | \
            ({"label": label} if label is not None else {})

    def log_label(self, session, label: dict, after: int) -> None:
        """A memory write decided by the server's own ``--success`` source, logged like a client's."""
        self._log_write(session, f"--success {label['source']}", bool(label["success"]), None, None, after)

    def _check_token(self, token) -> None:
        if self.memory_token is None:
            raise ValueError(f"episode_end: memory writes are off on this server (start it with "
                             f"${MEMORY_TOKEN_ENV} set to accept outcomes); send no '__success__'")
        if not isinstance(token, str) or not same_secret(token, self.memory_token):
            log.warning("refused a memory write: missing or wrong memory token")
            raise ValueError("episode_end: missing or wrong '__token__' (memory writes need the server's "
                             "memory token)")

    def _log_write(self, session, client, success, steps, before, after) -> None:
        """One line per memory write in ``writes.jsonl`` beside the memory: who, when, what."""
        rec = {"t": time.time(), "peer": session.peer, "client": client, "success": success,
               "steps": None if steps is None else len(steps[0]), "entries_before": before, "entries_after": after}
        log.info("memory write %s", rec)
        try:
            path = Path(self.memory_path) / "writes.jsonl"
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
        except OSError as e:
            log.warning("could not log the memory write: %s", e)

    async def _label(self, session: _Session) -> dict | None:
        """The ``--success`` label of the session's episode in progress, asked on the judge's thread
        (the model's worker serves other connections meanwhile); None without a source or an episode."""
        if self._judge is None or session.episode is None:
            return None
        return await asyncio.get_running_loop().run_in_executor(self._judge, session.judge)

    def _check_tokens(self, session: _Session, prompt: str) -> None:
        """Refuse a prompt over ``max_prompt_tokens`` of the policy's own tokenizer. Counting is work
        too (2,000 emoji took 11 ms), so it is bounded: a byte-level tokenizer makes at most one token
        per UTF-8 byte (short prompts are not tokenized), a prompt of more than ``BYTES_PER_TOKEN``
        bytes per allowed token is refused uncounted, and a connection's repeated prompt is counted once."""
        limit = self.limits.max_prompt_tokens
        if self._count_tokens is None or len(prompt) * 4 <= limit or prompt == session.counted:
            return
        size = len(prompt.encode("utf-8", "surrogatepass"))
        if size <= limit:
            return
        if size > BYTES_PER_TOKEN * limit:
            raise ValueError(f"'prompt': {size} bytes, more than {limit} tokens of any tokenizer "
                             f"(the limit is {limit} tokens)")
        n = self._count_tokens(prompt)
        if n > limit:
            raise ValueError(f"'prompt': {n} tokens, the limit is {limit}")
        session.counted = prompt

    async def _run(self, session: _Session, fn, *args):
        """``fn(*args)`` on the model's worker thread, and how long it waited and ran (calls take
        turns between client addresses, `FairWorker`); refused when too many calls are waiting."""
        if self._queued >= self.limits.max_queue:
            raise ValueError(f"busy: {self._queued} requests are waiting for the model; retry later")
        self._queued += 1
        try:
            return await asyncio.wrap_future(self._worker.submit(session.host, self._timed, time.perf_counter(),
                                                                 fn, *args))
        finally:
            self._queued -= 1

    def _timed(self, t0, fn, *args):
        t1 = time.perf_counter()
        self._busy_since = time.monotonic()
        try:
            with self._lock:
                out = fn(*args)
        finally:
            self._busy_since = None
        return out, {"infer_ms": (time.perf_counter() - t1) * 1e3, "queue_ms": (t1 - t0) * 1e3}
