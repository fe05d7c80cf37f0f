"""`embodia eval-offline`: score a policy on recorded episodes, no device."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from embodia.agent.cli.app import (
    DEFAULT_POLICY,
    ApiKeyEnvOpt,
    BaseUrlOpt,
    CoordsOpt,
    DtypeOpt,
    SeedOpt,
    TorchDeviceOpt,
    app,
    console,
    fail,
    progress,
    use_placement,
)


@app.command("eval-offline")
def eval_offline(dataset: Path = typer.Argument(..., help="LeRobot v3 dataset directory or GUI recording"),
                 policy: str = typer.Option(DEFAULT_POLICY, "--policy", "-p", help="a checkpoint | embodia-tiny "
                                            "| random | openai:<model> | hf:<path> | recorded | shuffled | random-click"),
                 episodes: Optional[str] = typer.Option(None, "--episodes", help="episode indices, e.g. 0-9,12 (default: all)"),
                 stride: Optional[int] = typer.Option(None, "--stride", min=1, help="robots: score every Nth step "
                                                      "(default: the embodiment's exec_horizon)"),
                 memory: bool = typer.Option(False, "--memory", help="also score with a success memory of the "
                                             "other episodes (leave one out)"),
                 plots: Optional[Path] = typer.Option(None, "--plots", help="robots: PNGs of predicted vs recorded "
                                                      "actions per channel, here"),
                 plot_episodes: int = typer.Option(3, "--plot-episodes", min=0),
                 json_out: Optional[Path] = typer.Option(None, "--json", help="write the report here"),
                 seed: int = SeedOpt, threads: Optional[int] = typer.Option(None, "--threads"),
                 base_url: Optional[str] = BaseUrlOpt, api_key_env: str = ApiKeyEnvOpt, coords: str = CoordsOpt,
                 torch_device: Optional[str] = TorchDeviceOpt, dtype: Optional[str] = DtypeOpt):
    """Score a policy on recorded episodes, no device: action error (robots) or step accuracy (screens)."""
    use_placement(torch_device, dtype)
    from embodia.agent.evaluation import offline
    from embodia.agent.evaluation.evaluate import write_json
    from embodia.agent.loop.factory import PolicyError
    from embodia.agent.recording.dataset_checks import DatasetError
    try:
        pol = offline.offline_policy(policy, dataset, seed=seed, threads=threads, base_url=base_url,
                                     api_key_env=api_key_env, coords=coords)
        with progress() as bar:
            task = bar.add_task("offline eval", total=None, status="")
            try:
                rep = offline.score(dataset, pol, episodes=offline.parse_episodes(episodes), stride=stride,
                                    seed=seed, memory=memory, plot_dir=plots, plot_episodes=plot_episodes,
                                    progress=lambda done, total: bar.update(task, completed=done, total=total))
            except BaseException:
                bar.update(task, visible=False)      # the error's one line stands alone
                raise
    except (PolicyError, DatasetError, ValueError, IndexError, OSError) as e:
        fail(str(e))
    rep.update(policy=policy)
    Console(soft_wrap=True).print("\n".join(offline.summary_lines(rep)), markup=False)
    if json_out:
        write_json(rep, json_out)
        console.print(f"report written to {json_out}")
