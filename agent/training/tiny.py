"""Rebuild the bundled `embodia-tiny` from scratch: record expert demos, then train.

    embodia train tiny                          # writes policies/checkpoints/embodia-tiny
    embodia train tiny --data /tmp/demos --out /tmp/tiny --steps 6000

Demos come from the scripted experts on the *unshifted* tasks only (twogap-push, D=2; Meta-World
reach-v3 on the Sawyer arm, D=4): the shifted settings are where the success memory must prove
itself later, so the model never sees them.
"""
from __future__ import annotations

import time
from pathlib import Path

from embodia.policies import BUNDLED_CHECKPOINTS

DEMOS = [  # (device, episodes, first seed, expert action noise): seeds far from the 0.. range of evaluation
    ("sim:twogap-push", 400, 1000, 0.25),
    ("sim:metaworld/reach-v3", 200, 1000, None),
]
# twogap demos are recorded with a noisier expert (std 0.25 instead of 0.05, DART-style): the
# perturbations show the expert's corrections from states a learned policy drifts into. A state-only
# head replanning every 4 steps reached 0.45 of 40 episodes with noise 0.15 and 0.68 with 0.25
# (same data size and training; docs/benchmarks/sim-memory.md, "Why the scene changed").
BUNDLE = BUNDLED_CHECKPOINTS / "embodia-tiny"


def record_demos(root: Path, log=print) -> list[Path]:
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.recording.writer import DatasetWriter
    from embodia.devices import open_device
    dirs = []
    for uri, episodes, seed, noise in DEMOS:
        out = root / uri.split(":", 1)[1].replace("/", "-")
        dirs.append(out)
        with open_device(uri) as dev:
            writer = DatasetWriter(out, dev.embodiment)
            have = writer.num_episodes          # a rerun tops an interrupted recording up
            policy = dev.expert() if noise is None else dev.expert(noise=noise)
            t0 = time.perf_counter()
            for i in range(have, episodes):
                run_episode(dev, policy, seed=seed + i, recorder=writer,
                            episode_meta={"device": uri, "policy": "expert", "expert_noise": noise})
            writer.close()
        log(f"{uri}: {episodes} demos in {out} ({time.perf_counter() - t0:.0f} s)")
    return dirs


def rebuild(data: Path, out: Path, *, steps: int, seed: int = 0, resume: bool = False, log=print) -> None:
    """Record the demos into ``data`` (a rerun tops them up), then train ``out`` on them."""
    from embodia.agent.training.train import TrainConfig, train
    t0 = time.perf_counter()
    dirs = record_demos(data, log=log)
    t1 = time.perf_counter()
    train(TrainConfig(data=[str(d) for d in dirs], out=str(out), steps=steps, seed=seed), resume=resume)
    log(f"demos {t1 - t0:.0f} s, training {time.perf_counter() - t1:.0f} s; checkpoint in {out}")
