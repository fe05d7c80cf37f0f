"""The MCP server's device sessions (`embodia.agent.serving.mcp`): what a client may take
(`McpLimits`; what it may name is `embodia.agent.serving.allowed`), one device opened for one
client (`DeviceSession`, its episode the loop's own `EpisodeRun`), the sessions of all clients
(`Hub`), and what crosses the wire about a device (an action validated as model replies are, an
observation as MCP content). Nothing here knows the MCP tools; `embodia.agent.serving.mcp_tools`
calls it."""

import asyncio
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
from mcp.types import ImageContent, TextContent

from embodia.agent.loop.core import EpisodeRun, episode_limit
from embodia.agent.loop.episode import pass_gate
from embodia.agent.loop.safety import SafetyGate
from embodia.devices import ActionError, GuiAction, check_chunk
from embodia.policies.base import Policy, as_policy
from embodia.shared.images import png_base64

MAX_CHUNK_ROWS = 1024
IDLE_CLOSE_S = 300.0             # a device unused this long (stateless HTTP: its client left) is closed and saved


class SessionError(ValueError):
    """A tool call the session cannot serve (no device open, unknown session, a limit reached...)."""


@dataclass(frozen=True)
class McpLimits:
    """What clients may take of this machine. A device holds a simulator or a screen grabber and
    its renderer (60 gui-sim devices took 220 MB in 2.4 s; a 4096x4096 camera ~290 MB each), so
    devices are counted per server and per client (its address over HTTP), camera sizes are capped
    and episodes have a length."""
    max_devices: int = 8
    max_devices_per_client: int = 2
    max_pixels: int = 1024 * 1024      # per camera image asked for with open_device's size
    max_steps: int = 10_000            # per run_task episode
    idle_close_s: float = IDLE_CLOSE_S


# -- one device session ----------------------------------------------------------------------------
class ClientPolicy(Policy):
    """The MCP client, seen by the loop as the policy: it decides outside (each ``act`` tool call
    brings its action), so nothing here is asked to act."""


class DeviceSession:
    """A device opened for one client, with its recorder and the episode of its manual steps: an
    `EpisodeRun`, the loop's own step (act, observe, record, success), begun at the client's first
    step and going on from the observation the device was left in.

    Every call on the device runs on the session's own thread (`executor`): a MuJoCo EGL context,
    like most GUI toolkits, belongs to the thread that made it."""

    def __init__(self, key: str, uri: str, device, record_dir: Path | None, seed: int | None,
                 executor: ThreadPoolExecutor):
        self.key, self.uri, self.device, self.executor = key, uri, device, executor
        self.lock = threading.Lock()          # held while a call drives the device (idle reaping skips it)
        self.seed = seed
        self.obs = device.reset(seed)
        self.record_dir = record_dir
        self.recorder = _recorder(record_dir, device) if record_dir else None
        self.run: EpisodeRun | None = None    # the client's episode, from its first step
        self.steps = 0                        # steps the client took in this session, every episode
        self.used = time.monotonic()

    def observe(self) -> "Any":
        self.obs = self.device.observe()
        return self.obs

    def _episode(self) -> EpisodeRun:
        if self.run is None:
            self.run = EpisodeRun(self.device, ClientPolicy(), seed=self.seed, recorder=self.recorder,
                                  episode_meta={"device": self.uri, "policy": "mcp"}, obs=self.obs)
        self.run.obs = self.obs       # a step starts from what the client last observed
        return self.run

    def act(self, action, gate: SafetyGate) -> dict:
        """Run a validated action (a GuiAction, or a [H, D] chunk) through the loop's step; the gate's
        refusal is recorded and raised (RiskRefused), and the episode goes on."""
        run = self._episode()
        extra = None
        if isinstance(action, GuiAction):
            extra = pass_gate(run, gate, action, None, 0.0)
            rows = [action]
        else:
            rows = list(action)
        for a in rows:        # a chunk runs to its end: the client chose every row
            run.execute(a, extra=extra)
            self.obs = run.obs
            self.steps += 1
        out = {"executed": len(rows), "steps": self.steps}
        if extra:
            out["safety"] = extra["safety"]
        if "success" in self.device.capabilities:
            out["success"] = bool(self.device.success())
        if self.device.done():
            out["done"] = True
        return out

    def end_episode(self) -> int | None:
        """Save the manual episode (if any step was recorded); returns its index in the recording."""
        run, self.run = self.run, None
        if run is None or run.ep is None:
            return None
        run.obs = self.obs
        return run.finish(run.timing()).episode_index

    def close(self) -> dict:
        index = None
        try:
            index = self.end_episode()
        finally:
            try:
                if self.recorder is not None:
                    self.recorder.close()
            finally:
                self.device.close()
        return {"closed": self.uri, "saved_episode": index,
                "record_dir": str(self.record_dir) if self.record_dir else None}


def _recorder(path: Path, device):
    from embodia.agent.recording.recorder import open_recorder
    return open_recorder(path, device.embodiment)


# -- validation: the same rules as model replies ---------------------------------------------------
def parse_action(action: Union[str, dict, list], device) -> "GuiAction | np.ndarray":
    """A tool's ``action`` argument -> a GuiAction (GUI bodies) or a checked float32[H, D] chunk.

    >>> from embodia.devices import open_device
    >>> with open_device("gui-sim:settings") as d:
    ...     parse_action('{"type": "click", "point": [500, 500]}', d).type
    'click'
    """
    emb = device.embodiment
    if emb.is_gui:
        from embodia.policies.gui.reply import parse_reply
        from embodia.policies.gui.reply_common import ReplyParseError
        if isinstance(action, dict):
            # the object form is read as the reply parser reads GuiAction.to_dict() in a reply, so it
            # meets the same limits (length, NUL characters, key counts): one set of rules for both
            try:
                action = json.dumps(action, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ActionError(f"invalid GUI action: {e}") from None
        if not isinstance(action, str):
            raise ActionError(f"{emb.name} takes a GUI action (an object or a reply text), not {type(action).__name__}")
        try:
            return parse_reply(action, screen=device.observe().screen)
        except ReplyParseError as e:
            raise ActionError(f"invalid GUI action: {e}") from None
    if isinstance(action, str):
        try:
            action = json.loads(action)
        except ValueError:
            raise ActionError(f"{emb.name} takes a continuous action chunk [[...], ...], got text") from None
    if not isinstance(action, list) or len(action) > MAX_CHUNK_ROWS:
        raise ActionError(f"{emb.name} takes a list of at most {MAX_CHUNK_ROWS} action rows of "
                          f"{emb.action_dim} numbers")
    try:
        return check_chunk(action, emb)
    except (TypeError, ValueError) as e:
        raise ActionError(str(e)) from None


# -- content ---------------------------------------------------------------------------------------

def observation_content(session: DeviceSession, obs) -> list:
    """The observation as MCP content: each camera/screen as an image, then one JSON text block
    (instruction, embodiment prompt, screen, UI tree, state)."""
    dev = session.device
    facts = {"session": session.key, "device": session.uri, "instruction": dev.instruction or "",
             "embodiment_prompt": dev.embodiment.prompt(), "steps": session.steps}
    if obs.screen is not None:
        facts["screen"] = {"width": obs.screen.width, "height": obs.screen.height,
                           "pixel_ratio": obs.screen.pixel_ratio, "coords": "0..1000"}
    if obs.ui_tree is not None:
        facts["ui_tree"] = obs.ui_tree
    if obs.state is not None and len(obs.state):
        facts["state"] = np.asarray(obs.state, np.float64).round(5).tolist()
    blocks = [ImageContent(type="image", data=png_base64(img), mime_type="image/png") for img in obs.images.values()]
    return blocks + [TextContent(type="text", text=json.dumps(facts, default=str))]


# -- the sessions of all clients -------------------------------------------------------------------
class Hub:
    """Device sessions by client key; closing saves each episode."""

    def __init__(self, record_root: Path | None, stateful: bool, limits: McpLimits = McpLimits()):
        self.record_root = Path(record_root) if record_root else None
        self.stateful = stateful          # stdio: the process serves exactly one client
        self.limits = limits
        self.sessions: dict[str, DeviceSession] = {}
        self.clients: dict[str, str] = {}  # session key -> its client's address, opened or being opened
        self.lock = threading.Lock()

    def key(self, ctx, session: str | None, *, new: bool = False) -> str:
        if session:
            return session
        hdr = (getattr(ctx, "headers", None) or {}).get("mcp-session-id")
        if hdr:
            return hdr
        if self.stateful:
            return "stdio"
        if new:
            return uuid.uuid4().hex[:16]
        raise SessionError("this connection has no MCP session (stateless HTTP): pass the `session` "
                           "that open_device returned")

    def get(self, key: str) -> DeviceSession:
        with self.lock:
            s = self.sessions.get(key)
        if s is None:
            raise SessionError("no device is open in this session; call open_device first")
        s.used = time.monotonic()
        return s

    def _check_asked(self, uri: str, size) -> None:
        """SessionError for a camera size (open_device's ``size``, the URI's ``size=``) over the pixel
        cap, or an episode length (the URI's ``max_steps=``) over the step cap."""
        from embodia.devices.registry import parse_uri
        lim, query = self.limits, parse_uri(uri)[2]
        for asked in (size, query.get("size")):
            if asked is None:
                continue
            w, _, h = str(asked).strip().lower().partition("x")
            try:
                pixels = int(w) * int(h or w)
            except ValueError:
                raise SessionError(f"size {asked!r} must be WxH, e.g. 96x96") from None
            if pixels > lim.max_pixels:
                raise SessionError(f"size {asked}: {pixels} pixels per image, this server allows {lim.max_pixels}")
        steps = query.get("max_steps")
        if steps is not None and not (steps.strip().isdigit() and int(steps) <= lim.max_steps):
            raise SessionError(f"max_steps={steps} in the URI: this server allows 1..{lim.max_steps}")

    def _reserve(self, key: str, client: str, uri: str, size) -> None:
        """Count the device against the server's and the client's caps before it is built (two opens
        at once cannot both take the last place); SessionError when a cap or the size is exceeded."""
        lim = self.limits
        self._check_asked(uri, size)
        with self.lock:
            if key in self.clients:
                what = self.sessions[key].uri if key in self.sessions else "a device"
                raise SessionError(f"this session already has {what} open; close_device first")
            if len(self.clients) >= lim.max_devices:
                raise SessionError(f"this server has {len(self.clients)} devices open, its limit; close one or "
                                   f"retry later")
            if sum(c == client for c in self.clients.values()) >= lim.max_devices_per_client:
                raise SessionError(f"this client has {lim.max_devices_per_client} devices open, its limit; "
                                   f"close_device one first")
            self.clients[key] = client

    def open(self, key: str, uri: str, *, shift=None, size=None, seed=None, client: str = "local") -> DeviceSession:
        self._reserve(key, client, uri, size)
        try:
            s = self._build(key, uri, shift, size, seed)
        except BaseException:
            with self.lock:
                self.clients.pop(key, None)
            raise
        with self.lock:
            self.sessions[key] = s
        return s

    def _build(self, key: str, uri: str, shift, size, seed) -> DeviceSession:
        from embodia.agent.loop.factory import make_device
        rec = None
        if self.record_root is not None:
            slug = "".join(c if c.isalnum() or c in "._-" else "-" for c in uri).strip("-")
            rec = self.record_root / f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        executor = ThreadPoolExecutor(1, thread_name_prefix="embodia-device")

        def build():
            device = make_device(uri, shift=shift, size=size)
            try:
                return DeviceSession(key, uri, device, rec, seed, executor)
            except BaseException:
                device.close()
                raise
        try:
            return executor.submit(build).result()
        except BaseException:
            executor.shutdown(wait=False)
            raise

    def close(self, key: str) -> dict:
        with self.lock:
            s = self.sessions.pop(key, None)
            if s is not None:
                self.clients.pop(key, None)
        if s is None:
            raise SessionError("no device is open in this session")

        def close():
            with s.lock:
                return s.close()
        try:
            return s.executor.submit(close).result()
        finally:
            s.executor.shutdown(wait=False)

    def close_idle(self, idle_s: float) -> list[str]:
        now = time.monotonic()
        with self.lock:
            stale = [k for k, s in self.sessions.items() if now - s.used > idle_s and not s.lock.locked()]
        for k in stale:
            try:
                self.close(k)
            except SessionError:
                pass
        return stale

    def close_all(self) -> None:
        for k in list(self.sessions):
            try:
                self.close(k)
            except SessionError:
                pass


async def on_device(s: DeviceSession, fn):
    """Run ``fn()`` on the session's device thread and wait for it without blocking the server."""
    return await asyncio.wrap_future(s.executor.submit(fn))



def run_task_episodes(s: DeviceSession, policy_spec, instruction, episodes, seed, max_steps, memory, gate, stop,
                      progress, credential: bool = True) -> dict:
    """Episodes of a policy on the session's device (the manual episode is saved first).
    ``credential``: whether the policy may send the operator's API key (False: a server the operator
    did not name)."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.factory import make_policy, with_memory
    s.end_episode()
    # an empty key variable sends no key (None or the default would name $EMBODIA_API_KEY)
    pol = make_policy(policy_spec, s.device, **({} if credential else {"api_key_env": ""}))
    steered = with_memory(pol, memory, s.uri, s.device) if memory else None
    seed = s.seed if seed is None else seed
    limit = episode_limit(s.device, max_steps)
    rows = []
    try:
        for i in range(episodes):
            def on_step(step, i=i):
                progress(i * limit + step.t + 1, episodes * limit, f"episode {i + 1}/{episodes}, step {step.t + 1}")
                return stop.is_set()
            r = run_episode(s.device, steered or pol, seed=None if seed is None else seed + i,
                            instruction=instruction, max_steps=max_steps, recorder=s.recorder,
                            episode_meta={"device": s.uri, "policy": policy_spec}, gate=gate, on_step=on_step)
            rows.append({"seed": r.seed, "success": r.success, "steps": r.steps, "error": r.error,
                         "instruction": r.instruction, "episode_index": r.episode_index,
                         "policy_ms": round(r.timing["policy_s"] * 1e3, 1),
                         "device_ms": round(r.timing["device_s"] * 1e3, 1)})
            if stop.is_set():
                break
    finally:
        if steered is not None:
            steered.memory.save(memory)
        as_policy(pol).close()
    s.obs = s.device.observe()
    verified = [r for r in rows if r["success"] is not None]
    return {"episodes": rows, "successes": sum(bool(r["success"]) for r in rows),
            "verified": len(verified), "cancelled": stop.is_set(),
            "record_dir": str(s.record_dir) if s.record_dir else None}


def load_memory_stats(path: Path) -> dict:
    """`stats()` of a memory directory, robot (SuccessMemory) or screen (ScreenMemory) alike, told
    apart by the one rule every reader uses (`embodia.memory.saved`)."""
    from embodia.memory.saved import open_memory
    return open_memory(path).stats()

