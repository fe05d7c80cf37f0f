"""`embodia train`: the VLA (backbone + DiT head) on recorded datasets; EMA checkpoints, resumable.
With ``--success-head``: the learned success detector of an existing checkpoint instead. The
recipes that rebuild a bundled model (`embodia train tiny`, `mt50`, ...) are its sub-commands
(`embodia.agent.cli.recipes`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from embodia.agent.cli.app import ModalityOpt, TorchDeviceOpt, app, check_inputs, console, fail

train_app = typer.Typer(no_args_is_help=False)
app.add_typer(train_app, name="train")


@train_app.callback(invoke_without_command=True)
def train(ctx: typer.Context,
          data: Optional[list[Path]] = typer.Option(None, "--data", help="dataset directory (repeat for several "
                                                    "bodies), or a folder of them (a recorded suite); required "
                                                    "without a recipe"),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="checkpoint directory; required without "
                                             "a recipe"),
          steps: Optional[int] = typer.Option(None, "--steps", min=1, help="training steps (default 10000; "
                                              "300 with --success-head)"),
          batch_size: Optional[int] = typer.Option(None, "--batch-size", help="samples per step (default 64 on the "
                                                   "CPU, 256 on CUDA)"),
          lr: float = typer.Option(1e-3, "--lr"), seed: int = typer.Option(0, "--seed"),
          save_every: int = typer.Option(1000, "--save-every"), threads: int = typer.Option(2, "--threads"),
          hidden: int = typer.Option(64, "--hidden", help="backbone width of a fresh model"),
          layers: int = typer.Option(2, "--layers", help="backbone text layers of a fresh model"),
          resume: bool = typer.Option(False, "--resume", help="continue the run saved in --out"),
          shift: int = typer.Option(0, "--shift", min=0, help="image augmentation: random shift by up to this "
                                    "many pixels while the backbone trains (0: none)"),
          freeze_after: int = typer.Option(1000, "--freeze-after", min=0, help="end-to-end steps before the "
                                           "backbone is frozen and cached (0: never)"),
          heldout: Optional[Path] = typer.Option(None, "--heldout", help="a recorded dataset scored offline "
                                                 "at each save (first episodes; OUT.heldout.jsonl)"),
          modality: Optional[Path] = ModalityOpt,
          success_head: bool = typer.Option(False, "--success-head", help="train the learned success detector "
                                            "of the checkpoint in --out (its backbone stays frozen) on the recorded "
                                            "episodes' success labels (robot datasets and GUI recordings), calibrated "
                                            "on out-of-fold scores; use it with --success learned:OUT"),
          torch_device: Optional[str] = TorchDeviceOpt,
          dtype: Optional[str] = typer.Option(None, "--dtype", help="autocast precision: auto (bfloat16 on CUDA, "
                                              "float32 elsewhere) | float32 | bfloat16; the weights stay float32")):
    """Train the VLA (backbone + DiT head) on recorded datasets (--data, --out); EMA checkpoints,
    resumable. Or rebuild a bundled model by its recipe: embodia train tiny | mt50 | smolvla |
    success-head | gui-head | miniwob | desktop (each with its own --help)."""
    if ctx.invoked_subcommand is not None:
        given = [p.opts[0] for p in ctx.command.params
                 if ctx.get_parameter_source(p.name).name == "COMMANDLINE"]
        if given:
            fail(f"{', '.join(given)} before the recipe: options of `embodia train {ctx.invoked_subcommand}` "
                 f"come after its name")
        return
    if not data or out is None:
        fail("embodia train needs --data and --out (or a recipe: tiny, mt50, smolvla, success-head, gui-head, "
             "miniwob, desktop)")
    check_inputs(locals())
    if success_head:
        return _train_success_head(data, out, steps or 300, seed)
    steps = steps or 10000
    from embodia.agent.evaluation.workers import TaskFailed
    from embodia.agent.training.train import TrainConfig, expand_data
    from embodia.agent.training.train import train as run_training
    cfg = TrainConfig(data=expand_data(data), out=str(out), steps=steps, batch_size=batch_size, lr=lr,
                      seed=seed, save_every=save_every, threads=threads, hidden=hidden, layers=layers,
                      heldout=str(heldout) if heldout else None, modality=str(modality) if modality else None,
                      torch_device=torch_device, dtype=dtype, shift=shift,
                      freeze_backbone_after=freeze_after or None)
    try:
        run_training(cfg, resume=resume, log=console.print)
    except (ValueError, FileNotFoundError, TaskFailed) as e:   # DatasetError, a bad mapping file, no episodes to
        fail(str(e))                                             # train on, a dataset a frame-loading worker failed on
    console.print(f"checkpoint written to {out}; use it with --policy {out}")


def _train_success_head(data: list[Path], out: Path, steps: int, seed: int) -> None:
    from embodia.agent.recording.dataset_checks import DatasetError
    from embodia.agent.training.success_train import train_success_head
    from embodia.agent.training.train import expand_data
    from embodia.policies.success_head import SuccessHeadError
    if not (out / "backbone").is_dir():
        fail(f"--success-head: {out} is not a checkpoint with a backbone/ folder (train the VLA first)")
    try:
        train_success_head(expand_data(data), out, steps=steps, seed=seed, log=console.print)
    except (DatasetError, FileNotFoundError, SuccessHeadError, ValueError) as e:
        fail(str(e))
    console.print(f"success head written to {out}; use it with --success learned:{out}")
