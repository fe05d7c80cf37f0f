"""A desktop variant of `embodia-tiny`'s GUI head: trained on the desktop bench's expert demos (real
Debian applications read through AT-SPI) plus gui-sim demos, into a folder of its own.

    python -m embodia.agent.training.desktop_train --out data/embodia-tiny-desktop
    python -m embodia.agent.training.desktop_train --out /tmp/d --bench-episodes 4 --sim-episodes 100 --steps 200

It copies the bundled checkpoint (backbone, robot head, GUI head) into ``--out``, records
``--bench-episodes`` expert episodes per task of `HEAD_TASKS` on the bench's *train* split (seeds
``--seed``..; values 2..299 and the train word and file pools, never the held-out ones) under its
own Xvfb and accessibility bus, writes them as GUI step logs under ``--out``/demos (the format of
``embodia record``; ``embodia replay`` and ``embodia eval --offline`` read them), mixes in
``--sim-episodes`` gui-sim teacher episodes, and fine-tunes the copied GUI head on both
(`embodia.agent.training.gui_train.fit`; the bench steps drawn ``--bench-repeat`` times as often).
The bundled checkpoint itself is never written.

`HEAD_TASKS` are the bench tasks whose expert actions the head can express: clicks on tree elements
and typing a span of the instruction into an element. The others need key combinations (ctrl+s,
ctrl+w) and text that is not in the instruction (``=SUM(A1:A3)``), which the head's action
vocabulary does not have.

Defaults (12 demos per task, 600 gui-sim episodes, 1,500 steps) take about 10-15 minutes on a
shared 2-core machine.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from embodia.policies import BUNDLED_CHECKPOINTS

HEAD_TASKS = ("galculator/add", "galculator/subtract", "galculator/multiply", "galculator/divide", "mousepad/type")
BUNDLE = BUNDLED_CHECKPOINTS / "embodia-tiny"


def head_can_do(action) -> bool:
    """A click on an element, or typing into an element (the head takes the text from the instruction)."""
    return action.element is not None and action.type in ("click", "type")


@contextmanager
def bench_display(workdir: Path):
    """An Xvfb (1280x800) with an accessibility bus, as $DISPLAY for the block."""
    from embodia.devices.atspi import start_bus
    from embodia.devices.base import environ
    from embodia.devices.xvfb import start_xvfb
    server = start_xvfb(1280, 800, workdir=workdir)
    with environ(DISPLAY=server.display, XAUTHORITY=server.env["XAUTHORITY"]):
        bus = start_bus(server.display)
        try:
            yield server
        finally:
            bus.stop()
            server.stop()


def iter_bench_demos(tasks, episodes: int, *, seed: int = 10_000, out: Path | None = None, log=print):
    """Expert episodes on the bench's train split, one `GuiStep` per action the head can express
    (waits for a window are left out); only episodes the bench verified as successes. With ``out``,
    every episode is also recorded as a GUI step log under ``out/<app>-<task>``."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.safety import SafetyGate
    from embodia.agent.recording.gui_log import GuiRecorder
    from embodia.agent.training.gui_data import HISTORY, GuiStep
    from embodia.policies.gui.head import describe
    from embodia.sim.desktop_bench import GATE_ALLOW, open_desktop_bench
    for task in tasks:
        t0, kept, ok = time.perf_counter(), 0, 0
        with open_desktop_bench(task, split="train", settle=0.4) as dev:
            rec = GuiRecorder(out / task.replace("/", "-"), dev.embodiment) if out is not None else None
            for i in range(episodes):
                pairs: list = []
                r = run_episode(dev, dev.expert(), seed=seed + i, recorder=rec, gate=SafetyGate(allow=GATE_ALLOW),
                                on_step=lambda t, obs, a, nxt: pairs.append((obs, a)) and None,
                                episode_meta={"device": f"desktop-bench:{task}", "policy": "expert"})
                if not r.success:
                    continue
                ok += 1
                history: list[str] = []
                for obs, a in pairs:
                    if not head_can_do(a):
                        continue
                    kept += 1
                    yield GuiStep(r.instruction, history[-HISTORY:], obs.ui_tree, obs.images["screen"], obs.screen,
                                  a, task, dev.embodiment.prompt(), {"seed": seed + i, "task": task})
                    history.append(describe(a, obs.ui_tree))
        log(f"{task}: {ok}/{episodes} expert demos, {kept} steps ({time.perf_counter() - t0:.0f} s)")


def train_desktop_head(out: Path, *, tasks=HEAD_TASKS, bench_episodes: int = 12, sim_episodes: int = 600,
                       steps: int = 1500, seed: int = 10_000, bench_repeat: int = 2, log=print,
                       progress: bool = False) -> dict:
    """Copy the bundled checkpoint to ``out``, record and encode the demos, fine-tune its GUI head;
    returns what was done (counts and seconds), also written into ``out``/gui_head.json."""
    import torch

    from embodia.agent.training.gui_data import iter_gui_demos
    from embodia.agent.training.gui_train import GuiTrainConfig, build_samples, fit
    from embodia.policies.gui.head import SequenceBuilder, load_gui_head, save_gui_head
    out = Path(out)
    if out.resolve() == BUNDLE.resolve():
        raise ValueError(f"{out} is the bundled checkpoint: train the desktop variant into a folder of its own")
    if not out.exists():
        shutil.copytree(BUNDLE, out)
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    head, backbone, _ = load_gui_head(out)
    builder = SequenceBuilder(backbone, head.cfg)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d, bench_display(Path(d)):
        bench = build_samples(iter_bench_demos(tasks, bench_episodes, seed=seed, out=out / "demos", log=log),
                              builder, backbone, log=log)
    t1 = time.perf_counter()
    sim = build_samples(iter_gui_demos(sim_episodes, seed=seed), builder, backbone, log=log)
    t2 = time.perf_counter()
    cfg = GuiTrainConfig(out=str(out), episodes=sim_episodes, seed=seed, steps=steps, warmup=min(200, steps // 10),
                         lr=1e-3)
    fit(head, sim + bench * bench_repeat, cfg, log=log, progress=progress)
    t3 = time.perf_counter()
    done = {"bench_tasks": list(tasks), "bench_episodes_per_task": bench_episodes, "bench_samples": len(bench),
            "bench_repeat": bench_repeat, "sim_episodes": sim_episodes, "sim_samples": len(sim),
            "fine_tuned_from": "bundled embodia-tiny GUI head", "train_config": asdict(cfg),
            "seconds": {"bench_demos": round(t1 - t0), "sim_demos": round(t2 - t1), "train": round(t3 - t2)}}
    save_gui_head(head, out, extra={"trained_steps": steps, "desktop": done})
    log(f"bench demos {t1 - t0:.0f} s, gui-sim demos {t2 - t1:.0f} s, training {t3 - t2:.0f} s; head in {out}")
    return done


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("data/embodia-tiny-desktop"))
    ap.add_argument("--bench-episodes", type=int, default=12, help="expert demos per bench task")
    ap.add_argument("--sim-episodes", type=int, default=600, help="gui-sim teacher episodes")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--bench-repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=10_000)
    ap.add_argument("--tasks", default=",".join(HEAD_TASKS))
    args = ap.parse_args(argv)
    train_desktop_head(args.out, tasks=[t for t in args.tasks.split(",") if t], bench_episodes=args.bench_episodes,
                       sim_episodes=args.sim_episodes, steps=args.steps, seed=args.seed,
                       bench_repeat=args.bench_repeat, progress=sys.stderr.isatty())


if __name__ == "__main__":
    main()
