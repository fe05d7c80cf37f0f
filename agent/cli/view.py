"""`embodia view`: a self-contained HTML report of a run, a dataset or an eval report."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from embodia.agent.cli.app import app, console, fail
from embodia.agent.cli.validate import printable


@app.command()
def view(source: Path = typer.Argument(..., help="a GUI recording, a dataset, an eval report (.json), or a folder of "
                                                 "GUI recordings (embodia mcp --record)"),
         out: Optional[Path] = typer.Option(None, "--out", "-o", help="report folder (default: <source>-view)"),
         rerun: Optional[Path] = typer.Option(None, "--rerun", help="also write a rerun recording (.rrd; needs "
                                              "rerun-sdk) of a GUI recording or dataset")):
    """Write a self-contained HTML report (index.html + assets) to open in a browser."""
    from embodia.agent.viewing import ViewError, build_view
    skipped: list = []
    bad: list = []
    try:
        index = build_view(source, out, skipped, bad)
        if rerun:
            from embodia.agent.viewing.rerun_log import log_to_rerun
            console.print(f"{log_to_rerun(source, rerun)} episodes logged to {rerun} (open: rerun {rerun})")
    except (ViewError, ValueError, ImportError) as e:
        fail(str(e))
    if skipped:      # the source named files outside itself (or missing): they stay out of the report
        shown = ", ".join(printable(n) for n in skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        console.print(f"[yellow]skipped {len(skipped)} files the source names but that are not inside it (or are "
                      f"missing):[/yellow] {escape(shown)}", soft_wrap=True, highlight=False)
    if bad:          # NaN or infinite where a number belongs: shown marked, not refused
        console.print("[yellow]the source holds values that are not numbers (NaN or infinite), shown marked "
                      f"\"(bad value)\" in the report:[/yellow] {escape(', '.join(printable(b) for b in bad[:5]))}"
                      + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""), soft_wrap=True, highlight=False)
    console.print(f"open {index.resolve().as_uri()}", soft_wrap=True)
