"""A SmolVLA trained by LeRobot's own trainer on demonstrations embodia records: one resumable command.

    embodia train smolvla --tasks push-v3,reach-v3 --episodes 50 \\
        --data data/lerobot-mt6 --out ckpt/smolvla-mt6 --steps 20000

1. Records the scripted experts' successful episodes of each Meta-World task under LeRobot's view
   (``sim:metaworld/<task>?obs=lerobot``) into one LeRobotDataset v3 (``--data``), counting what is
   already there so a stopped run records only what is missing.
2. Builds the starting SmolVLA with LeRobot's own ``save_pretrained`` (`embodia.policies.lerobot_build`,
   in LeRobot's environment; the dataset's statistics go into its processors).
3. Trains it with ``lerobot-train`` (LeRobot's trainer, in LeRobot's environment), every weight
   trainable, on the CPU or ``--policy-device cuda``; run again after a stop and it resumes from
   ``<out>/train/checkpoints/last``.

The trained policy is ``<out>/train/checkpoints/last/pretrained_model``, a directory LeRobot saved:
``embodia run --policy lerobot:<that dir>`` drives it (docs/lerobot.md).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from embodia.policies.robot.lerobot import SERVER, lerobot_python

SEED = 1000     # demonstrations start at this seed (evaluations use others)


def recorded(data: Path) -> dict[str, int]:
    """Episodes per task string already in the dataset at ``data`` ({} when there is none)."""
    counts: dict[str, int] = {}
    for f in sorted((data / "meta" / "episodes").glob("*/*.parquet")):
        for tasks in pq.read_table(f, columns=["tasks"]).column("tasks").to_pylist():
            for t in tasks or []:
                counts[t] = counts.get(t, 0) + 1
    return counts


def record(tasks: list[str], episodes: int, data: Path) -> None:
    """Record what is missing, task by task (one writer: the tasks share the dataset)."""
    from embodia.devices import open_device
    for task in tasks:
        uri = f"sim:metaworld/{task}?obs=lerobot"
        with open_device(uri) as dev:
            instruction = dev.instruction
        have = recorded(data).get(instruction, 0)
        if have >= episodes:
            print(f"{task}: {have} episodes recorded already", flush=True)
            continue
        cmd = [sys.executable, "-m", "embodia", "record", "--device", uri, "--policy", "expert",
               "--episodes", str(episodes - have), "--seed", str(SEED + 10 * have), "--only-success",
               "--out", str(data)]
        print(f"{task}: recording {episodes - have} more episodes", flush=True)
        subprocess.run(cmd, check=True)


def build(out: Path, data: Path, *, size: int, chunk: int, exec_horizon: int, hidden: int, layers: int) -> Path:
    """The starting SmolVLA (random weights), once."""
    init = out / "init"
    if (init / "model.safetensors").is_file():
        return init
    stats = json.loads((data / "meta" / "stats.json").read_text())
    keep = {k: {s: v for s, v in d.items() if s in ("mean", "std", "min", "max")} for k, d in stats.items()
            if k in ("observation.state", "action", "observation.images.corner2")}
    out.mkdir(parents=True, exist_ok=True)
    (out / "stats.json").write_text(json.dumps(keep))
    builder = Path(SERVER).with_name("lerobot_build.py")
    subprocess.run([lerobot_python(), str(builder), "smolvla", str(init), "--size", str(size), "--chunk", str(chunk),
                    "--n-action-steps", str(exec_horizon), "--hidden", str(hidden), "--layers", str(layers),
                    "--stats", str(out / "stats.json")], check=True)
    return init


def trained_step(last: Path) -> int:
    """The trainer's step at its last checkpoint (0: none yet)."""
    f = last.parent / "training_state" / "training_step.json"
    return int(json.loads(f.read_text()).get("step", 0)) if f.is_file() else 0


def train(out: Path, data: Path, init: Path, *, steps: int, batch_size: int, save_freq: int, device: str) -> Path:
    """LeRobot's trainer from ``init``, or resumed from its last checkpoint."""
    run = out / "train"
    trainer = str(Path(lerobot_python()).with_name("lerobot-train"))
    last = run / "checkpoints" / "last" / "pretrained_model"
    if trained_step(last) >= steps:
        print(f"trained to step {trained_step(last)} already: {last}", flush=True)
        return last
    if (last / "train_config.json").is_file():
        cmd = [trainer, f"--config_path={last / 'train_config.json'}", "--resume=true", f"--steps={steps}"]
    else:
        cmd = [trainer, f"--policy.path={init}", "--dataset.repo_id=local/embodia", f"--dataset.root={data}",
               "--dataset.video_backend=pyav", f"--output_dir={run}", f"--steps={steps}",
               f"--batch_size={batch_size}", f"--save_freq={save_freq}", "--log_freq=100", "--num_workers=0",
               f"--policy.device={device}", "--policy.push_to_hub=false", "--wandb.enable=false",
               "--policy.train_expert_only=false", "--policy.freeze_vision_encoder=false"]
    subprocess.run(cmd, check=True, env=None)
    return last


BUNDLE_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")


def bundle(last: Path, init: Path, dest: Path, command: list[str]) -> dict:
    """A self-contained copy of the trained policy for the repository: LeRobot's files, the VLM folder
    it reads (``vlm/``, which the LeRobot side prefers to the path in config.json) and ``bundle.json``
    (the weights' sha256 and size, the trainer's step, the command that rebuilds it)."""
    import hashlib
    import shutil
    dest.mkdir(parents=True, exist_ok=True)
    names = [*BUNDLE_FILES, *sorted(p.name for p in last.glob("policy_*processor*.safetensors"))]
    for name in names:
        shutil.copy2(last / name, dest / name)
    shutil.rmtree(dest / "vlm", ignore_errors=True)
    shutil.copytree(init / "vlm", dest / "vlm")
    # the folder it carries, named relative to itself (the LeRobot side reads <dir>/vlm; no path of this machine)
    cfg = json.loads((dest / "config.json").read_text())
    cfg["vlm_model_name"] = "vlm"
    (dest / "config.json").write_text(json.dumps(cfg, indent=4) + "\n")
    pre = json.loads((dest / "policy_preprocessor.json").read_text())
    for step in pre.get("steps", []):
        if "tokenizer_name" in step.get("config", {}):
            step["config"]["tokenizer_name"] = "vlm"
    (dest / "policy_preprocessor.json").write_text(json.dumps(pre, indent=2) + "\n")
    weights = (dest / "model.safetensors").read_bytes()
    facts = {"sha256": hashlib.sha256(weights).hexdigest(), "bytes": len(weights), "step": trained_step(last),
             "rebuild": " ".join(command)}
    (dest / "bundle.json").write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def record_and_train(*, tasks: list[str], episodes: int, data: Path, out: Path, steps: int, batch_size: int,
                     save_freq: int, size: int, chunk: int, exec_horizon: int, hidden: int, layers: int,
                     policy_device: str, record_only: bool, bundle_to: Path | None, command: list[str]) -> None:
    """The three steps above, each resuming; then, with ``bundle_to``, the self-contained copy whose
    bundle.json says ``command`` rebuilds it."""
    record(tasks, episodes, data)
    if record_only:
        return
    init = build(out, data, size=size, chunk=chunk, exec_horizon=exec_horizon, hidden=hidden, layers=layers)
    last = train(out, data, init, steps=steps, batch_size=batch_size, save_freq=save_freq, device=policy_device)
    print(f"trained: {last} (embodia run --policy lerobot:{last})")
    if bundle_to is not None:
        facts = bundle(last, init, bundle_to, command)
        print(f"bundled to {bundle_to}: sha256 {facts['sha256']}, {facts['bytes']} bytes, step {facts['step']}")
