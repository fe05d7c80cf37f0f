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

Three files: this one builds the server and runs it on a transport; `embodia.agent.serving.mcp_tools`
holds the tools (one small factory each) and how they talk back to the client;
`embodia.agent.serving.mcp_session` the device sessions the tools drive (limits, allow-lists, one
`DeviceSession` per client over the loop's own `EpisodeRun`).

>>> server = build_server(allow=(), record_root="runs/mcp")       # doctest: +SKIP
>>> server.run("stdio")                                            # doctest: +SKIP
"""

import dataclasses
from contextlib import asynccontextmanager
from typing import Optional

import anyio
from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from embodia.agent.loop.safety import SafetyGate
from embodia.agent.serving.access import BearerAuth, is_loopback, is_wildcard, require_credential

from embodia.agent.serving.allowed import Allowed
from embodia.agent.serving.mcp_session import Hub, McpLimits
from embodia.agent.serving.mcp_tools import TOOLS, Setup, confirmation_model, one_line_errors

INSTRUCTIONS = (
    "Drive embodia devices: open_device (e.g. gui-sim:settings, desktop:, android:<serial>, "
    "sim:twogap-push), observe, act (a GUI action object such as {\"type\": \"click\", \"point\": "
    "[x, y]} with x, y in 0..1000 of the screen, or a model reply; robots: a chunk [[...], ...]), "
    "run_task (a policy runs the episode), memory_stats, close_device.")


def build_server(*, allow=(), record_root: Optional[str] = "runs/mcp", memory: Optional[str] = None,
                 stateful: bool = True, limits: McpLimits = McpLimits(), allowed: Allowed = Allowed()):
    """The MCPServer with embodia's tools. ``stateful``: the transport serves one client (stdio);
    ``limits``: what clients may take; ``allowed``: what they may name beyond devices."""
    SafetyGate(allow)                      # an unknown class fails now, not at the first risky action
    if memory:                             # the operator's own memory is always allowed
        allowed = dataclasses.replace(allowed, memory_roots=(*allowed.memory_roots, memory))
    setup = Setup(Hub(record_root, stateful, limits), allow, allowed, limits, memory, confirmation_model())
    server = MCPServer("embodia", instructions=INSTRUCTIONS,
                       lifespan=_lifespan(setup.hub, stateful, limits.idle_close_s))
    server.hub = setup.hub
    for make in TOOLS:
        # every failure of a tool is a one-line tool error with its message
        server.tool()(one_line_errors(make(setup)))
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
