"""The trainer's first minutes: every chosen episode's frames, decoded and resized for the backbone.

On a GPU host the 2,500 MT50 demonstrations (190,174 frames) took 105-130 s to load in 16 threads
(0.55-0.70 ms a frame, against ~0.97 on one thread): decoding, colour conversion and resizing run
in C, but Python runs between those calls for every frame, and threads share one interpreter lock
for it. Several datasets of PROCESS_MIN_FRAMES frames or more, on several cores, therefore load in
spawned worker processes, one dataset per task, one decoder thread each
(`embodia.agent.evaluation.workers.in_processes`, whose `TaskFailed` names the dataset of a failed
worker in one line). One dataset, one core, or a small set loads in this process. Both paths run
the same code per dataset (`dataset_frames`), so their frames are the same bytes.

Worker processes import numpy, PyAV and PIL, not torch: the backbone's resize travels as a
`FrameResize` value with its target sizes already computed.
"""
from __future__ import annotations

import os
import time

import numpy as np

from embodia.agent.recording.dataset import LocalDataset
from embodia.policies.frame_resize import FrameResize

LOADING = "loading the frames of"      # TaskFailed's lines: "loading the frames of <dataset> failed ..."
# Fewer frames than this load in this process whatever the cores: a spawned worker's start (an
# interpreter, numpy, PyAV and the dataset reader: 1.3 s for two on a busy 2-core machine) costs
# more than it saves on a small set (a test's, a CI run's), against ~0.4-1 ms a frame on one core.
PROCESS_MIN_FRAMES = 20_000


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one: a container or
    `taskset` gives fewer than the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:      # macOS, Windows
        return os.cpu_count() or 1


def dataset_frames(ds: LocalDataset, episodes: list[int], resize: FrameResize, threads: int = 0) -> list[list]:
    """Per episode in ``episodes`` (in that order), per camera of the embodiment: its frames resized,
    uint8 [T, h, w, 3]."""
    return [[resize(ds.frames(i, cam.name, threads=threads)) for cam in ds.embodiment.cameras] for i in episodes]


def _worker(root: str, modality: str | None, episodes: list[int], resize: FrameResize) -> tuple[str, list[list]]:
    """One dataset in a worker process: reopened from its folder (a `LocalDataset` is not shared
    between processes), decoded on one thread (the pool's other workers hold the other cores)."""
    return root, dataset_frames(LocalDataset(root, modality=modality), episodes, resize, threads=1)


def load_frames(datasets: list[LocalDataset], chosen: list[list[int]], backbone, *, jobs: int | None = None,
                log=print) -> list[list[list[np.ndarray]]]:
    """Per dataset, per chosen episode, per camera: its frames resized for ``backbone`` (uint8
    [T, h, w, 3], as `Backbone.preprocess_images` gives them). ``jobs``: worker processes, at most
    one per dataset; 1 loads here; None: one per usable core from PROCESS_MIN_FRAMES frames on, else
    1. A line is logged as each dataset's frames arrive, and one for the whole load."""
    sizes = [(c.height, c.width) for ds in datasets for c in ds.embodiment.cameras]
    resize = backbone.frame_resize(sizes)
    unique: dict[str, tuple[LocalDataset, list[int]]] = {}      # a dataset given twice loads once
    for ds, eps in zip(datasets, chosen):
        unique.setdefault(str(ds.root), (ds, list(eps)))
    if jobs is None:
        many = sum(ds.episodes[i]["length"] for ds, eps in unique.values() for i in eps) >= PROCESS_MIN_FRAMES
        jobs = usable_cores() if many else 1
    jobs = max(1, min(jobs, len(unique)))
    t0, got = time.perf_counter(), {}
    progress = _progress(log, len(unique), t0)
    if jobs == 1:
        for root, (ds, eps) in unique.items():
            got[root] = dataset_frames(ds, eps, resize)
            progress(root, got[root])
    else:
        from embodia.agent.evaluation.workers import in_processes
        calls = [(root, ds.modality, eps, resize) for root, (ds, eps) in unique.items()]
        got = in_processes(_worker, calls, jobs, progress, LOADING)
    frames = sum(_count(f) for f in got.values())
    seconds = time.perf_counter() - t0
    log(f"loaded {frames} frames of {len(unique)} datasets in {seconds:.1f} s "
        f"({1000 * seconds / max(frames, 1):.3f} ms a frame, {jobs} {'process' if jobs == 1 else 'processes'})")
    return [got[str(ds.root)] for ds in datasets]


def _count(frames: list[list[np.ndarray]]) -> int:
    return sum(len(cams[0]) if cams else 0 for cams in frames)


def _progress(log, total: int, t0: float):
    """The line each dataset's arrival logs (it does not end in "frames": benchmarks/rebuild_summary.py
    reads the trainer's "<dataset>: <body>, N episodes, M frames" lines)."""
    done = [0]

    def line(root: str, frames: list[list[np.ndarray]]) -> None:
        done[0] += 1
        # short: `embodia train` prints through a console that wraps at 80 columns off a terminal
        log(f"{root}: frames loaded ({done[0]}/{total}, {_count(frames)} frames, {time.perf_counter() - t0:.1f} s)")
    return line
