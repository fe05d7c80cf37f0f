"""`embodia mcp`: devices and the agent as MCP tools (stdio for editors and chat apps; streamable HTTP)."""
from __future__ import annotations

from typing import Optional

import typer

from embodia.agent.cli.app import AllowOpt, DtypeOpt, TorchDeviceOpt, app, check_inputs, fail


@app.command()
def mcp(transport: str = typer.Option("stdio", "--transport", help="stdio | http (streamable HTTP)"),
        host: str = typer.Option("127.0.0.1", "--host", help="http: the address (loopback by default)"),
        port: int = typer.Option(8765, "--port"), allow: Optional[list[str]] = AllowOpt,
        record: Optional[str] = typer.Option("runs/mcp", "--record", help="where each session's episodes are saved"),
        memory: Optional[str] = typer.Option(None, "--memory", help="default success memory of run_task / memory_stats"),
        torch_device: Optional[str] = TorchDeviceOpt, dtype: Optional[str] = DtypeOpt):
    """Serve devices and the agent as MCP tools (stdio for editors and chat apps; streamable HTTP)."""
    check_inputs(locals())
    from embodia.agent.serving.mcp import serve as serve_mcp
    try:
        serve_mcp(transport=transport, host=host, port=port, allow=allow or (), record_root=record, memory=memory)
    except ValueError as e:
        fail(str(e))
