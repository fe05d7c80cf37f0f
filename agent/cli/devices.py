"""`embodia devices`: the device schemes and what each can open."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from embodia.agent.cli.app import app


@app.command()
def devices():
    """List device schemes and the targets each can open."""
    from embodia.devices import available
    t = Table(title="devices")
    t.add_column("scheme")
    t.add_column("targets / usage")
    for row in available():
        detail = "\n".join(row["targets"]) or row["description"]
        if row["error"]:
            detail += f"\n[yellow]unavailable: {row['error']}[/yellow]"
        t.add_row(row["scheme"] + ":", detail)
    Console().print(t)
