"""The trainer's frame loading, before and after issue 38's follow-up, side by side in one run.

"before": each episode decoded with the decoder's default threads and resized frame by frame
(`Backbone.preprocess_images`), datasets in threads (as `load_frames` was, 1 and N threads; video datasets only);
"after": `embodia.agent.training.frames.load_frames` (whole-episode resize, in-process with 1 job,
worker processes with N). Every variant's frames are checked equal to the first one's. Prints one
JSON line: wall ms per frame for each (best of --repeats), CPU ms per frame (this process and its
workers: what the load costs whatever else runs on the machine), the workers' start, the cores.

    embodia train mt50 --tasks reach-v3,push-v3,drawer-open-v3,button-press-v3 \
        --episodes 10 --record-only --data /tmp/mt50-4
    python benchmarks/frame_loading.py --data /tmp/mt50-4 --jobs 1 2
"""
from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from embodia.agent.recording.dataset import LocalDataset, decode_video
from embodia.agent.training.frames import load_frames, usable_cores
from embodia.devices.observation import IMAGES

# torch and the trainer are imported in main(): a spawned worker re-imports this script's top
# level, and should pay what a worker of `embodia train mt50` pays, no more


def old_frames(ds: LocalDataset, i: int, camera: str) -> np.ndarray:
    """`LocalDataset.frames` of a video camera as it was: the video's path checked on every call."""
    key, row = f"{IMAGES}.{camera}", ds.episodes[i]
    return decode_video(ds.video_file(row, key), start=row.get(f"videos/{key}/from_timestamp") or 0.0,
                        count=int(row["length"]), fps=ds.fps)


def before(datasets, chosen, backbone, threads: int) -> list:
    """The loading as it was: per frame through `preprocess_images`, one dataset per thread."""
    def one(k: int) -> list:
        ds = datasets[k]
        return [[backbone.preprocess_images(list(old_frames(ds, i, c.name))).numpy() for c in ds.embodiment.cameras]
                for i in chosen[k]]
    if threads <= 1:
        return [one(k) for k in range(len(datasets))]
    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(one, range(len(datasets))))


def cpu_seconds() -> float:
    """User + system seconds of this process and of its children that have ended (the workers)."""
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def same(a: list, b: list) -> bool:
    return all(np.array_equal(x, y) for p, q in zip(a, b) for r, s in zip(p, q) for x, y in zip(r, s))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, nargs="+", required=True, help="datasets, or a folder of them")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="threads (before) and processes (after)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    from embodia.agent.training.train import TrainConfig, build_model, expand_data, training_episodes
    torch.set_num_threads(1)
    datasets = [LocalDataset(d) for d in expand_data(args.data)]
    chosen = [training_episodes(ds, log=lambda *_: None) for ds in datasets]
    backbone = build_model(TrainConfig(data=[], out=""), datasets).backbone
    variants = {f"before_{n}_threads": (lambda n=n: before(datasets, chosen, backbone, n)) for n in args.jobs}
    variants |= {f"after_{n}_jobs": (lambda n=n: load_frames(datasets, chosen, backbone, jobs=n, log=lambda *_: None))
                 for n in args.jobs}
    ms, cpu_ms, reference, frames = {}, {}, None, 0
    for _ in range(args.repeats):         # interleaved, so a busy spell on a shared machine hits every variant
        for name, run in variants.items():
            t, c = time.perf_counter(), cpu_seconds()
            got = run()
            seconds, cpu = time.perf_counter() - t, cpu_seconds() - c
            if reference is None:
                reference = got
                frames = sum(len(cams[0]) for ds in got for cams in ds)
            elif not same(reference, got):
                raise SystemExit(f"error: {name} loaded other frames than {next(iter(variants))}")
            ms[name] = min(ms.get(name, float("inf")), round(1000 * seconds / frames, 3))
            cpu_ms[name] = min(cpu_ms.get(name, float("inf")), round(1000 * cpu / frames, 3))
    n = min(max(args.jobs), len(datasets))      # the workers' fixed cost: n processes, one short episode each
    t = time.perf_counter()
    load_frames(datasets[:n], [[min(range(ds.num_episodes), key=lambda i, ds=ds: ds.episodes[i]["length"])]
                               for ds in datasets[:n]], backbone, jobs=n, log=lambda *_: None)
    print(json.dumps({"benchmark": "frame_loading", "datasets": len(datasets), "frames": frames,
                      "cores": usable_cores(), "cpu_count": os.cpu_count(), "ms_per_frame": ms,
                      "cpu_ms_per_frame": cpu_ms,                       f"start_{n}_jobs_s": round(time.perf_counter() - t, 2), "same_frames": True,
                      "repeats": args.repeats}))


if __name__ == "__main__":
    main()
