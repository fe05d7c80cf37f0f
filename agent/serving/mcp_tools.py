"""The MCP tools (`embodia.agent.serving.mcp`): one factory per tool, each taking the `Setup`
(the sessions, the operator's allow-lists and limits) and returning the tool, whose name and
docstring are what a client lists; and the ways a tool talks back to its client (elicitation for a
risky action, progress notifications, one-line errors)."""

import functools
import inspect
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional, Union

import anyio
import anyio.lowlevel
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve

from embodia.agent.loop.safety import RiskRefused, SafetyGate, classify
from embodia.agent.serving.allowed import AccessError, Allowed
from embodia.agent.serving.mcp_session import (
    DeviceSession,
    Hub,
    McpLimits,
    SessionError,
    load_memory_stats,
    observation_content,
    on_device,
    parse_action,
    run_task_episodes,
)
from embodia.devices import ActionError, GuiAction


# -- asking the client -----------------------------------------------------------------------------
def _can_elicit(ctx) -> bool:
    caps = getattr(ctx, "client_capabilities", None)
    return bool(caps is not None and getattr(caps, "elicitation", None) is not None)


def confirmation_model():
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
        except AccessError as e:
            raise ToolError(str(e)) from None



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
            setup.allowed.device(uri)
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


def _check_run_task(setup: Setup, policy: str, episodes: int, max_steps: Optional[int]) -> bool:
    """Tool errors for what a client may not ask of ``run_task``; True when the operator's credential
    may go with the policy (a ``remote:`` server the operator named)."""
    if not 1 <= episodes <= 1000:
        raise ToolError("episodes must be in 1..1000")
    if max_steps is not None and not 1 <= max_steps <= setup.limits.max_steps:
        raise ToolError(f"max_steps must be in 1..{setup.limits.max_steps} (or left out: the task's own length)")
    try:
        return setup.allowed.policy(policy)
    except AccessError as e:
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
        max_steps per episode up to the server's limit (10000 unless its --max-steps says otherwise).
        Progress comes as progress notifications; cancelling stops the episode and saves it."""
        s = setup.session(ctx, session)
        credential = _check_run_task(setup, policy, episodes, max_steps)
        memory = setup.memory_path(memory) or setup.memory
        confirm, progress = _client_callbacks(ctx, setup.confirm)
        stop = threading.Event()

        def work():
            with s.lock:
                return run_task_episodes(s, policy, instruction, episodes, seed, max_steps, memory,
                                         SafetyGate(setup.allow, confirm=confirm), stop, progress,
                                         credential=credential)
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


def one_line_errors(fn):
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

