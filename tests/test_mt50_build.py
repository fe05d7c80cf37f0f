"""`embodia train mt50`: demos recorded in worker processes (--jobs) are the demos
one process records, a failing worker fails the build in one line, and the training half trains
where --torch-device / --dtype say."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("metaworld")

from typer.testing import CliRunner  # noqa: E402

from embodia.agent.cli import app  # noqa: E402
from embodia.agent.recording.dataset import LocalDataset  # noqa: E402

TASKS = ["reach-v3", "button-press-v3", "drawer-close-v3"]


def _datasets(root: Path) -> dict:
    """Per task: every episode's seed, success and length, and its state and action arrays."""
    out = {}
    for task in TASKS:
        ds = LocalDataset(root / task)
        eps = [(e["seed"], e["success"], e["length"]) for e in ds.episodes]
        arrays = [ds.episode(i) for i in range(len(ds.episodes))]
        out[task] = (eps, [(a["state"].tolist(), a["action"].tolist()) for a in arrays])
    return out


def mt50(argv: list[str]):
    """`embodia train mt50 ARGV` in this process; a refusal or a failure is the command's exit."""
    res = CliRunner().invoke(app, ["train", "mt50", *argv], catch_exceptions=False)
    if res.exit_code:
        raise SystemExit(res.exit_code)
    print(res.stdout, end="")
    return res


def _row(out: Path) -> dict:
    return json.loads(out.with_name(out.name + ".sessions.jsonl").read_text().splitlines()[-1])


def test_jobs_record_the_datasets_one_process_records_then_train_where_asked(tmp_path, capsys):
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["--episodes", "2", "--tasks", ",".join(TASKS), "--record-only"]
    mt50(["--data", str(one / "d"), "--out", str(one / "ckpt"), "--jobs", "1", *common])
    mt50(["--data", str(two / "d"), "--out", str(two / "ckpt"), "--jobs", "2", *common])
    printed = capsys.readouterr().out
    assert all(f"{t}: 2 demos (" in printed for t in TASKS), printed     # a line per task from the workers too
    serial, parallel = _datasets(one / "d"), _datasets(two / "d")
    assert [s for s, _, _ in serial["reach-v3"][0]] == [1000, 1001]
    assert parallel == serial
    rows = _row(one / "ckpt"), _row(two / "ckpt")
    assert [r["jobs"] for r in rows] == [1, 2] and all(r["finished"] and "record_s" in r for r in rows)
    assert rows[0]["demos"] == rows[1]["demos"] == 6 and rows[0]["recorded"] == rows[1]["recorded"]

    # the training half on those demos (the recording resumes: nothing new), where --torch-device says
    mt50(["--data", str(two / "d"), "--out", str(two / "ckpt"), "--episodes", "2", "--tasks", ",".join(TASKS),
               "--steps", "2", "--save-every", "2", "--freeze-after", "0", "--torch-device", "cpu",
               "--dtype", "bfloat16", "--bundle", str(two / "bundle"), "--exec-horizon", "2", "--patch-size", "8"])
    row = _row(two / "ckpt")
    assert row["torch"] == "cpu bfloat16" and row["finished"] and row["saved_step"] == 2 and "train_s" in row
    trained = json.loads((two / "bundle" / "config.json").read_text())["train_config"]
    assert (trained["torch_device"], trained["dtype"], trained["batch_size"]) == ("cpu", "bfloat16", 64)
    assert sorted(Path(d).name for d in trained["data"]) == sorted(TASKS)
    from embodia.policies.robot.vla import VLAPolicy
    assert VLAPolicy.from_pretrained(two / "bundle").exec_horizon == 2      # decides every 2 actions, not 8

    # the trainer loads the datasets in worker processes: the frames of this process, in the same order
    import numpy as np

    from embodia.agent.training.frames import load_frames
    from embodia.policies.robot.vla import load_checkpoint
    backbone = load_checkpoint(two / "bundle")[0].backbone
    # --patch-size 8: the 96x96 demo image is read whole (not resized to 84x84), as 6x6 = 36 image tokens
    assert (backbone.patch_size, backbone.model.config.vision_config.patch_size) == (8, 8)
    assert backbone.factor == 16 and trained["patch_size"] == 8
    datasets, chosen = [LocalDataset(two / "d" / t) for t in TASKS], [[1, 0]] * len(TASKS)
    workers = load_frames(datasets, chosen, backbone, jobs=2)
    one = load_frames(datasets, chosen, backbone, jobs=1)
    shapes = [[[tuple(c.shape) for c in ep] for ep in ds] for ds in one]
    assert shapes == [[[tuple(c.shape) for c in ep] for ep in ds] for ds in workers]
    assert all(np.array_equal(a, b) for x, y in zip(one, workers) for p, q in zip(x, y) for a, b in zip(p, q))
    assert shapes[0][0][0][0] == datasets[0].episodes[1]["length"]      # episode 1 first, as asked


def test_a_failing_worker_fails_the_build_in_one_line_and_keeps_the_row(tmp_path):
    data, out = tmp_path / "d", tmp_path / "ckpt"
    (data / "reach-v3" / "meta").mkdir(parents=True)
    (data / "reach-v3" / "meta" / "info.json").write_text("{not json")    # a damaged earlier recording
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MUJOCO_GL": "egl"}
    res = subprocess.run([sys.executable, "-m", "embodia", "train", "mt50", "--data", str(data), "--out", str(out),
                          "--episodes", "1", "--tasks", "button-press-v3,reach-v3", "--jobs", "2", "--record-only"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 1, res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in res.stderr, res.stderr
    assert err[0].startswith("error: recording reach-v3 failed in a worker process: DatasetError"), err
    row = _row(out)
    assert row["finished"] is False and row["stopped"].startswith("recording reach-v3 failed") and "wall_s" in row


def test_bad_options_are_refused_in_one_line_before_any_recording(tmp_path):
    for argv, says in ((["--jobs", "0"], "Invalid value for '--jobs'"),
                       (["--tasks", "reach-v3,nope-v3"], "--tasks: not MT50 tasks: nope-v3"),
                       (["--patch-size", "0"], "Invalid value for '--patch-size'"),
                       (["--torch-device", "tpu"], "--torch-device 'tpu'")):
        res = CliRunner().invoke(app, ["train", "mt50", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "o"),
                                       *argv])
        assert res.exit_code == 2 and says in res.output, res.output
        assert len([line for line in res.output.splitlines() if line.strip()]) == 1, res.output
    assert not (tmp_path / "d").exists() and not (tmp_path / "o.sessions.jsonl").exists()


def test_the_rebuild_summary_times_each_part_from_the_stamped_log(tmp_path):
    import bench_module
    summary = bench_module.load("rebuild_summary")
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "100.0 train: reach-v3,push-v3, 2000 steps, 150 s left",
        "101.0 reach-v3: 50 demos (50 recorded, 50 from before)",
        "111.9 /tmp/mt50/reach-v3: sawyer, 50 episodes, 1000 frames",
        "112.0 /tmp/mt50/push-v3: sawyer, 50 episodes, 2000 frames",      # 12 s from the start: 4 ms a frame
        "not a stamped line",
        "120.0 step 250: loss 0.5 (mean since the last checkpoint), saved /tmp/ckpt",
        "127.5 step 1000: loss 0.3 (mean since the last checkpoint), saved /tmp/ckpt",   # 10 ms a step
        "129.0 cached backbone context for sawyer: (1000, 223, 64)",
        "130.5 cached backbone context for sawyer: (2000, 223, 64)",
        "133.0 step 1250: loss 0.2 (mean since the last checkpoint), saved /tmp/ckpt",
        "137.0 step 2000: loss 0.1 (mean since the last checkpoint), saved /tmp/ckpt"]) + "\n")   # 5.33 ms a step
    parts = summary.train_parts(summary.stamped(log))
    assert parts == {"frames_loaded": 3000, "load_s": 12.0, "load_ms_per_frame": 4.0, "step_ms_end_to_end": 10.0,
                     "cache_s": 3.0, "step_ms_head_only": 5.33, "last_saved_step": 2000}
    full = summary.projection(90, parts, frames=30000, loaded=3000)
    # loading and the cache scaled by frames (x10); 1,000 x 10 ms + 4,000 x 5.33 ms
    assert full == {"record_s": 90, "load_s": 120, "cache_s": 30, "steps_s": 31, "total_s": 271, "measured": False}
    assert summary.projection(90, parts, frames=3000, loaded=3000)["load_s"] == 12     # all loaded: as measured
    cut = summary.train_parts(summary.stamped(log)[:4])       # stopped while loading: nothing to project from
    assert cut["step_ms_end_to_end"] is None and summary.projection(90, cut, frames=30000, loaded=3000) is None


def test_the_faster_video_decode_gives_pyavs_own_frames(tmp_path):
    """decode_video converts every frame of a file with one scaler (what the trainer's loading spends
    its time on); the pixels are PyAV's per-frame `to_ndarray(format="rgb24")`, to the byte."""
    import av
    import numpy as np

    from embodia.agent.recording.dataset import decode_video
    path, rng = tmp_path / "v.mp4", np.random.default_rng(0)
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 96, 96, "yuv420p"
        for i in range(12):
            img = rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    with av.open(str(path)) as c:
        expected = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])])
    assert np.array_equal(decode_video(path, fps=10), expected)
    assert np.array_equal(decode_video(path, start=0.5, count=4, fps=10), expected[5:9])
