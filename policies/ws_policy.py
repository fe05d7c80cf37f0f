"""A robot policy served over a websocket (`embodia serve`, the LeRobot side, or any server speaking
openpi's protocol).

>>> pol = WebsocketPolicy("ws://gpu-box:8000").bind(device.embodiment)      # doctest: +SKIP
>>> pol.reset(seed=0); chunk = pol.act(device.observe(), "push the puck onto the goal")  # doctest: +SKIP

The wire format (openpi-client's msgpack_numpy) is `embodia.policies.wire`.

The conversation: the server sends its metadata on connect; then each request is one observation
map (see `embodia.agent.serving.server` for its keys) answered by ``{"actions": float32[H, D], "server_timing": ...}``,
or a control map ``{"__ctrl__": "episode_end", "__success__": bool}`` answered by ``{"__ack__": ...}``.
A refused request is answered by ``{"error": "..."}``. Every wait has a timeout: a server that goes
away or stops answering raises `PolicyServerError` instead of hanging.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import connect

from embodia.devices import Embodiment, Observation
from embodia.policies.base import Policy
from embodia.policies.wire import packb, unpackb

DEFAULT_KEY_ENV = "EMBODIA_API_KEY"
MEMORY_TOKEN_ENV = "EMBODIA_MEMORY_TOKEN"     # what a server with a memory needs for an outcome


class PolicyServerError(ValueError):
    """The policy server cannot be used: unreachable, refused the key, closed, silent, or refused the
    request (the message says which, and names the URL)."""


# -- the client -------------------------------------------------------------------------------------
class WebsocketPolicy(Policy):
    """The policy behind ``url`` (``ws://host:port`` or ``wss://``), one connection per instance.

    ``reset(seed)`` starts a server-side episode whose sampler is seeded with ``seed``, so a remote
    run reproduces an in-process one. The executed steps the loop reports through ``after_step`` are
    sent with ``end_episode`` when the server keeps a success memory. The API key is read from
    ``api_key_env`` (unset: none is sent) and sent as ``Authorization: Api-Key <key>``.
    """
    step_images = False     # after_step keeps the state and the action (what end_episode sends)

    def __init__(self, url: str, *, embodiment: Embodiment | None = None, api_key_env: str | None = DEFAULT_KEY_ENV,
                 timeout_s: float = 30.0, connect_timeout_s: float = 10.0):
        if not url.startswith(("ws://", "wss://")):
            raise ValueError(f"remote policy URL must start with ws:// or wss://, got {url!r}")
        if "@" in urlsplit(url).netloc:       # ws://allowed@other/ connects to other, with the key
            raise ValueError(f"remote policy URL {url!r} carries user-info (a name before '@'): "
                             f"give the server's host and port only")
        self.url, self.api_key_env = url, api_key_env
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self.embodiment = embodiment
        self._ws = None
        self._norms = None
        self.last_noise = None
        self.process = None        # a server this policy started (the LeRobot side), stopped by close()
        self.metadata: dict = self._connect()
        self.reset(None)

    @property
    def steerable(self) -> bool:
        """The server announces steering with a prior (the LeRobot side does): the success memory can
        set where its flow starts (`steer_chunk`). A server that takes only the noise (openpi's) is not."""
        steering = getattr(self, "metadata", {}).get("steering")
        return isinstance(steering, dict) and "prior" in steering.get("fields", ["noise", "prior", "t0"])

    @property
    def horizon(self) -> int | None:
        h = getattr(self, "metadata", {}).get("action_horizon")
        return h if isinstance(h, int) and not isinstance(h, bool) and h > 0 else None

    @property
    def steps(self) -> int | None:
        """The served flow's Euler steps (where it announces steering)."""
        return self.metadata["steering"].get("steps") if self.steerable else None

    memory_settings: dict = {}      # a served policy brings no memory.json: the memory's defaults
    origin: str | None = None       # how it was reached, where that is worth saying (lerobot:)

    @property
    def exec_horizon(self) -> int | None:
        """The served policy's decision rate: the server takes that many actions of each chunk as run."""
        h = getattr(self, "metadata", {}).get("exec_horizon")
        return h if isinstance(h, int) and not isinstance(h, bool) and h > 0 else None

    def bind(self, embodiment: Embodiment) -> "WebsocketPolicy":
        """Drive ``embodiment``; the server must serve the same body."""
        served = self.metadata.get("embodiment")
        if served is not None and served != embodiment.name:
            self.close()
            raise PolicyServerError(f"{self.url} serves embodiment {served!r}, not {embodiment.name!r}")
        dims = (self.metadata.get("state_dim"), self.metadata.get("action_dim"))
        if served is None and dims != (embodiment.state_dim, embodiment.action_dim):    # a body it was not told
            self.close()
            raise PolicyServerError(f"{self.url} serves state {dims[0]} / action {dims[1]} numbers; "
                                    f"{embodiment.name!r} has {embodiment.state_dim} / {embodiment.action_dim}")
        self.embodiment = embodiment
        return self

    # -- Policy protocol ----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        self._begin = {"reset": True} | ({} if seed is None else {"seed": int(seed)})   # sent with the next act
        self._states: list[np.ndarray] = []
        self._actions: list[np.ndarray] = []
        self._timing: list[dict] = []
        self._info: dict = {}

    def act(self, obs: Observation, instruction: str) -> np.ndarray:
        return self._decide({**obs.features(), "prompt": instruction})

    def steer_chunk(self, obs: Observation, instruction: str, prior, tau0: float) -> np.ndarray:
        """A chunk whose flow starts at ``tau0`` (embodia's time: 0 noise, 1 data) from the noise and
        ``prior`` (normalized by `body_norms`): sent as the prior in the body's units with the
        server's ``t0 = 1 - tau0`` (LeRobot's and openpi's time: 1 noise, 0 data)."""
        if not self.steerable:
            raise PolicyServerError(f"{self.url} does not announce steering")
        units = np.asarray(self.body_norms()["action"].unnormalize(np.asarray(prior, np.float64)), np.float32)
        return self._decide({**obs.features(), "prompt": instruction, "prior": units, "t0": float(1.0 - tau0)})

    def body_norms(self) -> dict:
        """The normalizers the server announces for its memory keys and chunks (its own statistics)."""
        from embodia.action_heads.normalize import QuantileNormalizer
        if not self.steerable:
            raise PolicyServerError(f"{self.url} does not announce steering")
        if self._norms is None:
            norm = self.metadata["steering"].get("normalization") or {}
            try:
                self._norms = {k: QuantileNormalizer.from_dict(norm[k]) for k in ("state", "action")}
            except (KeyError, TypeError, ValueError) as e:
                raise PolicyServerError(f"{self.url} announces steering without usable normalization ({e})") from None
        return self._norms

    def blend(self, chunk: np.ndarray) -> np.ndarray:
        return chunk

    def _decide(self, request: dict) -> np.ndarray:
        reply = self._call({**request, **self._begin})
        self._begin = {}
        actions = reply.get("actions")
        d = self.embodiment.action_dim if self.embodiment else None
        if not isinstance(actions, np.ndarray) or actions.ndim != 2 or (d is not None and actions.shape[1] != d):
            raise PolicyServerError(f"{self.url} answered actions "
                                    f"{getattr(actions, 'shape', type(actions).__name__)}, expected [H, {d}]")
        self._timing.append(reply.get("server_timing") or {})
        self._info = reply.get("policy_info") or {}
        noise = reply.get("noise")
        self.last_noise = noise if isinstance(noise, np.ndarray) else None     # what the flow started from
        return actions.astype(np.float32, copy=False)

    def after_step(self, obs: Observation, action) -> None:
        self._states.append(np.asarray(obs.state))
        self._actions.append(np.asarray(action, np.float32))

    def end_episode(self, success: bool) -> None:
        """Tell the server the episode ended; where it keeps a memory open to writes, with the outcome,
        the executed steps and the memory token from ``$EMBODIA_MEMORY_TOKEN``."""
        msg = {"__ctrl__": "episode_end"}
        token = os.environ.get(MEMORY_TOKEN_ENV)
        # the outcome feeds the server's memory: only where it takes writes, with its token
        if self.metadata.get("memory_writes", "token" if self.metadata.get("memory") else "off") == "token":
            msg |= {"__success__": bool(success)} | ({"__token__": token} if token else {})
            if self._actions:     # what ran, instead of the server's guess
                msg |= {"observation.state": np.stack(self._states), "action": np.stack(self._actions)}
        self._call(msg)

    def info(self) -> dict:
        out = dict(self._info)
        for k in ("infer_ms", "queue_ms"):
            ms = [t[k] for t in self._timing if isinstance(t.get(k), (int, float))]
            if ms:
                out[f"server_{k}"] = float(np.mean(ms))
        return out

    def close(self) -> None:
        ws, self._ws = self._ws, None
        try:
            if ws is not None:
                ws.close()
        finally:
            process, self.process = self.process, None
            if process is not None:
                process.stop(keep_log=False)

    # -- the connection -----------------------------------------------------------------------------
    def _connect(self) -> dict:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        try:
            # entering connect() connects, in every websockets version (17 warns about a bare call)
            self._ws = connect(self.url, open_timeout=self.connect_timeout_s, close_timeout=2, compression=None,
                               max_size=2 ** 24,
                               additional_headers={"Authorization": f"Api-Key {key}"} if key else None).__enter__()
        except InvalidStatus as e:
            code = e.response.status_code
            hint = (f"; the key comes from ${self.api_key_env}, which is {'set' if key else 'unset'}"
                    if code == 401 and self.api_key_env else "")
            raise PolicyServerError(f"{self.url} refused the connection: HTTP {code}{hint}") from None
        except (OSError, TimeoutError, WebSocketException) as e:
            raise PolicyServerError(f"cannot reach the policy server {self.url} ({type(e).__name__}: {e}); "
                                    f"is `embodia serve` running there?") from None
        return self._recv()

    def _call(self, msg: dict) -> dict:
        if self._ws is None:        # dropped after an error: reconnect once, at the next request
            self.metadata = self._connect()
        try:
            self._ws.send(packb(msg))
        except (ConnectionClosed, OSError) as e:
            self.close()
            raise PolicyServerError(f"the policy server {self.url} went away ({e})") from None
        reply = self._recv()
        if "error" in reply:
            raise PolicyServerError(f"{self.url} refused the request: {reply['error']}")
        return reply

    def _recv(self) -> dict:
        try:
            raw = self._ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            self.close()
            raise PolicyServerError(f"{self.url} sent no reply within {self.timeout_s:g} s; "
                                    f"the connection was closed") from None
        except (ConnectionClosed, OSError) as e:
            self.close()
            raise PolicyServerError(f"the policy server {self.url} went away ({e})") from None
        if isinstance(raw, str):        # openpi's servers send a traceback as text, then close
            self.close()
            raise PolicyServerError(f"{self.url} failed: {raw.strip()[-2000:]}")
        try:
            reply = unpackb(raw)
        except ValueError as e:
            raise PolicyServerError(f"{self.url}: {e}") from None
        if not isinstance(reply, dict):
            raise PolicyServerError(f"{self.url} answered a {type(reply).__name__}, not a map")
        return reply
