"""`embodia train <recipe>`: the committed commands that rebuild a bundled model or a variant of
one, each recording its own demonstrations before it trains (`embodia.agent.training`). Every
recipe resumes: the same command again goes on from what a stop left."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from embodia.agent.cli.app import check_inputs, console, fail, use_placement
from embodia.agent.cli.train import train_app

MT6 = "push-v3,reach-v3,drawer-open-v3,button-press-topdown-v3,door-open-v3,window-open-v3"


def bundled_tiny(out: Optional[Path]) -> Path:
    """``--out``, or the bundled embodia-tiny where none is given."""
    from embodia.policies import BUNDLED_CHECKPOINTS
    return out if out is not None else BUNDLED_CHECKPOINTS / "embodia-tiny"


def tasks_of(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


@train_app.command()
def tiny(data: Path = typer.Option(Path("data/embodia-tiny-demos"), "--data", help="where the demos are recorded"),
         out: Optional[Path] = typer.Option(None, "--out", help="the checkpoint (default: the bundled one)"),
         steps: int = typer.Option(10000, "--steps", min=1), seed: int = typer.Option(0, "--seed"),
         resume: bool = typer.Option(False, "--resume", help="continue the training saved in --out")):
    """Rebuild embodia-tiny: record the experts' demos (twogap-push, reach-v3), then train."""
    check_inputs(dict(out=out, steps=steps))
    from embodia.agent.training.tiny import rebuild
    rebuild(data, bundled_tiny(out), steps=steps, seed=seed, resume=resume, log=console.print)


@train_app.command()
def mt50(data: Path = typer.Option(Path("data/mt50"), "--data", help="where the demos are recorded"),
         out: Path = typer.Option(Path("ckpt/embodia-mt50"), "--out", help="the checkpoint and its training state"),
         episodes: int = typer.Option(50, "--episodes", min=1, help="successful demos per task"),
         tasks: Optional[str] = typer.Option(None, "--tasks", help="record and train on these MT50 tasks only "
                                             "(comma-separated; default: all 50)"),
         jobs: int = typer.Option(1, "--jobs", min=1, help="record the demos in this many worker processes, one "
                                  "task each at a time (the datasets are those of --jobs 1; one thread per worker)"),
         steps: int = typer.Option(20000, "--steps", min=1), threads: int = typer.Option(1, "--threads", min=1),
         save_every: int = typer.Option(500, "--save-every", min=1),
         record_only: bool = typer.Option(False, "--record-only", help="stop after recording"),
         torch_device: Optional[str] = typer.Option(None, "--torch-device", help="where the training runs: auto "
                                                    "(CUDA when present) | cpu | cuda[:N] | mps; default: "
                                                    "$EMBODIA_TORCH_DEVICE, else auto"),
         dtype: Optional[str] = typer.Option(None, "--dtype", help="autocast precision: auto (bfloat16 on CUDA, "
                                             "float32 elsewhere) | float32 | bfloat16"),
         obs: str = typer.Option("state", "--obs", help="what the demos (and so the checkpoint) read: state "
                                 "(Meta-World's 39 numbers and a corner image) | lerobot (LeRobot's view: the "
                                 "corner2 image and the 4-number agent_pos)"),
         size: Optional[str] = typer.Option(None, "--size", help="the camera image's size in the demos (WxH; "
                                            "default 96x96)"),
         shift: int = typer.Option(0, "--shift", min=0, help="image augmentation: random shift by up to this many "
                                   "pixels while the backbone trains (0: none, as embodia-mt50 was trained)"),
         freeze_after: int = typer.Option(1000, "--freeze-after", min=0, help="end-to-end steps before the "
                                          "backbone is cached and the head trains alone (0: never freeze)"),
         vision_layers: int = typer.Option(2, "--vision-layers", min=1, help="vision tower layers of a fresh model"),
         hidden: int = typer.Option(64, "--hidden", min=1, help="backbone width of a fresh model"),
         patch_size: int = typer.Option(14, "--patch-size", min=1, help="the vision tower's patch of a fresh model, "
                                        "in pixels (14: a 96x96 image is read as 9 tokens; 8: as 36)"),
         bundle: Optional[Path] = typer.Option(None, "--bundle", help="after training, copy the inference files "
                                               "(no training state) into this folder"),
         exec_horizon: Optional[int] = typer.Option(None, "--exec-horizon", min=1, help="with --bundle: the "
                                                    "bundle decides after this many actions of each chunk "
                                                    "(default: the body's, 8 for Meta-World)")):
    """Build a Meta-World MT50 checkpoint: record 50 scripted demos per task, then train (both resume)."""
    if obs not in ("state", "lerobot"):
        fail(f"--obs {obs!r}: state or lerobot")
    check_inputs(dict(out=out, size=size, hidden=hidden))
    use_placement(torch_device, dtype)      # a GPU that is not there fails now, not after an hour of demos
    from embodia.agent.training import mt50 as recipe
    try:
        chosen = recipe.task_list(tasks) if tasks is not None else None
    except ValueError as e:
        fail(f"--tasks: {e}")
    try:
        recipe.build(data=data, out=out, episodes=episodes, tasks=chosen, jobs=jobs, steps=steps, threads=threads,
                     save_every=save_every, record_only=record_only, torch_device=torch_device, dtype=dtype,
                     obs=obs, size=size, shift=shift, freeze_after=freeze_after, vision_layers=vision_layers,
                     hidden=hidden, patch_size=patch_size, bundle_to=bundle, exec_horizon=exec_horizon)
    except KeyboardInterrupt as e:      # Ctrl-C or `kill`: the session row is written; say how to go on
        fail(f"{e or 'stopped by Ctrl-C'}; run the same command again to go on from the last save", code=1)
    except (RuntimeError, ValueError, OSError) as e:   # a failed task (TaskFailed), a bad dataset
        fail(f"{' '.join(str(e).split()) or type(e).__name__}; finished tasks and saves are kept: the same "
             f"command goes on from them", code=1)


@train_app.command()
def smolvla(ctx: typer.Context,
            tasks: str = typer.Option(MT6, "--tasks", help="Meta-World tasks, comma-separated"),
            episodes: int = typer.Option(50, "--episodes", min=1, help="successful demonstrations per task"),
            data: Path = typer.Option(Path("data/lerobot-mt6"), "--data", help="the LeRobotDataset v3 to fill"),
            out: Path = typer.Option(Path("ckpt/smolvla-mt6"), "--out", help="the starting policy and the run"),
            steps: int = typer.Option(20000, "--steps", min=1, help="trainer steps in all (a resumed run goes on "
                                      "to it)"),
            batch_size: int = typer.Option(32, "--batch-size", min=1),
            save_freq: int = typer.Option(1000, "--save-freq", min=1, help="a checkpoint every N steps (what a "
                                          "stop can lose)"),
            size: int = typer.Option(96, "--size", min=1, help="the camera's side in pixels, as recorded"),
            chunk: int = typer.Option(16, "--chunk", min=1, help="actions per chunk"),
            exec_horizon: int = typer.Option(8, "--exec-horizon", min=1, help="actions run per chunk "
                                             "(n_action_steps)"),
            hidden: int = typer.Option(128, "--hidden", min=1, help="the VLM's hidden size"),
            layers: int = typer.Option(4, "--layers", min=1, help="the VLM's text layers"),
            policy_device: str = typer.Option("cpu", "--policy-device", help="cpu or cuda (a session lent a GPU)"),
            record_only: bool = typer.Option(False, "--record-only", help="stop after recording"),
            bundle: Optional[Path] = typer.Option(None, "--bundle", help="copy the trained policy here, "
                                                  "self-contained (e.g. policies/checkpoints/smolvla-mt6)")):
    """Train a SmolVLA with LeRobot's own trainer on demonstrations embodia records (docs/lerobot.md)."""
    if not tasks_of(tasks):
        fail("--tasks: name at least one Meta-World task")
    check_inputs(dict(out=out))
    from embodia.agent.training.smolvla import record_and_train
    record_and_train(tasks=tasks_of(tasks), episodes=episodes, data=data, out=out, steps=steps,
                     batch_size=batch_size, save_freq=save_freq, size=size, chunk=chunk, exec_horizon=exec_horizon,
                     hidden=hidden, layers=layers, policy_device=policy_device, record_only=record_only,
                     bundle_to=bundle, command=["embodia", "train", "smolvla", *given_options(ctx)])


def given_options(ctx) -> list[str]:
    """The options typed on the command line, as they would be typed again (what rebuilds a bundle)."""
    words = []
    for p in ctx.command.params:
        if ctx.get_parameter_source(p.name).name != "COMMANDLINE":
            continue
        value = ctx.params[p.name]
        words += [p.opts[0]] if p.is_flag else [p.opts[0], str(value)]
    return words


@train_app.command("success-head")
def success_head(data: Path = typer.Option(Path("data/embodia-tiny-success"), "--data", help="where the "
                                           "episodes are recorded"),
                 out: Optional[Path] = typer.Option(None, "--out", help="the checkpoint whose success head is "
                                                    "trained (default: the bundled one)"),
                 steps: int = typer.Option(300, "--steps", min=1), seed: int = typer.Option(0, "--seed")):
    """Rebuild embodia-tiny's learned success detector: record episodes of many agents, train, calibrate."""
    check_inputs(dict(out=out, steps=steps))
    from embodia.agent.training.success_train import rebuild
    rebuild(data, bundled_tiny(out), steps=steps, seed=seed, log=console.print)


@train_app.command("gui-head")
def gui_head(out: Optional[Path] = typer.Option(None, "--out", help="checkpoint directory (its backbone is read, "
                                                "gui_head.* written; default: the bundled one)"),
             episodes: int = typer.Option(2400, "--episodes", min=1, help="teacher episodes on gui-sim's train split"),
             steps: int = typer.Option(4000, "--steps", min=1),
             batch_size: int = typer.Option(64, "--batch-size", min=1),
             seed: int = typer.Option(10_000, "--seed", help="demo seeds SEED.. (benchmarks use 0..)"),
             threads: int = typer.Option(1, "--threads", min=1), lr: float = typer.Option(2e-3, "--lr"),
             noise: float = typer.Option(0.15, "--noise", min=0.0, max=1.0, help="the chance that a demo step "
                                         "runs a random on-screen action instead of the teacher's"),
             target: str = typer.Option("all", "--target", help="gui-sim app (all: every one)"),
             template: str = typer.Option("any", "--template", help="gui-sim task template (any: every one)"),
             save_every: Optional[int] = typer.Option(None, "--save-every", min=1, help="also save (and score on "
                                                      "--heldout) the EMA head every N steps"),
             heldout: Optional[str] = typer.Option(None, "--heldout", help="a GUI recording scored offline at "
                                                   "each save (OUT.heldout.jsonl)")):
    """Train the GUI head of a checkpoint on gui-sim demonstrations (the backbone stays frozen)."""
    check_inputs(dict(out=out, episodes=episodes, steps=steps, batch_size=batch_size, threads=threads, lr=lr))
    from embodia.agent.training.gui_train import GuiTrainConfig, train_gui_head
    train_gui_head(GuiTrainConfig(out=str(bundled_tiny(out)), episodes=episodes, steps=steps, batch_size=batch_size, seed=seed,
                                  threads=threads, lr=lr, noise=noise, target=target, template=template,
                                  save_every=save_every, heldout=heldout), log=console.print)


@train_app.command()
def miniwob(ctx: typer.Context,
            out: Path = typer.Option(Path("data/embodia-tiny-miniwob"), "--out", help="the new checkpoint "
                                     "folder (the bundled one is copied, never written)"),
            episodes: int = typer.Option(20, "--episodes", min=1, help="expert demos per task"),
            steps: int = typer.Option(2000, "--steps", min=1),
            batch_size: int = typer.Option(64, "--batch-size", min=1),
            seed: int = typer.Option(100_000, "--seed", help="first train seed (evaluation uses 1000..)"),
            tasks: str = typer.Option("", "--tasks", help="comma-separated tasks (default: every task with an "
                                      "expert)"),
            features: int = typer.Option(3, "--features", min=1, max=3, help="the element feature set "
                                         "(GuiHeadConfig.features; 1: the bundled head's)"),
            bundle: Optional[Path] = typer.Option(None, "--bundle", help="then copy the checkpoint, without its "
                                                  "demos, here (e.g. policies/checkpoints/embodia-miniwob)")):
    """A MiniWoB++ variant of embodia-tiny's GUI head, fine-tuned on the experts' demos of every task."""
    check_inputs(dict(out=out, steps=steps, batch_size=batch_size))
    from embodia.agent.training.miniwob_train import train_miniwob_head
    try:
        train_miniwob_head(out, tasks=tasks_of(tasks) or None, episodes=episodes, steps=steps, seed=seed,
                           batch_size=batch_size, features=features, log=console.print,
                           progress=sys.stderr.isatty(), bundle_to=bundle,
                           command=" ".join(["embodia", "train", "miniwob", *given_options(ctx)]))
    except ValueError as e:
        fail(str(e))


@train_app.command()
def desktop(ctx: typer.Context,
            out: Path = typer.Option(Path("data/embodia-tiny-desktop"), "--out", help="the new checkpoint "
                                     "folder (the bundled one is copied, never written)"),
            bench_episodes: int = typer.Option(10, "--bench-episodes", min=1, help="expert demos per bench task"),
            sim_episodes: int = typer.Option(300, "--sim-episodes", min=0, help="gui-sim teacher episodes"),
            steps: int = typer.Option(1000, "--steps", min=1),
            bench_repeat: int = typer.Option(2, "--bench-repeat", min=1, help="how many times as often the "
                                             "bench steps are drawn"),
            seed: int = typer.Option(10_000, "--seed"),
            tasks: str = typer.Option("", "--tasks", help="comma-separated bench tasks (default: every task the "
                                      "head can do, HEAD_TASKS)"),
            features: int = typer.Option(2, "--features", min=1, max=2, help="the element feature set "
                                         "(GuiHeadConfig.features; 1: the bundled head's)"),
            spell: bool = typer.Option(True, "--spell/--no-spell", help="the head reads which key enters the "
                                       "instruction's expression's next character (GuiHeadConfig.spell)"),
            max_elements: int = typer.Option(96, "--max-elements", min=1, help="tree elements the head reads"),
            bundle: Optional[Path] = typer.Option(None, "--bundle", help="then copy the checkpoint, without its "
                                                  "demos, here (e.g. policies/checkpoints/embodia-desktop)")):
    """A desktop variant of embodia-tiny's GUI head: the desktop bench's expert demos plus gui-sim's."""
    check_inputs(dict(out=out, steps=steps))
    from embodia.agent.training.desktop_train import HEAD_TASKS, train_desktop_head
    try:
        train_desktop_head(out, tasks=tasks_of(tasks) or HEAD_TASKS, bench_episodes=bench_episodes, sim_episodes=sim_episodes,
                           steps=steps, seed=seed, bench_repeat=bench_repeat, features=features, spell=spell,
                           max_elements=max_elements, log=console.print, progress=sys.stderr.isatty(),
                           bundle_to=bundle, command=" ".join(["embodia", "train", "desktop", *given_options(ctx)]))
    except ValueError as e:
        fail(str(e))
