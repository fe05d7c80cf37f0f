"""`embodia memory stats|ingest|prune`: inspect, build and prune success-memory files."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from embodia.agent.cli.app import DEFAULT_POLICY, ModalityOpt, app, check_inputs, console, fail

memory_app = typer.Typer(help="Inspect, build and prune success-memory files.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")


def load_as_saved(path: Path):
    """Open a memory with the hashes its own meta.json names (inspection only, no policy needed)."""
    from embodia.memory import MemoryFileError, SuccessMemory
    try:
        meta = json.loads((path / "meta.json").read_text())
        return SuccessMemory.load(path, encoder_id=meta["encoder_id"], normalizer_hash=meta["normalizer_hash"])
    except (OSError, ValueError, KeyError) as e:
        fail(f"cannot read memory {path}: {e}")
    except MemoryFileError as e:
        fail(str(e))


@memory_app.command("stats")
def memory_stats(path: Path = typer.Argument(..., help="memory directory")):
    """Entries, episodes, merges, evictions and deletions per namespace."""
    stats = load_as_saved(path).stats()
    if not stats:
        console.print(f"{path}: empty")
    for ns, row in stats.items():
        Console(soft_wrap=True).print(f"[bold]{ns}[/bold]: " + ", ".join(
            f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


@memory_app.command("ingest")
def memory_ingest(path: Path = typer.Argument(..., help="memory directory (created or extended)"),
                  data: Path = typer.Option(..., "--data", help="recorded dataset"),
                  policy: str = typer.Option(DEFAULT_POLICY, "--policy", "-p",
                                             help="the VLA whose normalizer defines keys and chunks"),
                  device: Optional[str] = typer.Option(None, "--device", help="namespace's device "
                                                       "(default: the one each episode names)"),
                  as_successes: bool = typer.Option(False, "--as-successes", help="also store episodes without "
                                                    "a success flag (e.g. a LeRobot dataset's demonstrations): "
                                                    "you vouch that they succeeded"),
                  modality: Optional[Path] = ModalityOpt):
    """Build (or extend) a memory from the successful episodes of a recorded dataset."""
    check_inputs(locals())
    from embodia.agent.training.ingest import ingest_dataset
    try:
        episodes, added = ingest_dataset(path, data, policy, device, as_successes=as_successes, modality=modality)
    except (ValueError, FileNotFoundError) as e:     # DatasetError and PolicyError are ValueErrors
        fail(str(e))
    console.print(f"ingested {episodes} {'' if as_successes else 'successful '}episodes ({added} entries added or merged) into {path}")


@memory_app.command("prune")
def memory_prune(path: Path = typer.Argument(..., help="memory directory"),
                 namespace: Optional[str] = typer.Option(None, "--namespace", help="only this namespace"),
                 drop: bool = typer.Option(False, "--drop", help="drop the whole namespace"),
                 max_fail_ratio: float = typer.Option(0.5, "--max-fail-ratio"),
                 min_fail: int = typer.Option(1, "--min-fail")):
    """Delete entries that steered failures (or a whole namespace with --drop)."""
    check_inputs(locals())
    mem = load_as_saved(path)
    if drop:
        if not namespace:
            fail("--drop needs --namespace")
        if not mem.drop_namespace(namespace):
            fail(f"no namespace {namespace!r} in {path}; it has {mem.namespaces()}")
        console.print(f"dropped namespace {namespace}")
    else:
        n = mem.prune(namespace, max_fail_ratio=max_fail_ratio, min_fail=min_fail)
        console.print(f"deleted {n} entries that steered failures")
    mem.save(path)
