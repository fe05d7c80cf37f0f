"""`embodia train`: the VLA (backbone + DiT head) on recorded datasets; EMA checkpoints, resumable."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from embodia.agent.cli.app import ModalityOpt, app, check_inputs, console, fail


@app.command()
def train(data: list[Path] = typer.Option(..., "--data", help="dataset directory (repeat for several "
                                                                   "bodies), or a folder of them (a recorded suite)"),
          out: Path = typer.Option(..., "--out", "-o", help="checkpoint directory"),
          steps: int = typer.Option(10000, "--steps", min=1), batch_size: int = typer.Option(64, "--batch-size"),
          lr: float = typer.Option(1e-3, "--lr"), seed: int = typer.Option(0, "--seed"),
          save_every: int = typer.Option(1000, "--save-every"), threads: int = typer.Option(2, "--threads"),
          hidden: int = typer.Option(64, "--hidden", help="backbone width of a fresh model"),
          layers: int = typer.Option(2, "--layers", help="backbone text layers of a fresh model"),
          resume: bool = typer.Option(False, "--resume", help="continue the run saved in --out"),
          heldout: Optional[Path] = typer.Option(None, "--heldout", help="a recorded dataset scored offline "
                                                 "at each save (first episodes; OUT.heldout.jsonl)"),
          modality: Optional[Path] = ModalityOpt):
    """Train the VLA (backbone + DiT head) on recorded datasets; EMA checkpoints, resumable."""
    check_inputs(locals())
    from embodia.agent.training.train import TrainConfig, expand_data
    from embodia.agent.training.train import train as run_training
    cfg = TrainConfig(data=expand_data(data), out=str(out), steps=steps, batch_size=batch_size, lr=lr,
                      seed=seed, save_every=save_every, threads=threads, hidden=hidden, layers=layers,
                      heldout=str(heldout) if heldout else None, modality=str(modality) if modality else None)
    try:
        run_training(cfg, resume=resume, log=console.print)
    except (ValueError, FileNotFoundError) as e:     # DatasetError, a bad mapping file, no episodes to train on
        fail(str(e))
    console.print(f"checkpoint written to {out}; use it with --policy {out}")
