"""`embodia mcp`: devices and the agent as MCP tools (the official `mcp` SDK; stdio or streamable HTTP).

Tools: ``list_devices``, ``open_device``, ``observe``, ``act``, ``run_task``, ``memory_stats``,
``close_device``. Each client gets one device session: on stdio the process serves one client; over
streamable HTTP the MCP session id names it, and a stateless connection (no session id; protocol
2026-07-28) passes back the ``session`` that ``open_device`` returned. Everything the client does is
recorded (a GUI step log or a LeRobot dataset under ``record_root``); ``close_device``, the client
going away (stdio EOF, an HTTP session's end) or a device left unused (stateless HTTP) closes the
device and saves its episode.

Actions are validated exactly as model replies are: a ``GuiAction`` dict, a model reply in any
form `embodia.policies.gui.reply.parse_reply` reads, or a continuous chunk checked by
`check_chunk`; an invalid one is a tool error and nothing runs. GUI actions then pass the safety
gate (`embodia.agent.loop.safety`): a risky one asks the client (MCP elicitation) when it can
answer, and is refused otherwise. The gate here asks on simulators too: the client driving a
session may not know which body it is. ``allow`` is the unattended allow-list.

>>> server = build_server(allow=(), record_root="runs/mcp")       # doctest: +SKIP
>>> server.run("stdio")                                            # doctest: +SKIP
"""

import asyncio
import functools
import inspect
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional, Union

import anyio
import anyio.lowlevel
import numpy as np
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ImageContent, TextContent

from embodia.agent.loop.core import EpisodeRun, episode_limit
from embodia.agent.loop.episode import pass_gate
from embodia.agent.loop.safety import RiskRefused, SafetyGate, classify
from embodia.agent.recording.files import resolved_inside
from embodia.agent.serving.access import BearerAuth, is_loopback, is_wildcard, require_credential
from embodia.devices import ActionError, GuiAction, check_chunk
from embodia.memory.png import png_base64
from embodia.policies.base import Policy, as_policy

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


@dataclass(frozen=True)
class Allowed:
    """What a client may name beyond devices, as the operator set it: policy specs starting with one of
    ``policies`` (e.g. ``remote:ws://10.0.0.5:8000``), checkpoints and replays under ``checkpoint_roots``,
    memory folders under ``memory_roots``. Everything else a client names is refused: the server
    would otherwise connect to any address (``remote:``), or create folders anywhere it can write.
    Paths are compared resolved (``..`` and symlinks followed)."""
    policies: tuple[str, ...] = ()
    checkpoint_roots: tuple[str, ...] = ()
    memory_roots: tuple[str, ...] = ()

    def policy(self, spec: str) -> None:
        """Raise SessionError unless a client may run ``spec``."""
        from embodia.agent.loop.factory import BUNDLED
        if spec in ("expert", "random") or spec in BUNDLED or any(spec.startswith(p) for p in self.policies if p):
            return
        if spec.startswith(("remote:", "openai:")):
            raise SessionError(f"policy {spec!r} is not allowed on this server (the operator allows more with "
                               f"--allow-policy)")
        path = spec.split(":", 1)[1].partition("#")[0] if spec.startswith(("actions:", "replay:", "hf:")) else spec
        if resolved_inside(path, self.checkpoint_roots) is None:
            raise SessionError(f"policy {spec!r}: {path} is not under the server's --checkpoint-root folders "
                               f"({', '.join(self.checkpoint_roots) or 'none set'})")

    def memory(self, path: str) -> str:
        """The resolved memory folder a client named; SessionError outside the roots or not a folder."""
        p = resolved_inside(path, self.memory_roots)
        if p is None:
            raise SessionError(f"memory {path}: not under the server's --memory-root folders "
                               f"({', '.join(self.memory_roots) or 'none set'})")
        if p.exists() and not p.is_dir():
            raise SessionError(f"memory {path}: exists and is not a folder")
        return str(p)




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
        from embodia.policies.gui.reply import ReplyParseError, parse_reply
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

    def _reserve(self, key: str, client: str, size) -> None:
        """Count the device against the server's and the client's caps before it is built (two opens
        at once cannot both take the last place); SessionError when a cap or the size is exceeded."""
        lim = self.limits
        if size is not None:
            from embodia.devices.mujoco import parse_size
            w, h = parse_size(size)
            if w * h > lim.max_pixels:
                raise SessionError(f"size {size}: {w * h} pixels per image, this server allows {lim.max_pixels}")
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
        self._reserve(key, client, size)
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


# -- asking the client -----------------------------------------------------------------------------
def _can_elicit(ctx) -> bool:
    caps = getattr(ctx, "client_capabilities", None)
    return bool(caps is not None and getattr(caps, "elicitation", None) is not None)


def _confirm_model():
    from pydantic import BaseModel, Field

    class Confirm(BaseModel):
        confirm: bool = Field(description="execute this risky action?")
    return Confirm


def _question(decision: dict) -> str:
    return (f"Risky action ({decision['risk']}): {decision['evidence']}. Action: "
            f"{json.dumps(decision['action'])}. Execute it?")


def _accepted(answer) -> bool:
    data = getattr(answer, "data", answer)       # AcceptedElicitation or the unwrapped model
    return getattr(answer, "action", "accept") == "accept" and bool(getattr(data, "confirm", False))


# -- the server --------------------------------------------------------------------------------------
INSTRUCTIONS = (
    "Drive embodia devices: open_device (e.g. gui-sim:settings, desktop:, android:<serial>, "
    "sim:twogap-push), observe, act (a GUI action object such as {\"type\": \"click\", \"point\": "
    "[x, y]} with x, y in 0..1000 of the screen, or a model reply; robots: a chunk [[...], ...]), "
    "run_task (a policy runs the episode), memory_stats, close_device.")


@dataclass(frozen=True)
class Setup:
    """What every tool reads: the device sessions, the operator's allow-lists and limits, the
    server's own memory and the model a client's confirmation comes back in."""
    hub: Hub
    allow: Any                 # the unattended allow-list of risk classes (SafetyGate)
    allowed: Allowed
    limits: McpLimits
    memory: Optional[str]
    confirm: Any

    def session(self, ctx, session: Optional[str]) -> DeviceSession:
        """The client's open session; a tool error naming what is missing."""
        try:
            return self.hub.get(self.hub.key(ctx, session))
        except SessionError as e:
            raise ToolError(str(e)) from None

    def memory_path(self, path: Optional[str]) -> Optional[str]:
        """The resolved memory folder a client named (None: none named); a tool error outside the roots."""
        if not path:
            return None
        try:
            return self.allowed.memory(path)
        except SessionError as e:
            raise ToolError(str(e)) from None


def build_server(*, allow=(), record_root: Optional[str] = "runs/mcp", memory: Optional[str] = None,
                 stateful: bool = True, limits: McpLimits = McpLimits(), allowed: Allowed = Allowed()):
    """The MCPServer with embodia's tools. ``stateful``: the transport serves one client (stdio);
    ``limits``: what clients may take; ``allowed``: what they may name beyond devices."""
    SafetyGate(allow)                      # an unknown class fails now, not at the first risky action
    if memory:                             # the operator's own memory is always allowed
        allowed = Allowed(allowed.policies, allowed.checkpoint_roots, (*allowed.memory_roots, memory))
    setup = Setup(Hub(record_root, stateful, limits), allow, allowed, limits, memory, _confirm_model())
    server = MCPServer("embodia", instructions=INSTRUCTIONS,
                       lifespan=_lifespan(setup.hub, stateful, limits.idle_close_s))
    server.hub = setup.hub
    for make in TOOLS:
        # every failure of a tool is a one-line tool error with its message
        server.tool()(_one_line_errors(make(setup)))
    return server


def _lifespan(hub: Hub, stateful: bool, idle_close_s: float):
    """The server's lifetime: over stateless HTTP a reaper closes devices left unused; at the end
    (the client left, Ctrl-C) every device is closed and its episode saved."""
    @asynccontextmanager
    async def lifespan(_server):
        async with anyio.create_task_group() as tg:
            async def reaper():
                while True:
                    await anyio.sleep(min(30.0, idle_close_s))
                    await anyio.to_thread.run_sync(hub.close_idle, idle_close_s)
            if not stateful:
                tg.start_soon(reaper)
            try:
                yield {"hub": hub}
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(hub.close_all)     # the client left: close and save
    return lifespan


def _close_with_connection(hub: Hub, ctx, key: str, explicit: Optional[str]) -> None:
    """An HTTP session's connection closing (the client's DELETE, the SDK's idle timeout) closes
    its device and saves the episode. The SDK (2.3) gives MCPServer tools no public handle on
    the connection's teardown stack, hence the guarded private attribute; without it, the idle
    reaper does the same later."""
    conn = getattr(getattr(ctx, "session", None), "_connection", None)
    stack = getattr(conn, "exit_stack", None)
    if explicit or stack is None or getattr(conn, "session_id", None) != key:
        return

    async def close():
        try:
            await anyio.to_thread.run_sync(hub.close, key)
        except SessionError:
            pass                    # closed by the client already
    stack.push_async_callback(close)


# -- the tools: each factory takes the Setup and returns the tool (its name and docstring are the
# tool's name and description)
def _tool_list_devices(setup: Setup):
    def list_devices() -> list[dict]:
        """Device schemes and the targets each can open (e.g. gui-sim apps, desktop displays, phones)."""
        from embodia.devices import available
        return [{"scheme": r["scheme"] + ":", "description": r["description"], "targets": r["targets"],
                 "error": r["error"]} for r in available()]
    return list_devices


def _tool_open_device(setup: Setup):
    hub = setup.hub

    async def open_device(uri: str, ctx: Context, seed: Optional[int] = None, shift: Optional[str] = None,
                          size: Optional[str] = None, session: Optional[str] = None) -> dict:
        """Open a device by URI for this client (one at a time) and reset it; returns its embodiment,
        the task instruction and the `session` (pass it back only on stateless HTTP connections)."""
        key = hub.key(ctx, session, new=True)
        client = _client_address(ctx)
        try:
            s = await anyio.to_thread.run_sync(lambda: hub.open(key, uri, shift=shift, size=size, seed=seed,
                                                                client=client))
        except (SessionError, ValueError, FileNotFoundError, ImportError, OSError, RuntimeError) as e:
            raise ToolError(f"cannot open device {uri!r}: {e}") from None
        _close_with_connection(hub, ctx, key, session)
        return {"session": key, "device": uri, "embodiment": s.device.embodiment.prompt(),
                "instruction": s.device.instruction or "",
                "capabilities": sorted(s.device.capabilities),
                "record_dir": str(s.record_dir) if s.record_dir else None}
    return open_device


def _tool_observe(setup: Setup):
    async def observe(ctx: Context, session: Optional[str] = None) -> list:
        """The current observation: the screen or camera images, then the UI tree, the embodiment
        prompt and the instruction as JSON."""
        s = setup.session(ctx, session)

        def work():
            with s.lock:
                return observation_content(s, s.observe())
        return await on_device(s, work)
    return observe


def _asker(setup: Setup):
    """The resolver of ``act``'s ``answer``: the gate's question for a risky GUI action, when the
    client can answer one (None otherwise: the tool body then decides, and reports what is wrong)."""
    async def ask(action: Union[str, dict, list], ctx: Context, session: Optional[str] = None):
        """The gate's question for a risky GUI action, when the client can answer one."""
        if not _can_elicit(ctx):
            return None
        try:
            s = setup.hub.get(setup.hub.key(ctx, session))
            a = parse_action(action, s.device)
        except (SessionError, ActionError):
            return None                       # the tool body reports it
        if not isinstance(a, GuiAction):
            return None
        risk, evidence = classify(a, s.obs.ui_tree, s.obs.screen)
        if risk is None or risk in SafetyGate(setup.allow).allow:
            return None
        return Elicit(_question({"risk": risk, "evidence": evidence, "action": a.to_dict()}), setup.confirm)
    return ask


def _tool_act(setup: Setup):
    async def act(action: Union[dict, str, list[list[float]]], ctx: Context, session: Optional[str] = None,
                  answer: Annotated[Optional[Any], Resolve(_asker(setup))] = None) -> dict:
        """Execute one action. GUI bodies: a GuiAction object ({"type": "click", "point": [x, y]},
        0..1000 of the screen; or "element": <ui_tree index>) or a model reply text in any form
        embodia parses; robots: a chunk [[a1..aD], ...] within the channel limits. Invalid actions
        are refused unexecuted; risky ones need the client's confirmation."""
        s = setup.session(ctx, session)
        try:
            a = parse_action(action, s.device)
        except ActionError as e:
            raise ToolError(f"refused, nothing executed: {e}") from None
        # the client's answer decides ("user"); no answer (it cannot elicit) is No ("default-no")
        gate = SafetyGate(setup.allow, confirm=(lambda d: _accepted(answer)) if answer is not None else None)

        def work():
            with s.lock:
                return s.act(a, gate)
        try:
            return await on_device(s, work)
        except RiskRefused as e:
            raise ToolError(f"refused, nothing executed: {e}") from None
        except (ActionError, ValueError) as e:
            raise ToolError(f"the device refused the action: {e}") from None
    return act


def _check_run_task(setup: Setup, policy: str, episodes: int, max_steps: Optional[int]) -> None:
    """Tool errors for what a client may not ask of ``run_task``."""
    if not 1 <= episodes <= 1000:
        raise ToolError("episodes must be in 1..1000")
    if max_steps is not None and not 1 <= max_steps <= setup.limits.max_steps:
        raise ToolError(f"max_steps must be in 1..{setup.limits.max_steps} (or left out: the task's own length)")
    try:
        setup.allowed.policy(policy)
    except SessionError as e:
        raise ToolError(str(e)) from None


def _client_callbacks(ctx, confirm_model):
    """(confirm, progress) for the device thread: the gate's question to the client (No when it
    cannot answer) and progress notifications, both called back into this event loop."""
    can_ask = _can_elicit(ctx)
    token = anyio.lowlevel.current_token()

    def confirm(decision: dict) -> bool:
        if not can_ask:
            return False
        try:
            ans = anyio.from_thread.run(ctx.elicit, _question(decision), confirm_model, token=token)
        except Exception:        # no back-channel on this connection (2026-07-28), or it broke: No
            return False
        return _accepted(ans)

    def progress(p, total, msg):
        try:
            anyio.from_thread.run(ctx.report_progress, p, total, msg, token=token)
        except Exception:        # a client that went away does not stop the episode; cancel does
            pass
    return confirm, progress


async def _until_done_or_cancelled(s: DeviceSession, work, stop: threading.Event):
    """``work()`` on the device thread; a cancelled call sets ``stop`` (the loop stops at its next
    step and saves the episode) and waits for the work to end before the cancellation goes on."""
    done = threading.Event()

    def run():
        try:
            return work()
        finally:
            done.set()
    try:
        return await on_device(s, run)
    except anyio.get_cancelled_exc_class():
        stop.set()
        with anyio.CancelScope(shield=True):
            while not done.is_set():
                await anyio.sleep(0.02)
        raise


def _tool_run_task(setup: Setup):
    async def run_task(ctx: Context, policy: str = "expert", instruction: Optional[str] = None,
                       episodes: int = 1, seed: Optional[int] = None, max_steps: Optional[int] = None,
                       memory: Optional[str] = None, session: Optional[str] = None) -> dict:
        """Let a policy run episodes on the open device (expert, random, embodia-tiny; checkpoints under
        the server's --checkpoint-root and specs it allows with --allow-policy), optionally steered by
        a success memory folder under its --memory-root that learns from each verified success;
        max_steps 1..10000 per episode. Progress comes as progress notifications; cancelling stops the episode
        and saves it."""
        s = setup.session(ctx, session)
        _check_run_task(setup, policy, episodes, max_steps)
        memory = setup.memory_path(memory) or setup.memory
        confirm, progress = _client_callbacks(ctx, setup.confirm)
        stop = threading.Event()

        def work():
            with s.lock:
                return _run_task(s, policy, instruction, episodes, seed, max_steps, memory,
                                 SafetyGate(setup.allow, confirm=confirm), stop, progress)
        try:
            return await _until_done_or_cancelled(s, work, stop)
        except (ValueError, FileNotFoundError) as e:
            raise ToolError(str(e)) from None
    return run_task


def _tool_memory_stats(setup: Setup):
    def memory_stats(path: Optional[str] = None) -> dict:
        """Entries, episodes, merges and deletions per namespace of a success-memory directory
        (default: the server's --memory)."""
        path = path or setup.memory
        if not path:
            raise ToolError("no memory directory given (and the server has no --memory)")
        shown, path = path, setup.memory_path(path)
        try:
            return {"path": shown, "namespaces": load_memory_stats(Path(path))}
        except (OSError, ValueError, KeyError) as e:
            raise ToolError(f"cannot read memory {path}: {e}") from None
    return memory_stats


def _tool_close_device(setup: Setup):
    async def close_device(ctx: Context, session: Optional[str] = None) -> dict:
        """Close this session's device; its episode is saved."""
        try:
            key = setup.hub.key(ctx, session)
            return await anyio.to_thread.run_sync(setup.hub.close, key)
        except SessionError as e:
            raise ToolError(str(e)) from None
    return close_device


#: the tools, in the order a client lists them
TOOLS = (_tool_list_devices, _tool_open_device, _tool_observe, _tool_act, _tool_run_task, _tool_memory_stats,
         _tool_close_device)


def _one_line_errors(fn):
    """``fn`` with every exception turned into a ToolError that carries its message: the client
    learns what went wrong, and the log gets the SDK's one line instead of a traceback (a bare
    FileExistsError reached the client as an empty error and the log as 100 lines)."""
    def error(e: Exception) -> ToolError:
        if isinstance(e, ToolError):
            return e
        text = " ".join(str(e).split()) or "no message"
        return ToolError(f"{fn.__name__} failed: {type(e).__name__}: {text}")

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapped(*args, **kwargs):
            try:
                return await fn(*args, **kwargs)
            except Exception as e:          # noqa: BLE001 - reported to the client, in one line
                raise error(e) from None
    else:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:          # noqa: BLE001 - reported to the client, in one line
                raise error(e) from None
    return wrapped


def _client_address(ctx) -> str:
    """The client's network address (HTTP), or "local" (stdio: the process serves its one client)."""
    try:
        request = ctx.request_context.request
    except (AttributeError, ValueError):
        return "local"
    return getattr(getattr(request, "client", None), "host", None) or "local"


def _run_task(s: DeviceSession, policy_spec, instruction, episodes, seed, max_steps, memory, gate, stop,
              progress) -> dict:
    """Episodes of a policy on the session's device (the manual episode is saved first)."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.factory import make_policy, with_memory
    s.end_episode()
    pol = make_policy(policy_spec, s.device)
    steered = with_memory(pol, memory, s.uri, s.device) if memory else None
    seed = s.seed if seed is None else seed
    limit = episode_limit(s.device, max_steps)
    rows = []
    try:
        for i in range(episodes):
            def on_step(t, obs, action, next_obs, i=i):
                progress(i * limit + t + 1, episodes * limit, f"episode {i + 1}/{episodes}, step {t + 1}")
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


def serve(*, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765, allow=(),
          record_root: Optional[str] = "runs/mcp", memory: Optional[str] = None, token: Optional[str] = None,
          allow_hosts=(), allow_origins=(), limits: McpLimits = McpLimits(), allowed: Allowed = Allowed()) -> None:
    """Run the server until the client leaves (stdio) or Ctrl-C (HTTP); every device is closed and saved.
    Over HTTP, ``token`` (required beyond loopback) is the bearer token every request must carry."""
    if transport not in ("stdio", "http"):
        raise ValueError(f"transport must be stdio or http, got {transport!r}")
    if transport == "http":
        require_credential(host, token, "a bearer token in $EMBODIA_MCP_TOKEN, --token-env or --token-file")
        security = http_security(host, allow_hosts, allow_origins)
    server = build_server(allow=allow, record_root=record_root, memory=memory, stateful=transport == "stdio",
                          limits=limits, allowed=allowed)
    if transport == "stdio":
        server.run("stdio")
        return
    import uvicorn
    app = server.streamable_http_app(transport_security=security, host=host)
    uvicorn.run(BearerAuth(app, token) if token else app, host=host, port=port,
                log_level=server.settings.log_level.lower())


def http_security(host: str, allow_hosts=(), allow_origins=()) -> TransportSecuritySettings:
    """The SDK's Host/Origin checks (DNS rebinding), on wherever the server listens. Loopback names
    are always accepted; beyond loopback the address served and the ``allow_hosts`` (``name`` or
    ``name:port``) the operator lists, and Origins only from ``allow_origins``. On 0.0.0.0 the
    names clients use cannot be guessed, so they must be listed.

    >>> http_security("10.0.0.5").allowed_hosts[-1]
    '10.0.0.5:*'
    """
    if is_wildcard(host) and not allow_hosts:
        raise ValueError(f"--host {host} listens on every interface: name the host clients connect to "
                         f"with --allow-host (e.g. --allow-host 192.168.1.20), so other Host headers are refused")
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    if not is_loopback(host) and not is_wildcard(host):
        hosts.append(f"[{host}]:*" if ":" in host else f"{host}:*")
    hosts += [h if h.rsplit(":", 1)[-1].isdigit() or h.endswith(":*") else f"{h}:*" for h in allow_hosts]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *allow_origins]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)
