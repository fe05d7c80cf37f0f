"""The policy server's connections (`embodia.agent.serving.server`): each connection's episode over
the shared model (`ConnectionSession`: its own sampler, history, memory credit and ``--success``
label), and the one worker thread that runs every model call, taking turns between clients (host
ranges or named clients, `embodia.agent.serving.access.host_range`; `FairWorker`), so a client with
many connections gets no more turns than one with a single one, and a full queue sheds the heaviest."""
from __future__ import annotations

import copy
import threading
from collections import deque
from concurrent.futures import Future
from contextlib import nullcontext

import numpy as np

from embodia.agent.loop.core import Transition
from embodia.agent.loop.success import JudgeLabeler
from embodia.devices import Device, Embodiment, Observation
from embodia.policies.base import as_policy


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
    from embodia.agent.loop.predicate import atoms, parse_predicate
    from embodia.agent.loop.success import SuccessSourceError, check_source, make_labeler
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


class ConnectionSession:
    """One connection's episode over the shared model: its own sampler, history and memory credit."""

    def __init__(self, server):
        """``server``: the `PolicyServer` it belongs to (its policy, memory, labeler and embodiment;
        not imported here, so the server's module stays the only one that imports the other)."""
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
                self.labeler.on_step(Transition(self.episode["t"], self.episode["last"], None, obs, {}))
            self.episode["last"], self.episode["t"] = obs, self.episode["t"] + 1
        with self._credit():
            chunk = np.atleast_2d(np.asarray(self.policy.act(obs, prompt), np.float32))
        for a in chunk[:self.server.exec_horizon]:      # assumed executed; episode_end may
            self.policy.after_step(obs, a)                # send what really ran
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
    """One thread that runs calls one at a time, taking turns between keys (clients: host ranges or
    named clients): the next call is the oldest of the first key in line, and a key just served goes
    behind every key that was waiting. So a client with many connections gets no more turns than
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

    def shed(self, key: str, error: Exception) -> bool:
        """Make room for one call of ``key`` in a full queue: the newest waiting call of the key
        with the most calls waiting fails with ``error``, if that key holds more than ``key`` does
        (a light client is not refused because heavy ones filled the queue). False: ``key`` is
        the heaviest itself (or nothing waits), so its new call is the one to refuse."""
        with self._cv:
            mine = len(self._lines.get(key, ()))
            heavy = max(self._lines, key=lambda k: len(self._lines[k]), default=None)
            if heavy is None or heavy == key or len(self._lines[heavy]) <= mine:
                return False
            f = self._lines[heavy].pop()[0]
            if not self._lines[heavy]:
                del self._lines[heavy]
        if f.set_running_or_notify_cancel():
            f.set_exception(error)
        return True

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

