"""`embodia replay`: re-execute recorded actions open loop (robot datasets, GUI recordings, action files)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from embodia.agent.cli.app import AllowOpt, app, check_inputs, console, fail, gate


@app.command()
def replay(dataset: Path = typer.Argument(..., help="dataset directory, GUI recording, or a JSON file of GUI actions"),
           episode: str = typer.Option("0", "--episode", "-e", help="episode index or 'all'"),
           device: Optional[str] = typer.Option(None, "--device", "-d",
                                                help="device URI (default: the one in the record)"),
           stop_on_divergence: Optional[float] = typer.Option(
               None, "--stop-on-divergence", help="stop when |state - recorded| exceeds this (GUI: when "
               "the screen differs from the recorded one by more than this fraction, 0..1)"),
           record: Optional[Path] = typer.Option(None, "--record", help="GUI: record the replay here"),
           allow: Optional[list[str]] = AllowOpt,
           json_out: Optional[Path] = typer.Option(None, "--json")):
    """Re-execute recorded actions open loop; report final-state difference and outcome."""
    check_inputs(locals())
    from embodia.agent.evaluation.evaluate import write_json
    from embodia.agent.loop.replay import replay_episode
    from embodia.agent.recording.dataset import LocalDataset
    from embodia.agent.recording.gui_log import is_gui_recording
    if dataset.is_file() or is_gui_recording(dataset):
        return replay_gui_source(dataset, episode, device, stop_on_divergence, record, allow, json_out)
    try:
        ds = LocalDataset(dataset)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    chosen = episode_indices(episode, ds.num_episodes, dataset)
    try:            # every chosen episode read before any is replayed: a lie is refused before the work
        for i in chosen:
            ds.episode(i)
    except ValueError as e:        # DatasetError
        fail(str(e))
    rows = []
    for i in chosen:
        try:        # a device its record names that does not open
            r = replay_episode(ds, i, device_uri=device, stop_on_divergence=stop_on_divergence)
        except (ValueError, FileNotFoundError, ImportError) as e:
            fail(f"cannot replay episode {i} of {dataset}: {e}")
        rows.append(r)
        diff = r["final_state_max_abs_diff"]
        console.print(f"episode {i} (seed {r['seed']}): replayed {r['steps']}/{r['recorded_steps']} steps, "
                      f"success {r['success']} (recorded {r['recorded_success']}), final state max abs diff "
                      f"{'n/a' if diff is None else f'{diff:.3g}'}"
                      + (f", diverged at step {r['diverged_at']}" if r["diverged_at"] is not None else ""))
    if json_out:
        write_json({"dataset": str(dataset), "episodes": rows}, json_out)
    if not all(r["same_outcome"] for r in rows):
        raise typer.Exit(1)


def episode_indices(episode: str, n: int, source) -> list[int]:
    """'all' or one index of the n episodes in ``source``, or a one-line error (exit 2, also when
    the source holds none: a dataset of no episodes is input a replay cannot use)."""
    if n == 0:
        fail(f"{source}: no episodes to replay (it holds none)")
    if episode == "all":
        return list(range(n))
    try:
        i = int(episode)
    except ValueError:
        fail(f"--episode takes an index or 'all', not {episode!r}")
    if not 0 <= i < n:
        fail(f"episode {i} not in {source} ({n} episodes)")
    return [i]


def replay_gui_source(source: Path, episode: str, device: Optional[str], stop: Optional[float],
                      record: Optional[Path], allow, json_out: Optional[Path]):
    """`embodia replay` of a GUI recording or an actions file; exit 1 unless every action ran."""
    from embodia.agent.evaluation.evaluate import write_json
    from embodia.agent.loop.replay import replay_gui
    from embodia.agent.recording.gui_log import is_gui_recording, list_gui_episodes
    n = len(list_gui_episodes(source)) if is_gui_recording(source) else 1
    rows = []
    for i in episode_indices(episode, n, source):
        try:
            r = replay_gui(source, episode=i, device_uri=device, stop_on_divergence=stop,
                           gate=(lambda dev: gate(allow, dev)), record_to=record)
        except (ValueError, OSError, ImportError) as e:
            fail(f"cannot replay {source}: {e}")
        rows.append(r)
        console.print(f"episode {i}: replayed {r['steps']}/{r['recorded_steps']} actions"
                      + (f", diverged before action {r['diverged_at']}" if r["diverged_at"] is not None else "")
                      + (f"; [red]{r['error']}[/red]" if r["error"] else ""))
    if json_out:
        write_json({"source": str(source), "episodes": rows}, json_out)
    if not all(r["completed"] for r in rows):
        raise typer.Exit(1)
