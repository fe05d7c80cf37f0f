"""Does offline error rank checkpoints as online success does? One short training run per body,
three of its checkpoints (early, middle, final), each scored offline on held-out recorded
episodes and run online on the same seeds; one JSON line.

    nice -n 10 python benchmarks/offline_vs_online.py --tasks twogap,gui --work /tmp/ovo

twogap: `embodia train` (a fresh small VLA) on expert demos of sim:twogap-push (noisy expert,
seeds from 1000), checkpoints copied at three saves; held-out: expert episodes on seeds
``--seed``.. recorded with our writer; offline score: first-action and chunk error (normalized,
lower is better); online: success on the same seeds.
gui: the GUI head of embodia-tiny's backbone trained briefly on teacher demos (gui_train, train
split), heads saved at three steps; held-out: teacher episodes on gui-sim:all?split=test&shift=layout
on seeds ``--seed``..; offline: step success, type and grounding accuracy; online: task success.

Rank agreement: Spearman and Kendall between the offline score (negated error, or accuracy) and
online success over the three checkpoints (with three points, only 1, 0.5, -0.5, -1 for Spearman
are possible; ties give None). Small samples: read the Wilson intervals.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import torch

from embodia.agent.evaluation.offline import kendall, score_robot, spearman
from embodia.agent.evaluation.offline_gui import score_gui
from embodia.agent.evaluation.stats import wilson
from embodia.agent.loop.episode import run_episode
from embodia.agent.recording.dataset import LocalDataset
from embodia.devices import open_device
from embodia.policies.placement import parse_args


def _rate(k: int, n: int) -> dict:
    return {"successes": k, "episodes": n, "success_rate": round(k / n, 4) if n else None,
            "wilson95": [round(v, 4) for v in wilson(k, n)]}


def _ranks(offline: list[float], online: list[float]) -> dict:
    best = [i for i, v in enumerate(online) if v == max(online)]
    return {"spearman": spearman(offline, online), "kendall": kendall(offline, online),
            # does the offline score pick the online best? (None: online success ties at the top)
            "same_best": (max(range(len(offline)), key=lambda i: offline[i]) == best[0]) if len(best) == 1 else None}


def record_robot(uri: str, out: Path, episodes: int, seed: int, noise: float | None) -> Path:
    from embodia.agent.recording.writer import DatasetWriter
    if out.exists():
        return out
    with open_device(uri) as dev:
        w = DatasetWriter(out, dev.embodiment)
        pol = dev.expert() if noise is None else dev.expert(noise=noise)
        for i in range(episodes):
            run_episode(dev, pol, seed=seed + i, recorder=w, episode_meta={"device": uri, "policy": "expert"})
        w.close()
    return out


def bench_twogap(args, work: Path, log) -> dict:
    from embodia.agent.training.train import TrainConfig, train
    from embodia.policies.robot.vla import VLAPolicy
    t0 = time.perf_counter()
    train_dir = record_robot("sim:twogap-push", work / "twogap-train", args.train_episodes, 1000, 0.25)
    held = record_robot("sim:twogap-push", work / "twogap-heldout", args.episodes, args.seed, None)
    t_data = time.perf_counter() - t0
    ck = work / "twogap-ck"
    keep = sorted({int(s) for s in args.twogap_saves.split(",")})
    saved: dict[int, Path] = {}

    def on_save(step: int, out: Path) -> None:
        if step in keep:
            dst = work / f"twogap-ck-{step}"
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(out, dst, ignore=shutil.ignore_patterns("train_state"))
            saved[step] = dst

    from math import gcd
    every = keep[0]
    for s in keep[1:]:
        every = gcd(every, s)
    if not all((work / f"twogap-ck-{s}").exists() for s in keep):
        shutil.rmtree(ck, ignore_errors=True)
        train(TrainConfig(data=[str(train_dir)], out=str(ck), steps=keep[-1], save_every=every, threads=args.threads,
                          freeze_backbone_after=args.freeze_after, batch_size=args.batch_size,
                          frozen_batch_size=2 * args.batch_size, seed=0),
              progress=False, log=log, on_save=on_save)
    else:
        saved = {s: work / f"twogap-ck-{s}" for s in keep}
    t_train = time.perf_counter() - t0 - t_data
    ds = LocalDataset(held)
    rows = []
    for step in keep:
        pol = VLAPolicy.from_pretrained(saved[step], threads=args.threads).bind(ds.embodiment)
        t1 = time.perf_counter()
        rep = score_robot(ds, pol, stride=args.stride, seed=args.seed)
        t2 = time.perf_counter()
        ok = 0
        with open_device("sim:twogap-push") as dev:
            for i in range(args.episodes):
                ok += bool(run_episode(dev, pol, seed=args.seed + i).success)
        t3 = time.perf_counter()
        rows.append({"step": step, "offline": {"first_nmae": round(rep["overall"]["first"]["nmae_mean"], 4),
                                               "chunk_nmae": round(rep["overall"]["chunk"]["nmae_mean"], 4),
                                               "decisions": rep["overall"]["first"]["n"],
                                               "seconds": round(t2 - t1, 1)},
                     "online": {**_rate(ok, args.episodes), "seconds": round(t3 - t2, 1)}})
        log(f"twogap step {step}: offline first {rows[-1]['offline']['first_nmae']}, online {ok}/{args.episodes}")
    online = [r["online"]["success_rate"] for r in rows]
    return {"device": "sim:twogap-push", "train_episodes": args.train_episodes, "heldout_episodes": args.episodes,
            "stride": args.stride, "baseline_mean_action_first_nmae": round(
                rep["baseline_mean_action"]["first"]["nmae_mean"], 4), "checkpoints": rows,
            "rank_agreement": {"first_action": _ranks([-r["offline"]["first_nmae"] for r in rows], online),
                               "chunk": _ranks([-r["offline"]["chunk_nmae"] for r in rows], online)},
            "seconds": {"data": round(t_data), "train": round(t_train),
                        "eval": round(time.perf_counter() - t0 - t_data - t_train)}}


GUI_URI = "gui-sim:all?split=test&shift=layout"


def bench_gui(args, work: Path, log) -> dict:
    from embodia.agent.recording.gui_log import GuiRecorder
    from embodia.agent.training.gui_data import GuiTeacher
    from embodia.agent.training.gui_train import GuiTrainConfig, train_gui_head
    from embodia.policies import BUNDLED_CHECKPOINTS
    from embodia.policies.gui.head import GuiHeadPolicy, save_gui_head
    from embodia.policies.gui.head_encoding import HEAD_CONFIG, HEAD_WEIGHTS
    t0 = time.perf_counter()
    held = work / "gui-heldout"
    if not held.exists():
        with open_device(GUI_URI) as dev:
            rec = GuiRecorder(held, dev.embodiment)
            teacher = GuiTeacher(dev)
            for i in range(args.episodes):
                run_episode(dev, teacher, seed=args.seed + i, recorder=rec,
                            episode_meta={"device": GUI_URI, "policy": "teacher"})
    keep = sorted({int(s) for s in args.gui_saves.split(",")})
    base = work / "gui-ck"
    if not all((work / f"gui-ck-{s}" / HEAD_WEIGHTS).exists() for s in keep):
        shutil.rmtree(base, ignore_errors=True)
        shutil.copytree(BUNDLED_CHECKPOINTS / "embodia-tiny", base,
                        ignore=shutil.ignore_patterns(HEAD_WEIGHTS, HEAD_CONFIG))

        def on_save(step, head):
            if step in keep:
                dst = work / f"gui-ck-{step}"
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(base, dst)
                save_gui_head(head, dst, extra={"trained_steps": step})
        from math import gcd
        every = keep[0]
        for s in keep[1:]:
            every = gcd(every, s)
        train_gui_head(GuiTrainConfig(out=str(base), episodes=args.gui_train_episodes, steps=keep[-1],
                                      threads=args.threads), log=log, progress=False, on_save=on_save,
                       save_every=every)
    t_train = time.perf_counter() - t0
    rows = []
    for step in keep:
        with open_device(GUI_URI) as dev:
            pol = GuiHeadPolicy.from_pretrained(work / f"gui-ck-{step}", threads=args.threads).bind(dev.embodiment)
            t1 = time.perf_counter()
            rep = score_gui(held, pol, seed=args.seed)
            t2 = time.perf_counter()
            ok = sum(bool(run_episode(dev, pol, seed=args.seed + i).success) for i in range(args.episodes))
            t3 = time.perf_counter()
        o = rep["overall"]
        rows.append({"step": step, "offline": {m: {"rate": round(o[m]["rate"], 4), "ci95": o[m]["ci95"], "n": o[m]["n"]}
                                               for m in ("step_success", "type", "grounding", "text")
                                               if o[m]["rate"] is not None} | {"seconds": round(t2 - t1, 1)},
                     "online": {**_rate(ok, args.episodes), "seconds": round(t3 - t2, 1)}})
        log(f"gui step {step}: offline step success {o['step_success']['rate']:.3f}, online {ok}/{args.episodes}")
    online = [r["online"]["success_rate"] for r in rows]
    return {"device": GUI_URI, "train_episodes": args.gui_train_episodes, "heldout_episodes": args.episodes,
            "heldout_steps": rep["steps"], "chance": rep["chance"], "checkpoints": rows,
            "rank_agreement": {"step_success": _ranks([r["offline"]["step_success"]["rate"] for r in rows], online),
                               "grounding": _ranks([r["offline"]["grounding"]["rate"] for r in rows], online)},
            "seconds": {"train": round(t_train), "eval": round(time.perf_counter() - t0 - t_train)}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="twogap,gui")
    ap.add_argument("--work", type=Path, default=Path("/tmp/offline_vs_online"))
    ap.add_argument("--episodes", type=int, default=20, help="held-out recorded episodes = online episodes (same seeds)")
    ap.add_argument("--seed", type=int, default=50000)
    ap.add_argument("--stride", type=int, default=4, help="twogap: score every Nth recorded step")
    ap.add_argument("--train-episodes", type=int, default=100)
    ap.add_argument("--twogap-saves", default="200,600,1500", help="training steps of the three checkpoints")
    ap.add_argument("--freeze-after", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32, help="twogap: batch (twice that once the backbone is frozen)")
    ap.add_argument("--gui-train-episodes", type=int, default=200)
    ap.add_argument("--gui-saves", default="50,150,400")
    ap.add_argument("--threads", type=int, default=1)
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    log = lambda *a: print(*a, file=__import__("sys").stderr, flush=True)   # noqa: E731
    t0 = time.perf_counter()
    out = {"benchmark": "offline_vs_online", "episodes": args.episodes, "seed": args.seed}
    for task in args.tasks.split(","):
        out[task] = {"twogap": bench_twogap, "gui": bench_gui}[task](args, args.work, log)
    out.update(seconds=round(time.perf_counter() - t0),
               machine=f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}",
               date=time.strftime("%Y-%m-%d"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
