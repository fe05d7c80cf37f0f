"""`embodia memory stats|ingest|prune`: inspect, build and prune success-memory files."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from embodia.agent.cli.app import (
    DEFAULT_POLICY,
    DtypeOpt,
    ModalityOpt,
    TorchDeviceOpt,
    app,
    check_inputs,
    console,
    fail,
)

memory_app = typer.Typer(help="Inspect, build and prune success-memory files.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")


def load_as_saved(path: Path, lock: bool = False):
    """Open a memory (robot or screen) with the key encoder its own meta.json names (no policy
    needed); ``lock`` for a command that saves it (refused, naming the holder, while another process
    writes the folder)."""
    from embodia.memory import MemoryStoreError
    from embodia.memory.pending import open_saved
    try:
        return open_saved(path, lock=lock)
    except MemoryStoreError as e:
        fail(str(e))
    except (OSError, ValueError, KeyError) as e:
        fail(f"cannot read memory {path}: {e}")


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
                  modality: Optional[Path] = ModalityOpt, torch_device: Optional[str] = TorchDeviceOpt,
                  dtype: Optional[str] = DtypeOpt):
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
    mem = load_as_saved(path, lock=True)
    if drop:
        if not namespace:
            fail("--drop needs --namespace")
        if not mem.drop_namespace(namespace):
            fail(f"no namespace {namespace!r} in {path}; it has {mem.namespaces()}")
        console.print(f"dropped namespace {namespace}")
    else:
        from embodia.memory import ScreenMemory
        if isinstance(mem, ScreenMemory):
            fail("prune applies to robot memories (a screen memory deletes entries that keep failing as it "
                 "runs); --drop --namespace works on both")
        n = mem.prune(namespace, max_fail_ratio=max_fail_ratio, min_fail=min_fail)
        console.print(f"deleted {n} entries that steered failures")
    mem.save(path)


@memory_app.command("review")
def memory_review(path: Path = typer.Argument(..., help="memory directory"),
                  confirm: list[str] = typer.Option([], "--confirm", help="store this pending episode as a "
                                                    "verified success (repeatable; ID or 'all')"),
                  reject: list[str] = typer.Option([], "--reject", help="this pending episode failed: credit the "
                                                   "entries that steered it (repeatable; ID or 'all')"),
                  list_only: bool = typer.Option(False, "--list", help="only list the pending episodes")):
    """Unverified episodes (an unsure judge, an unknown): confirm or reject each. With a terminal and
    no --confirm/--reject, asks yes/no/skip for each one."""
    import sys

    from embodia.memory import MemoryStoreError, pending
    try:
        kept = pending.pending(path)
    except pending.PendingError as e:
        fail(str(e))
    if not kept:
        console.print(f"{path}: no pending episodes")
        return
    for rec in kept:
        show_pending(rec)
    decided = {**{i: True for i in confirm}, **{i: False for i in reject}}
    if set(confirm) & set(reject):
        fail(f"both --confirm and --reject name {sorted(set(confirm) & set(reject))}")
    if "all" in decided:
        decided = {r["id"]: decided["all"] for r in kept}
    if list_only:
        return
    if not decided:
        if not sys.stdin.isatty():
            console.print(f"no terminal (stdin is not a tty): nothing changed; {len(kept)} episode(s) stay pending "
                          "(decide with --confirm ID / --reject ID)")
            return
        decided = ask_each(kept)
    ids = {r["id"] for r in kept}
    for pid in decided:
        if pid not in ids:
            fail(f"no pending episode {pid!r} in {path / pending.PENDING} (pending: {sorted(ids)})")
    try:
        mem = pending.open_saved(path, lock=True)
    except MemoryStoreError as e:
        fail(str(e))
    for pid, ok in decided.items():
        try:
            rec, arrays = pending.get(path, pid)
        except pending.PendingError as e:
            fail(str(e))
        if ok:
            n = pending.confirm(mem, rec, arrays)
            msg = f"{pid}: confirmed, {n} entries stored in {rec['namespace']}"
        else:
            out = pending.reject(mem, rec)
            msg = f"{pid}: rejected, {out['credited']} entries credited with a failure, {out['deleted']} deleted"
        mem.save(path)                 # the memory first (atomic), then the record leaves the list
        pending.drop(path, pid)
        console.print(msg, soft_wrap=True, highlight=False)


def show_pending(rec: dict) -> None:
    """One pending episode: id, instruction, the label's source, confidence and reason, the final frame."""
    from rich.markup import escape

    from embodia.agent.cli.validate import one_line
    lab = rec.get("label") or {}
    conf = lab.get("confidence")
    console.print(escape(f"{rec['id']} {rec['namespace']}: {rec.get('instruction')!r}\n"
                  f"  source={lab.get('source')} confidence={'-' if conf is None else f'{conf:.2f}'} "
                  f"said={lab.get('success')} reason={one_line(repr(lab.get('reason')))} steps={rec.get('steps_n')}\n"
                  f"  final frame: {rec.get('frame_path') or '(none)'}"
                  + (f"\n  final state: {rec['final_state']}" if rec.get("final_state") else "")),
                  soft_wrap=True, highlight=False)


def ask_each(kept: list) -> dict:
    """yes / no / skip for each pending episode on the terminal; end of input stops asking."""
    out = {}
    for rec in kept:
        while True:
            try:
                a = input(f"{rec['id']}: did it succeed at {rec.get('instruction')!r}? [yes/no/skip] ").strip().lower()
            except EOFError:
                return out
            if a in ("y", "yes", "n", "no"):
                out[rec["id"]] = a.startswith("y")
                break
            if a in ("s", "skip", ""):
                break
    return out
