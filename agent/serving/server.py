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
one shared model. A connection counts as its client: the client its ``X-Embodia-Client`` token
names (``--client-tokens-file``, `embodia.agent.serving.access.read_client_tokens`; an unknown token
gets HTTP 401), else its host range (an IPv4 /24, an IPv6 /64; **every loopback address is one
range**, so processes on this machine share one client's places and turns unless a token names
them). Model calls and memory updates run one at a time on one worker thread, taking turns between
clients (`FairWorker`; in arrival order within one): a client with many connections or addresses
gets no more turns than one with a single connection, so a client waits about one bounded decision
(``Limits.max_prompt_tokens``) per other client ahead of it. A ``--success`` label (a judge's
HTTP call or generate, up to its timeout) is asked on a thread of its own, so it holds up only the
connection whose episode it labels; the memory write it decides then takes its turn on the worker.
With ``Limits.max_queue`` calls waiting, the client holding the most of them is refused ("busy"; its
newest waiting call, or the new one if it is that client's), not a light client. Connections beyond
``Limits.max_connections`` (``max_connections_per_peer`` from one client) are refused at the
handshake (503), a connection that keeps sending refused messages is slowed down, and one that
sends no valid request for ``Limits.idle_s`` is closed (answering pings or sending refused messages
does not keep it; a "busy" refusal does, the request was valid). `embodia serve`
beyond loopback refuses to start without an API key.

Three files: this one serves (the handshake, each connection's messages, the worker's turns);
`embodia.agent.serving.messages` reads and bounds each request; `embodia.agent.serving.connections`
holds a connection's episode (`ConnectionSession`) and the fair worker (`FairWorker`).

>>> server = PolicyServer(policy, device.embodiment)           # doctest: +SKIP
>>> with server.running() as url:                               # doctest: +SKIP
...     remote = WebsocketPolicy(url).bind(device.embodiment)
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from embodia.agent.serving.access import CLIENT_HEADER, host_range, same_secret

from embodia.agent.serving.connections import ClientBody, ConnectionSession, FairWorker
from embodia.agent.serving.messages import Limits, read_observation, read_steps
from embodia.devices import Embodiment
from embodia.devices.observation import ACTION, STATE, image_key
from embodia.policies.base import as_policy, exec_steps
from embodia.policies.wire import packb, unpackb
from embodia.policies.ws_policy import MEMORY_TOKEN_ENV

log = logging.getLogger("embodia.serve")
MAX_MESSAGE_MB = 16.0
BUSY = "busy"             # a refusal for load, not for the message: it keeps the connection's idle clock
BYTES_PER_TOKEN = 8        # no tokenizer we serve averages more UTF-8 bytes per token (English: ~4)


class PolicyServer:
    """Serves ``policy`` (bound to ``embodiment``) to any number of connections; see the module doc.
    ``memory`` (a SuccessMemory, with its ``namespace``) is saved to ``memory_path`` after every
    episode_end and when the server stops."""

    def __init__(self, policy, embodiment: Embodiment, *, spec: str = "", memory=None, memory_path=None,
                 namespace: str | None = None, api_key: str | None = None, memory_token: str | None = None,
                 max_message_bytes: int = int(MAX_MESSAGE_MB * 2 ** 20), limits: Limits = Limits(),
                 labeler=None, client_tokens: dict[str, str] | None = None):
        if embodiment.is_gui:
            raise ValueError(f"embodia serve serves robot policies; {embodiment.name!r} is a GUI body")
        if memory is not None and (memory_path is None or namespace is None):
            raise ValueError("a served memory needs memory_path and namespace")
        self.policy, self.embodiment = policy, embodiment
        self.exec_horizon = exec_steps(as_policy(policy), embodiment)   # actions a client runs per chunk
        self.memory, self.memory_path, self.namespace = memory, memory_path, namespace
        self.api_key = api_key or None
        self.client_tokens = dict(client_tokens or {})     # token -> client name (`read_client_tokens`)
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
        self._conns: dict[str, int] = {}   # open connections per client (event-loop thread only)
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
                         "exec_horizon": self.exec_horizon, "hz": embodiment.hz,
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
        who = self._who(connection.remote_address, request.headers)
        if who is None:
            log.warning("refused %s: unknown client token", connection.remote_address)
            return connection.respond(HTTPStatus.UNAUTHORIZED, f"unknown client token in {CLIENT_HEADER}\n")
        if sum(self._conns.values()) >= self.limits.max_connections or \
                self._conns.get(who, 0) >= self.limits.max_connections_per_peer:
            log.warning("refused %s: too many connections from %s", connection.remote_address, who)
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, f"too many connections from {who}; "
                                      f"retry later\n")
        if self.api_key is not None:
            sent = request.headers.get("Authorization", "")
            if not same_secret(sent, f"Api-Key {self.api_key}"):
                log.warning("refused %s: missing or wrong API key", connection.remote_address)
                return connection.respond(HTTPStatus.UNAUTHORIZED,
                                          "missing or wrong API key (send 'Authorization: Api-Key <key>')\n")
        return None

    def _who(self, address, headers) -> str | None:
        """Whom a connection counts as (its places, its turns): the client its token names, else its
        host range (`host_range`: all of loopback is one); None: a token this server does not know."""
        sent = headers.get(CLIENT_HEADER)
        if sent is None:
            return host_range(address[0]) if address else "?"
        return next((f"client {name}" for token, name in self.client_tokens.items() if same_secret(sent, token)),
                    None)

    async def _handle(self, ws) -> None:
        session, prev_ms = ConnectionSession(self), None
        session.peer = "%s:%s" % tuple(ws.remote_address[:2]) if ws.remote_address else "?"
        who = session.host = self._who(ws.remote_address, ws.request.headers) or "?"
        self._conns[who] = self._conns.get(who, 0) + 1
        log.info("connection from %s (%s)", ws.remote_address, who)
        try:
            await ws.send(packb(self.metadata))
            errors, valid_at = 0, time.monotonic()
            while True:
                # only a valid message keeps a connection: pings and refused messages do not
                left = self.limits.idle_s - (time.monotonic() - valid_at)
                try:
                    frame = await asyncio.wait_for(ws.recv(), max(left, 0.0))
                except TimeoutError:        # an idle connection gives its place back
                    log.info("closing %s: no valid request for %g s", ws.remote_address, self.limits.idle_s)
                    await ws.close(1000, f"idle for {self.limits.idle_s:g} s")
                    break
                t0 = time.perf_counter()
                reply = await self._answer(session, frame)
                if prev_ms is not None and "server_timing" in reply:
                    reply["server_timing"]["prev_total_ms"] = prev_ms
                await ws.send(packb(reply))
                prev_ms = (time.perf_counter() - t0) * 1e3
                if "error" not in reply or reply["error"].startswith(BUSY):
                    valid_at = time.monotonic()
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
            self._conns[who] -= 1
            if not self._conns[who]:
                del self._conns[who]

    async def _answer(self, session: ConnectionSession, frame) -> dict:
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

    async def _control(self, session: ConnectionSession, msg: dict) -> dict:
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

    async def _label(self, session: ConnectionSession) -> dict | None:
        """The ``--success`` label of the session's episode in progress, asked on the judge's thread
        (the model's worker serves other connections meanwhile); None without a source or an episode."""
        if self._judge is None or session.episode is None:
            return None
        return await asyncio.get_running_loop().run_in_executor(self._judge, session.judge)

    def _check_tokens(self, session: ConnectionSession, prompt: str) -> None:
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

    async def _run(self, session: ConnectionSession, fn, *args):
        """``fn(*args)`` on the model's worker thread, and how long it waited and ran (calls take
        turns between clients, `FairWorker`). With ``max_queue`` calls waiting the client holding
        the most of them is refused: its newest waiting call, or this one if that client is this one."""
        if self._queued >= self.limits.max_queue and not self._worker.shed(
                session.host, ValueError(f"{BUSY}: the model's queue is full and {session.host} holds the most "
                                         f"of it; retry later")):
            raise ValueError(f"{BUSY}: {self._queued} requests are waiting for the model and {session.host} "
                             f"holds the most of them; retry later")
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
