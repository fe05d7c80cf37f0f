"""Build tests/data/lerobot_pusher/: a tiny dataset written by LeRobot's own writer
(`LeRobotDataset.create` / `add_frame` / `save_episode` / `finalize`), from twogap-push expert episodes.

Two stages, one file:

1. In embodia's environment it records a few short expert episodes of ``sim:twogap-push`` into an
   ``.npz`` (states, actions, 96x96 frames, instructions).
2. It then runs itself in a scratch environment that has LeRobot (``--python``, default
   /tmp/lerobot-venv/bin/python) to write them with LeRobot's writer: PNG images in parquet
   (``dtype: image``, no video), LeRobot's own stats, tasks and episodes metadata, and no
   ``embodia`` section, so a reader has to rebuild the embodiment from the features.

    python3 -m venv /tmp/lerobot-venv
    /tmp/lerobot-venv/bin/pip install torch==2.13.0 lerobot==0.4.4 --no-deps
    /tmp/lerobot-venv/bin/pip install "datasets>=4,<5" "huggingface-hub>=0.34.2,<0.36" "av>=15,<16" \\
        jsonlines draccus==0.10.0 "packaging<26" imageio "opencv-python-headless<4.13" einops deepdiff \\
        termcolor pandas pyarrow "gymnasium>=1.1.1,<2"
    python tests/data/make_lerobot_fixture.py              # writes tests/data/lerobot_pusher

LeRobot 0.4.4 asks for torch<2.11 and imports torchvision at module level; here only torch 2.13.0+cpu
installs, and PyPI's torchvision is a CUDA build that does not load beside it. The writer never
calls torchvision (images are PNG-encoded with PIL, stats computed with numpy), so when
``import torchvision`` fails, stage 2 puts an import-only placeholder package on ``sys.path``
first: any use of it raises, so the dataset cannot silently depend on it.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "lerobot_pusher"
EPISODES, STEPS, FPS = 3, 16, 10
STATE_NAMES = ["pusher_x", "pusher_y", "pusher_vx", "pusher_vy", "puck_x", "puck_y", "puck_vx", "puck_vy",
               "goal_x", "goal_y"]
ACTION_NAMES = ["vx", "vy"]


def record(npz: Path) -> None:
    """Stage 1 (embodia's environment): short expert episodes of twogap-push."""
    import numpy as np

    from embodia.devices import open_device
    dev = open_device("sim:twogap-push")
    pol = dev.expert()
    out = {}
    for e in range(EPISODES):
        obs = dev.reset(seed=e)
        pol.reset(seed=e)
        states, actions, frames = [], [], []
        while len(actions) < STEPS:
            for a in pol.act(obs, dev.instruction):
                if len(actions) == STEPS:
                    break
                states.append(obs.state)
                frames.append(obs.images["top"])
                actions.append(dev.act(a))
                obs = dev.observe()
        out[f"state_{e}"], out[f"action_{e}"] = np.stack(states), np.stack(actions)
        out[f"frames_{e}"], out[f"task_{e}"] = np.stack(frames), np.array(dev.instruction)
    dev.close()
    np.savez_compressed(npz, **out)


PLACEHOLDER = '''"""Import-only placeholder for torchvision (see make_lerobot_fixture.py); any use raises."""
def __getattr__(name):
    raise AttributeError(f"torchvision.{name}: a placeholder here, the writer must not need it")
'''


def write(npz: Path, out: Path) -> None:
    """Stage 2 (the LeRobot environment): LeRobot's writer."""
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError, OSError):
        shim = Path(tempfile.mkdtemp()) / "torchvision"
        for sub in ("", "transforms", "transforms/v2", "transforms/v2/functional", "transforms/functional"):
            (shim / sub).mkdir(parents=True, exist_ok=True)
            (shim / sub / "__init__.py").write_text(PLACEHOLDER)
        sys.path.insert(0, str(shim.parent))
        sys.modules.pop("torchvision", None)
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    data = np.load(npz)
    features = {
        "observation.state": {"dtype": "float32", "shape": (len(STATE_NAMES),), "names": STATE_NAMES},
        "action": {"dtype": "float32", "shape": (len(ACTION_NAMES),), "names": ACTION_NAMES},
        "observation.images.top": {"dtype": "image", "shape": (96, 96, 3), "names": ["height", "width", "channels"]},
    }
    ds = LeRobotDataset.create(repo_id="embodia/lerobot_pusher", fps=FPS, features=features, root=out,
                               robot_type="planar_pusher", use_videos=False)
    for e in range(EPISODES):
        for t in range(len(data[f"action_{e}"])):
            ds.add_frame({"observation.state": data[f"state_{e}"][t].astype(np.float32),
                          "action": data[f"action_{e}"][t].astype(np.float32),
                          "observation.images.top": data[f"frames_{e}"][t],
                          "task": str(data[f"task_{e}"])})
        ds.save_episode()
    ds.finalize()
    import lerobot
    print(f"wrote {out} with lerobot {lerobot.__version__}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default="/tmp/lerobot-venv/bin/python", help="a Python with lerobot installed")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--write", type=Path, help=argparse.SUPPRESS)     # stage 2: the recorded .npz
    args = ap.parse_args()
    if args.write:
        write(args.write, args.out)
        return
    if args.out.exists():
        sys.exit(f"{args.out} exists; remove it first")
    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "episodes.npz"
        record(npz)
        subprocess.run([args.python, __file__, "--write", str(npz), "--out", str(args.out)], check=True,
                       cwd=tmp)   # not the repo root: the LeRobot side must not import this checkout


if __name__ == "__main__":
    main()
