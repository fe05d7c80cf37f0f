"""`embodia mcp`: devices and the agent as MCP tools (stdio for editors and chat apps; streamable HTTP)."""
from __future__ import annotations

from typing import Optional

import typer

from embodia.agent.cli.app import AllowOpt, DtypeOpt, TorchDeviceOpt, app, check_inputs, fail

TOKEN_ENV = "EMBODIA_MCP_TOKEN"


@app.command()
def mcp(transport: str = typer.Option("stdio", "--transport", help="stdio | http (streamable HTTP)"),
        host: str = typer.Option("127.0.0.1", "--host", help="http: the address (loopback by default; any other "
                                 "needs a bearer token)"),
        port: int = typer.Option(8765, "--port"), allow: Optional[list[str]] = AllowOpt,
        record: Optional[str] = typer.Option("runs/mcp", "--record", help="where each session's episodes are saved"),
        memory: Optional[str] = typer.Option(None, "--memory", help="default success memory of run_task / memory_stats"),
        token_env: str = typer.Option(TOKEN_ENV, "--token-env", help="http: the environment variable holding the "
                                      "bearer token clients must send (required beyond loopback)"),
        token_file: Optional[str] = typer.Option(None, "--token-file", help="http: read the bearer token from this "
                                                 "file (its first line) instead"),
        allow_host: Optional[list[str]] = typer.Option(None, "--allow-host", help="http: a Host name[:port] clients "
                                                       "use to reach the server (beyond loopback; repeatable)"),
        allow_origin: Optional[list[str]] = typer.Option(None, "--allow-origin", help="http: a browser Origin "
                                                         "allowed to call the server (repeatable)"),
        allow_policy: Optional[list[str]] = typer.Option(None, "--allow-policy", help="policy specs clients may run "
                                                         "beyond expert, random and the bundled ones: a server, e.g. "
                                                         "remote:ws://10.0.0.5:8000 (it gets $EMBODIA_API_KEY), "
                                                         "remote: (any server, sent no key), a scheme such as "
                                                         "openai:, or one exact spec (repeatable)"),
        checkpoint_root: Optional[list[str]] = typer.Option(None, "--checkpoint-root", help="folder under which "
                                                            "clients may name checkpoints and replays (repeatable)"),
        memory_root: list[str] = typer.Option(["runs/memory"], "--memory-root", help="folder under which clients "
                                              "may name success memories (repeatable; --memory is always allowed)"),
        file_root: Optional[list[str]] = typer.Option(None, "--file-root", help="folder under which clients may "
                                                      "open files as devices: browser: pages (a path or file://) "
                                                      "and mujoco: scenes (repeatable)"),
        allow_page_origin: Optional[list[str]] = typer.Option(None, "--allow-page-origin", help="an http(s) origin "
                                                              "(scheme://host[:port]) whose pages clients may open "
                                                              "with browser: (repeatable)"),
        max_devices: int = typer.Option(8, "--max-devices", min=1, max=1024, help="devices open at once"),
        max_devices_per_client: int = typer.Option(2, "--max-devices-per-client", min=1, max=1024,
                                                   help="devices open at once per client address"),
        max_pixels: int = typer.Option(1024 * 1024, "--max-pixels", min=1, help="pixels per camera image a client "
                                       "may ask for (open_device's size, a device URI's size=)"),
        max_steps: int = typer.Option(10_000, "--max-steps", min=1, help="the longest run_task episode a client "
                                      "may ask for"),
        idle_close: float = typer.Option(300.0, "--idle-close", min=1.0, help="seconds after which a device no "
                                         "client used is closed and its record saved"),
        torch_device: Optional[str] = TorchDeviceOpt, dtype: Optional[str] = DtypeOpt):
    """Serve devices and the agent as MCP tools (stdio for editors and chat apps; streamable HTTP)."""
    check_inputs(locals())
    from embodia.agent.serving.access import read_secret
    from embodia.agent.serving.allowed import Allowed
    from embodia.agent.serving.mcp_session import McpLimits
    from embodia.agent.serving.mcp import serve as serve_mcp
    try:
        token = read_secret(token_env, token_file) if transport == "http" else None
        serve_mcp(transport=transport, host=host, port=port, allow=allow or (), record_root=record, memory=memory,
                  token=token, allow_hosts=allow_host or (), allow_origins=allow_origin or (),
                  limits=McpLimits(max_devices=max_devices,
                                   max_devices_per_client=min(max_devices_per_client, max_devices),
                                   max_pixels=max_pixels, max_steps=max_steps, idle_close_s=idle_close),
                  allowed=Allowed(tuple(allow_policy or ()), tuple(checkpoint_root or ()), tuple(memory_root),
                                  tuple(file_root or ()), tuple(allow_page_origin or ())))
    except ValueError as e:
        fail(str(e))
