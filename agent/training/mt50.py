"""Build the Meta-World MT50 checkpoint: 50 scripted demos per task, then `embodia train` on them.

    embodia train mt50 --data data/mt50 --out ckpt/embodia-mt50
    embodia train mt50 --data data/mt50 --out ckpt/embodia-mt50 --steps 40000   # train longer
    embodia train mt50 --steps 5000 --bundle policies/checkpoints/embodia-mt50   # the bundled one
    embodia train mt50 --steps 5000 --jobs 14 --torch-device cuda --bundle /tmp/bundle  # on a GPU host
    embodia train mt50 --obs lerobot --data data/mt50-lerobot --out ckpt/mt50-lerobot \
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

import json
import signal
import time
from pathlib import Path

DEMOS_PER_TASK = 50
DEMO_SEED = 1000
# The success-memory settings the bundle carries (memory.json). The defaults serve a robot that works
# in one place under a local shift (docs/benchmarks/persistent.md, "Persistent deployment on
# Meta-World"): seed recall without steering (each episode starts the sampler from the noise seed of
# a stored success), the one arm that was above memory-off on every axis of two test-seed sets and
# harmed no cell there (on the medium group +0.043 pooled, one cell of 44 below off at the edge of its
# interval); with the steering on as well it gained less (development seeds 5000+). The
# profiles, picked with --memory-settings NAME:
#   "steering": the memory's own defaults (calibrated similarity scale, steering the sampler): no
#     cell harmed on the test seeds, no gain shown;
#   "fixed-setup": a fixed similarity scale and replay of a matching stored chunk (tau0 = 1), chosen
#     on pilot seeds 100+ for set-ups that come back exactly (MT50 `?repeat=1`: +0.098,
#     docs/benchmarks/metaworld.md "Memory on vs off on MT50"); on set-ups that come back only
#     similar it loses a working policy's successes (clean cells -0.164), so it is never the default.
MEMORY_SETTINGS = {"recall_seed": True, "fixed_confidence": 0.0,
                   "profiles": {"steering": {}, "fixed-setup": {"sigma": 0.1, "replay": True}}}


def task_list(text: str) -> list[str]:
    """``--tasks``: MT50 task names, comma-separated; ValueError naming the unknown ones."""
    from embodia.sim.metaworld import suite_tasks
    names, known = [t.strip() for t in text.split(",") if t.strip()], set(suite_tasks("mt50"))
    unknown = [t for t in names if t not in known]
    if unknown or not names:
        raise ValueError(f"not MT50 tasks: {', '.join(unknown) or repr(text)} (e.g. reach-v3,push-v3)")
    return names


def build(*, data: Path, out: Path, episodes: int, tasks: list[str] | None, jobs: int, steps: int, threads: int,
          save_every: int, record_only: bool, torch_device: str | None, dtype: str | None, obs: str,
          size: str | None, shift: int, freeze_after: int, vision_layers: int, hidden: int, patch_size: int,
          bundle_to: Path | None, exec_horizon: int | None) -> None:
    """Record the demos (resuming), train on them (resuming), then copy the bundle to ``bundle_to``;
    one row per session in ``<out>.sessions.jsonl``, written however the session ends.
    ``torch_device`` / ``dtype`` are checked first (PlacementError, a ValueError), before any demo."""
    from embodia.agent.evaluation.suite import record_suite
    from embodia.policies.placement import choose
    placement = choose(torch_device, dtype)     # a GPU that is not there fails now, not after an hour of demos
    from embodia.agent.training.train import TRAIN_STATE, TrainConfig, expand_data, train
    t0 = time.perf_counter()
    state = out / TRAIN_STATE / "state.json"       # the training's last save: resume from it
    row = {"date": time.strftime("%Y-%m-%d %H:%M"), "steps": steps, "finished": False, "jobs": jobs,
           "torch": placement.describe()}
    from embodia.agent.loop.core import stop_as_ctrl_c
    before = signal.signal(signal.SIGTERM, stop_as_ctrl_c)     # `kill` stops it as Ctrl-C does: the row is written
    try:
        query = {**({"size": size} if size else {}), **({"obs": "lerobot"} if obs == "lerobot" else {})}
        rep = record_suite("mt50", "expert", data, episodes=episodes, seed=DEMO_SEED, only_success=True,
                           query=query, tasks=tasks, jobs=jobs,
                           on_task=lambda t, r: print(f"{t}: {r['successes']} demos ({r['recorded']} recorded, "
                                                      f"{r['resumed_from']} from before)", flush=True))
        row.update(demos=rep["successes"], recorded=rep["recorded"], record_s=round(time.perf_counter() - t0))
        t1 = time.perf_counter()
        if not record_only:
            datasets = [str(data / t) for t in tasks] if tasks else expand_data([data])
            train(TrainConfig(data=datasets, out=str(out), steps=steps, threads=threads, save_every=save_every,
                              shift=shift, freeze_backbone_after=freeze_after or None, vision_layers=vision_layers,
                              hidden=hidden, patch_size=patch_size, torch_device=torch_device, dtype=dtype),
                  resume=state.exists())
            row["train_s"] = round(time.perf_counter() - t1)
        if bundle_to is not None:
            bundle(out, bundle_to, exec_horizon=exec_horizon)
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
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out.with_name(out.name + ".sessions.jsonl"), "a") as f:
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

