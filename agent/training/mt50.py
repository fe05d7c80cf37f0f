"""Build the Meta-World MT50 checkpoint: 50 scripted demos per task, then `embodia train` on them.

    python -m embodia.agent.training.mt50 --data data/mt50 --out ckpt/embodia-mt50
    python -m embodia.agent.training.mt50 --data data/mt50 --out ckpt/embodia-mt50 --steps 40000   # train longer
    python -m embodia.agent.training.mt50 --steps 5000 --bundle policies/checkpoints/embodia-mt50   # the bundled one
    python -m embodia.agent.training.mt50 --steps 5000 --jobs 14 --torch-device cuda --bundle /tmp/bundle  # on a GPU host
    python -m embodia.agent.training.mt50 --obs lerobot --data data/mt50-lerobot --out ckpt/mt50-lerobot \
        --shift 4 --freeze-after 6000 --steps 12000          # from LeRobot's view: corner2 pixels + agent_pos

Both halves resume: run the same command again after a stop (or in the next session) and the
recording goes on from the task and seed where it stopped (`record_suite`), the training from its
last save (`train --resume`). ``--jobs N`` records N tasks at a time in worker processes (the
same datasets as one process writes); ``--torch-device`` / ``--dtype`` say where the training runs,
as for `embodia train`. ``--bundle DIR`` then copies what inference reads (no training state)
into DIR (with MEMORY_SETTINGS as its memory.json): the bundled ``embodia-mt50`` is that copy at step 5,000. Demos use seeds 1000.. (evaluation uses 0..), Meta-World's own
scripted policies, successes only (LeRobot's MT50 dataset also holds 50 per task). Wall time of each
session is appended to ``<out>.sessions.jsonl``, so the total over sessions can be reported.
"""
from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path

DEMOS_PER_TASK = 50
DEMO_SEED = 1000
# The success-memory settings the bundle carries (memory.json). The defaults serve a robot that works
# in one place under a local shift (persistent deployment, BENCHMARKS.md "Persistent deployment on
# Meta-World"): seed recall without steering (each episode starts the sampler from the noise seed of
# a stored success), the one arm that was above memory-off on every axis of two test-seed sets and
# harmed no cell there (on the medium group +0.043 pooled, one cell of 44 below off at the edge of its
# interval); with the steering on as well it gained less (development seeds 5000+). The
# profiles, picked with --memory-settings NAME:
#   "steering": the memory's own defaults (calibrated similarity scale, steering the sampler): no
#     cell harmed on the test seeds, no gain shown;
#   "fixed-setup": a fixed similarity scale and replay of a matching stored chunk (tau0 = 1), chosen
#     on pilot seeds 100+ for set-ups that come back exactly (MT50 `?repeat=1`: +0.098, BENCHMARKS.md
#     "Memory on vs off on MT50"); on set-ups that come back only similar it loses a working
#     policy's successes (clean cells -0.164), so it is never the default.
MEMORY_SETTINGS = {"recall_seed": True, "fixed_confidence": 0.0,
                   "profiles": {"steering": {}, "fixed-setup": {"sigma": 0.1, "replay": True}}}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="record MT50 demos and train a checkpoint on them (both resumable)")
    ap.add_argument("--data", type=Path, default=Path("data/mt50"))
    ap.add_argument("--out", type=Path, default=Path("ckpt/embodia-mt50"))
    ap.add_argument("--episodes", type=int, default=DEMOS_PER_TASK, help="successful demos per task")
    ap.add_argument("--tasks", type=_task_list, default=None,
                    help="record and train on these MT50 tasks only (comma-separated; default: all 50)")
    ap.add_argument("--jobs", type=_positive, default=1,
                    help="record the demos in this many worker processes, one task each at a time (the datasets "
                         "are those of --jobs 1; one OpenMP/torch thread per worker)")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save-every", type=int, default=500)
    ap.add_argument("--record-only", action="store_true")
    ap.add_argument("--torch-device", default=None,
                    help="where the training runs: auto (CUDA when present) | cpu | cuda[:N] | mps; "
                         "default: $EMBODIA_TORCH_DEVICE, else auto (as `embodia train --torch-device`)")
    ap.add_argument("--dtype", default=None,
                    help="autocast precision: auto (bfloat16 on CUDA, float32 elsewhere) | float32 | bfloat16")
    ap.add_argument("--obs", choices=("state", "lerobot"), default="state",
                    help="what the demos (and so the checkpoint) read: Meta-World's 39-number state with a "
                         "corner image, or LeRobot's view (the corner2 image and the 4-number agent_pos)")
    ap.add_argument("--size", default=None, help="the camera image's size in the demos (WxH; default 96x96)")
    ap.add_argument("--shift", type=int, default=0,
                    help="image augmentation: random shift by up to this many pixels while the backbone trains "
                         "(a pixel policy's choice; 0: none, as embodia-mt50 was trained)")
    ap.add_argument("--freeze-after", type=int, default=1000,
                    help="train the backbone end to end for this many steps, then cache it and train the head "
                         "alone (a policy that reads pixels needs its vision tower trained longer); 0: never freeze")
    ap.add_argument("--vision-layers", type=int, default=2, help="vision tower layers of a fresh model")
    ap.add_argument("--hidden", type=int, default=64, help="backbone width of a fresh model")
    ap.add_argument("--patch-size", type=_positive, default=14,
                    help="the vision tower's patch of a fresh model, in pixels; 2x2 patches make one image token "
                         "(14: a 96x96 image is resized to 84x84 and read as 9 tokens; 8: 96x96 as 36)")
    ap.add_argument("--bundle", type=Path, default=None,
                    help="after training, copy the inference files (no training state) into this folder")
    ap.add_argument("--exec-horizon", type=_positive, default=None,
                    help="with --bundle: the bundle runs this many actions of each chunk before it decides again "
                         "(its config.json's exec_horizon; default: the body's, 8 for Meta-World)")
    return ap


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _task_list(text: str) -> list[str]:
    from embodia.sim.metaworld import suite_tasks
    names, known = [t.strip() for t in text.split(",") if t.strip()], set(suite_tasks("mt50"))
    unknown = [t for t in names if t not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not MT50 tasks: {', '.join(unknown) or repr(text)} "
                                         f"(e.g. reach-v3,push-v3)")
    return names


def main(argv=None) -> None:
    ap = _parser()
    args = ap.parse_args(argv)
    from embodia.policies.placement import PlacementError, choose
    try:    # checked before any recording (a GPU that is not there fails now, not after an hour of demos)
        placement = choose(args.torch_device, args.dtype)
    except PlacementError as e:
        ap.error(str(e))

    from embodia.agent.evaluation.suite import record_suite
    from embodia.agent.training.train import TRAIN_STATE, TrainConfig, expand_data, train
    t0 = time.perf_counter()
    state = args.out / TRAIN_STATE / "state.json"       # the training's last save: resume from it
    row = {"date": time.strftime("%Y-%m-%d %H:%M"), "steps": args.steps, "finished": False, "jobs": args.jobs,
           "torch": placement.describe()}
    from embodia.agent.loop.core import stop_as_ctrl_c
    before = signal.signal(signal.SIGTERM, stop_as_ctrl_c)     # `kill` stops it as Ctrl-C does: the row is written
    try:
        query = {**({"size": args.size} if args.size else {}), **({"obs": "lerobot"} if args.obs == "lerobot" else {})}
        rep = record_suite("mt50", "expert", args.data, episodes=args.episodes, seed=DEMO_SEED, only_success=True,
                           query=query, tasks=args.tasks, jobs=args.jobs,
                           on_task=lambda t, r: print(f"{t}: {r['successes']} demos ({r['recorded']} recorded, "
                                                      f"{r['resumed_from']} from before)", flush=True))
        row.update(demos=rep["successes"], recorded=rep["recorded"], record_s=round(time.perf_counter() - t0))
        t1 = time.perf_counter()
        if not args.record_only:
            data = [str(args.data / t) for t in args.tasks] if args.tasks else expand_data([args.data])
            train(TrainConfig(data=data, out=str(args.out), steps=args.steps, threads=args.threads,
                              save_every=args.save_every, shift=args.shift,
                              freeze_backbone_after=args.freeze_after or None, vision_layers=args.vision_layers,
                              hidden=args.hidden, patch_size=args.patch_size, torch_device=args.torch_device,
                              dtype=args.dtype),
                  resume=state.exists())
            row["train_s"] = round(time.perf_counter() - t1)
        if args.bundle is not None:
            bundle(args.out, args.bundle, exec_horizon=args.exec_horizon)
        row["finished"] = True
    except BaseException as e:     # the row says why this session ended early (a stop, a failed task)
        row["stopped"] = " ".join(str(e).split()) or type(e).__name__
        raise
    finally:
        signal.signal(signal.SIGTERM, before)
        # a stopped session (Ctrl-C, kill, an error) is written too, with the step its last save reached,
        # so the wall time over sessions adds up
        row["wall_s"] = round(time.perf_counter() - t0)
        if state.exists():
            row["saved_step"] = json.loads(state.read_text()).get("step")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out.with_name(args.out.name + ".sessions.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row))


def bundle(checkpoint: Path, dest: Path, exec_horizon: int | None = None) -> None:
    """Copy what `from_pretrained` reads (config, weights, normalizer, backbone) into ``dest``,
    replacing it, and write MEMORY_SETTINGS as its memory.json: the optimizer and EMA state under
    train_state/ stay behind (ten times the size). ``exec_horizon``: the bundle decides after that
    many actions of each chunk (its config's ``exec_horizon``; None: the body's)."""
    import shutil

    from embodia.shared.files import commit_dir
    checkpoint, dest = Path(checkpoint), Path(dest)
    if not (checkpoint / "model.safetensors").is_file():
        raise FileNotFoundError(f"{checkpoint} holds no trained checkpoint (model.safetensors)")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoint, tmp, ignore=shutil.ignore_patterns("train_state"))
    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text())
    # the provenance, without this machine's folders: data/mt50/<task>, as the README's command writes it
    data = cfg.get("train_config", {}).get("data")
    if isinstance(data, list):
        cfg["train_config"]["data"] = [f"data/{Path(d).parent.name}/{Path(d).name}" for d in data]
    if "out" in cfg.get("train_config", {}):
        cfg["train_config"]["out"] = f"ckpt/{Path(cfg['train_config']['out']).name}"
    if exec_horizon is not None:
        cfg["exec_horizon"] = int(exec_horizon)
    cfg_path.write_text(json.dumps(cfg, indent=1) + "\n")
    (tmp / "memory.json").write_text(json.dumps(MEMORY_SETTINGS, indent=1) + "\n")
    commit_dir(tmp, dest)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:      # Ctrl-C or `kill`: the session row is written; say how to go on
        raise SystemExit(f"{e or 'stopped by Ctrl-C'}; run the same command again to go on from the last save") from None
    except (RuntimeError, ValueError, OSError) as e:   # a failed task (TaskFailed), a bad dataset: one line
        msg = " ".join(str(e).split()) or type(e).__name__
        raise SystemExit(f"error: {msg}; finished tasks and saves are kept: the same command goes on from them") from None
