"""Recording: crash-safe step logs, the LeRobotDataset v3.0 layout (read back with pyarrow and PyAV
directly, not through our reader), resume, recovery after SIGKILL, and the reader's errors."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
av = pytest.importorskip("av")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from embodia.agent.recording.dataset import LocalDataset  # noqa: E402
from embodia.agent.recording.dataset_checks import DatasetError  # noqa: E402
from embodia.agent.recording.steplog import read_steplog  # noqa: E402
from embodia.agent.recording.steplog import RecordingError  # noqa: E402
from embodia.agent.recording.writer import DatasetWriter, EmbodimentMismatch  # noqa: E402
from embodia.devices.embodiment import Camera, Channel, Embodiment  # noqa: E402
from embodia.devices.observation import Observation  # noqa: E402

HERE = Path(__file__).resolve().parent
S, D, H, W = 10, 2, 96, 96
STATE, ACTION, IMG = "observation.state", "action", "observation.images.top"


def make_embodiment(width=W, height=H, name="toy_arm") -> Embodiment:
    return Embodiment(
        name=name, kind="toy arm", hz=10.0,
        actions=(Channel("vx", -1, 1, "m/s"), Channel("vy", -1, 1, "m/s")),
        state=tuple(Channel(f"q{i}", unit="rad") for i in range(S)),
        cameras=(Camera("top", width, height),), chunk=8, exec_horizon=4,
        convention="synthetic test body")


def make_step(i: int, seed: int = 0, width=W, height=H):
    """Deterministic (Observation, action) for frame i: smooth random image, random state/action."""
    rng = np.random.default_rng([seed, i])
    img = cv2.resize(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8), (width, height),
                     interpolation=cv2.INTER_LINEAR)
    state = rng.standard_normal(S).astype(np.float32)
    action = rng.uniform(-1, 1, D).astype(np.float32)
    return Observation(images={"top": img}, state=state, timestamp=100.0 + i * 0.1), action


def record(w: DatasetWriter, n: int, seed: int, task: str, success=True, **kw):
    ep = w.begin_episode(task=task, seed=seed, meta={"device": "fake://toy", "policy": "random"})
    states, actions, images = [], [], []
    for i in range(n):
        obs, a = make_step(i, seed, **kw)
        ep.add_step(obs, a, timing={"policy_ms": 1.5, "device_ms": 0.25})
        states.append(obs.state), actions.append(a), images.append(obs.images["top"])
    idx = w.end_episode(ep, success=success, final_state=states[-1] + 1, info={"seed_used": seed})
    return idx, np.stack(states), np.stack(actions), np.stack(images)


def decode_mp4(path):
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        frames, times = [], []
        for f in c.decode(st):
            frames.append(f.to_ndarray(format="rgb24"))
            times.append(float(f.time))
        return np.stack(frames), times, st.codec_context.name, st.codec_context.pix_fmt


LENGTHS = (40, 25, 30)
TASKS = ("push left", "push right", "push left")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("rec") / "ds"
    eps = []
    with DatasetWriter(root, make_embodiment()) as w:
        for k, (n, task) in enumerate(zip(LENGTHS, TASKS)):
            idx, st, ac, im = record(w, n, seed=10 + k, task=task, success=(k != 1))
            assert idx == k
            eps.append(dict(state=st, action=ac, images=im, task=task, seed=10 + k, success=(k != 1)))
    return root, eps


# -- layout, read back with pyarrow / PyAV directly ---------------------------------------------------
def test_info_json_fields_and_feature_schema(dataset):
    root, eps = dataset
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["robot_type"] == "toy_arm" and info["fps"] == 10
    assert info["total_episodes"] == 3 and info["total_frames"] == sum(LENGTHS) and info["total_tasks"] == 2
    assert info["chunks_size"] == 1000 and info["splits"] == {"train": "0:3"}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    f = info["features"]
    assert f[STATE] == {"dtype": "float32", "shape": [S], "names": [f"q{i}" for i in range(S)]}
    assert f[ACTION] == {"dtype": "float32", "shape": [D], "names": ["vx", "vy"]}
    assert f[IMG]["dtype"] == "video" and f[IMG]["shape"] == [H, W, 3]
    assert f[IMG]["names"] == ["height", "width", "channels"]
    vi = f[IMG]["info"]
    assert (vi["video.height"], vi["video.width"], vi["video.codec"], vi["video.pix_fmt"]) == (H, W, "h264", "yuv420p")
    assert vi["video.fps"] == 10 and vi["video.channels"] == 3 and vi["video.is_depth_map"] is False
    assert vi["has_audio"] is False
    for key, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                       ("index", "int64"), ("task_index", "int64")):
        assert f[key] == {"dtype": dtype, "shape": [1], "names": None}
    assert Embodiment.from_dict(info["embodia"]["embodiment"]) == make_embodiment()
    # nothing else visible to LeRobot readers besides meta/, data/, videos/ (step logs are hidden)
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["data", "meta", "videos"]
    assert not list((root / ".steplogs").glob("*.jsonl"))


def test_data_and_metadata_parquet_with_pyarrow(dataset):
    root, eps = dataset
    info = json.loads((root / "meta/info.json").read_text())
    epi = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [r["episode_index"] for r in epi] == [0, 1, 2]
    start = 0
    for k, (r, e) in enumerate(zip(epi, eps)):
        n = len(e["state"])
        assert r["length"] == n and r["tasks"] == [e["task"]]
        assert (r["dataset_from_index"], r["dataset_to_index"]) == (start, start + n)
        assert (r["data/chunk_index"], r["data/file_index"]) == (0, k)
        assert (r[f"videos/{IMG}/chunk_index"], r[f"videos/{IMG}/file_index"]) == (0, k)
        assert r[f"videos/{IMG}/from_timestamp"] == 0.0 and r[f"videos/{IMG}/to_timestamp"] == pytest.approx(n / 10)
        assert (r["meta/episodes/chunk_index"], r["meta/episodes/file_index"]) == (0, 0)
        assert r["embodia/seed"] == e["seed"] and r["embodia/success"] is e["success"]
        assert r["embodia/interrupted"] is False
        assert np.allclose(r["embodia/final_state"], e["state"][-1] + 1)
        assert json.loads(r["embodia/info"]) == {"seed_used": e["seed"]}
        assert json.loads(r["embodia/meta"])["device"] == "fake://toy"
        timing = json.loads(r["embodia/timing"])
        assert timing["policy_ms"]["mean"] == pytest.approx(1.5)
        assert timing["obs_interval_ms"]["mean"] == pytest.approx(100.0)
        for s in ("min", "max", "mean", "std"):
            assert np.allclose(r[f"stats/{STATE}/{s}"], getattr(np, s)(e["state"].astype(np.float64), axis=0))
        assert r[f"stats/{ACTION}/count"] == [n]

        path = root / info["data_path"].format(chunk_index=0, file_index=k)
        t = pq.read_table(path)
        assert set(t.column_names) == {STATE, ACTION, "timestamp", "frame_index", "episode_index", "index",
                                       "task_index", "intervention"}
        assert not any(t.column("intervention").to_pylist())            # no person took over
        assert t.schema.field(STATE).type == pa.list_(pa.float32(), S)      # fixed-size, like HF Sequence
        assert t.schema.field(ACTION).type == pa.list_(pa.float32(), D)
        assert t.schema.field("timestamp").type == pa.float32()
        assert t.num_rows == n
        d = t.to_pydict()
        assert np.array_equal(np.array(d[STATE], np.float32), e["state"])    # exact, not just close
        assert np.array_equal(np.array(d[ACTION], np.float32), e["action"])
        assert d["frame_index"] == list(range(n)) and d["episode_index"] == [k] * n
        assert d["index"] == list(range(start, start + n))
        assert np.allclose(d["timestamp"], np.arange(n) / 10.0)
        tasks = pq.read_table(root / "meta/tasks.parquet").to_pydict()
        assert d["task_index"] == [tasks["task"].index(e["task"])] * n
        start += n
    assert start == info["total_frames"]
    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks.column_names == ["task_index", "task"]
    assert tasks.to_pydict() == {"task_index": [0, 1], "task": ["push left", "push right"]}
    pandas_meta = json.loads(tasks.schema.metadata[b"pandas"])
    assert pandas_meta["index_columns"] == ["task"]       # pandas.read_parquet -> indexed by task, as LeRobot


def test_videos_decode_with_pyav(dataset):
    root, eps = dataset
    for k, e in enumerate(eps):
        path = root / f"videos/{IMG}/chunk-000/file-{k:03d}.mp4"
        frames, times, codec, pix_fmt = decode_mp4(path)
        n = len(e["images"])
        assert frames.shape == (n, H, W, 3) and codec == "h264" and pix_fmt == "yuv420p"
        assert np.allclose(times, np.arange(n) / 10.0, atol=1e-6)
        err = np.abs(frames.astype(np.int16) - e["images"].astype(np.int16)).mean(axis=(1, 2, 3))
        assert err.max() < 8, err.max()            # lossy h264, but the same pictures ...
        shuffled = np.abs(frames[1:].astype(np.int16) - e["images"][:-1].astype(np.int16)).mean()
        assert shuffled > 5 * err.mean()           # ... and in the right order


def test_stats_json_matches_numpy(dataset):
    root, eps = dataset
    stats = json.loads((root / "meta/stats.json").read_text())
    for key, name in ((STATE, "state"), (ACTION, "action")):
        x = np.concatenate([e[name] for e in eps]).astype(np.float64)
        st = stats[key]
        assert st["count"] == [len(x)]
        for s, ref in (("min", x.min(0)), ("max", x.max(0)), ("mean", x.mean(0)), ("std", x.std(0)),
                       ("q01", np.quantile(x, 0.01, axis=0)), ("q99", np.quantile(x, 0.99, axis=0)),
                       ("q50", np.quantile(x, 0.5, axis=0))):
            assert np.allclose(st[s], ref, rtol=1e-9, atol=1e-12), (key, s)
    imgs = np.concatenate([e["images"] for e in eps]).reshape(-1, 3).astype(np.float64) / 255.0
    st = stats[IMG]
    assert np.array(st["mean"]).shape == (3, 1, 1) and st["count"] == [sum(LENGTHS)]
    for s, ref in (("min", imgs.min(0)), ("max", imgs.max(0)), ("mean", imgs.mean(0)), ("std", imgs.std(0))):
        assert np.allclose(np.array(st[s]).ravel(), ref, atol=1e-9), s


def test_local_dataset_reader(dataset):
    root, eps = dataset
    ds = LocalDataset(root)
    assert ds.embodiment == make_embodiment() and ds.num_episodes == 3 and ds.fps == 10.0
    assert [r["seed"] for r in ds.episodes] == [10, 11, 12]
    assert [r["success"] for r in ds.episodes] == [True, False, True]
    for k, e in enumerate(eps):
        ep = ds.episode(k)
        assert np.array_equal(ep["state"], e["state"]) and np.array_equal(ep["action"], e["action"])
        assert ep["state"].dtype == np.float32 and ep["task"] == e["task"] and ep["seed"] == e["seed"]
        assert ep["success"] is e["success"] and ep["info"] == {"seed_used": e["seed"]}
        assert ep["meta"]["policy"] == "random" and np.allclose(ep["final_state"], e["state"][-1] + 1)
        assert np.allclose(ep["timestamp"], np.arange(len(e["state"])) / 10.0)
        fr = ds.frames(k, "top")
        assert fr.shape == e["images"].shape and np.abs(fr.astype(int) - e["images"]).mean() < 8
    assert np.allclose(ds.stats[STATE]["q99"], np.quantile(np.concatenate([e["state"] for e in eps]), 0.99, axis=0))
    with pytest.raises(IndexError):
        ds.episode(3)
    with pytest.raises(KeyError, match="top"):
        ds.frames(0, "wrist")


# -- resume -----------------------------------------------------------------------------------------
def test_resume_appends_with_continuing_indices(tmp_path):
    root = tmp_path / "ds"
    with DatasetWriter(root, make_embodiment()) as w:
        record(w, 12, seed=1, task="a")
        record(w, 7, seed=2, task="b")
        with pytest.raises(RecordingError, match="another process|being written"):
            DatasetWriter(root, make_embodiment())           # one writer at a time
    w2 = DatasetWriter(root, make_embodiment())
    assert w2.num_episodes == 2
    idx, st, _, _ = record(w2, 9, seed=3, task="a")
    w2.close()
    assert idx == 2
    info = json.loads((root / "meta/info.json").read_text())
    assert info["total_episodes"] == 3 and info["total_frames"] == 28 and info["total_tasks"] == 2
    t = pq.read_table(root / "data/chunk-000/file-002.parquet").to_pydict()
    assert t["index"] == list(range(19, 28)) and t["episode_index"] == [2] * 9 and t["task_index"] == [0] * 9
    epi = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert epi["dataset_from_index"] == [0, 12, 19] and epi["dataset_to_index"] == [12, 19, 28]
    assert np.array_equal(LocalDataset(root).episode(2)["state"], st)

    other = make_embodiment(name="other_arm")
    with pytest.raises(EmbodimentMismatch, match="name"):
        DatasetWriter(root, other)
    with pytest.raises(EmbodimentMismatch, match="fps"):
        DatasetWriter(root, make_embodiment(), fps=30)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    with pytest.raises(RecordingError, match="not empty"):
        DatasetWriter(tmp_path / "junk", make_embodiment())


# -- crash safety -----------------------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from test_recording import make_embodiment, make_step
    from embodia.agent.recording.writer import DatasetWriter
    w = DatasetWriter(sys.argv[1], make_embodiment())
    ep = w.begin_episode(task="crash test", seed=7, meta={"device": "child"})
    print("log", ep.path, flush=True)
    for i in range(100000):
        obs, a = make_step(i, seed=7)
        ep.add_step(obs, a, timing={"policy_ms": 0.1})
        print(i, flush=True)
        time.sleep(0.002)
""")


def test_sigkill_mid_episode_loses_nothing_that_was_acknowledged(tmp_path):
    root = tmp_path / "ds"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(root), str(HERE)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("log "), proc.stderr.read()
        log = Path(first.split(" ", 1)[1].strip())
        printed = -1
        deadline = time.monotonic() + 30
        while printed < 30 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            printed = int(line)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        for line in proc.stdout.read().split():      # acknowledged before the kill, still in the pipe
            printed = int(line)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL and printed >= 30

    header, steps, end = read_steplog(log)
    assert end is None and header["task"] == "crash test" and header["seed"] == 7
    assert Embodiment.from_dict(header["embodiment"]) == make_embodiment()
    assert printed + 1 <= len(steps) <= printed + 2        # every acknowledged step, at most one more
    for i, s in enumerate(steps):
        obs, a = make_step(i, seed=7)
        assert s["frame_index"] == i
        assert np.array_equal(s["state"], obs.state) and np.array_equal(s["action"], a)
        assert np.array_equal(s["images"]["top"], obs.images["top"])     # lossless in the log

    w = DatasetWriter(root, make_embodiment(), recover=False)
    assert w.recover() == [0]
    w.close()
    assert not log.exists()
    n = len(steps)
    info = json.loads((root / "meta/info.json").read_text())
    assert info["total_episodes"] == 1 and info["total_frames"] == n
    row = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()[0]
    assert row["length"] == n and row["embodia/success"] is False and row["embodia/interrupted"] is True
    assert json.loads(row["embodia/info"]) == {"interrupted": True} and row["tasks"] == ["crash test"]
    t = pq.read_table(root / "data/chunk-000/file-000.parquet").to_pydict()
    assert t["frame_index"] == list(range(n))
    assert np.array_equal(np.array(t[STATE], np.float32), np.stack([s["state"] for s in steps]))
    frames, times, _, _ = decode_mp4(root / f"videos/{IMG}/chunk-000/file-000.mp4")
    assert len(frames) == n
    assert np.abs(frames.astype(int) - np.stack([s["images"]["top"] for s in steps])).mean() < 8


def test_truncated_last_line_is_ignored_and_recovered_on_open(tmp_path):
    root = tmp_path / "ds"
    w = DatasetWriter(root, make_embodiment())
    ep = w.begin_episode(task="t", seed=1)
    for i in range(5):
        ep.add_step(*make_step(i, 1))
    log = ep.path
    with pytest.warns(RuntimeWarning, match="still open"):
        w.close()                                # the open episode's step log is kept
    with open(log, "ab") as f:                   # a step cut off mid-write by a crash
        f.write(b'{"type":"step","frame_index":5,"state":[0.1,0.2')
    header, steps, end = read_steplog(log)
    assert len(steps) == 5 and end is None
    w = DatasetWriter(root, make_embodiment())   # recover() runs on open
    assert w.num_episodes == 1
    w.close()
    assert not log.exists()
    ep0 = LocalDataset(root).episode(0)
    assert ep0["state"].shape == (5, S) and ep0["interrupted"] and ep0["success"] is False

    bad = tmp_path / "bad.jsonl"                 # a corrupt complete line is an error, with its line number
    bad.write_bytes(b'{"type":"header","format":"embodia-steplog","version":1}\n{not json}\n')
    with pytest.raises(RecordingError, match=r"bad\.jsonl: line 2"):
        read_steplog(bad)


def test_crash_during_commit_rolls_back_then_recovers(tmp_path, monkeypatch):
    """Die after the data/episodes files are written but before info.json: nothing half-committed."""
    import embodia.agent.recording.commit as rec     # the commit writes info.json last
    root = tmp_path / "ds"
    w = DatasetWriter(root, make_embodiment())
    record(w, 6, seed=1, task="a")
    real = rec.write_json

    def failing(path, obj):
        if Path(path).name == "info.json":
            raise OSError("disk gone")
        return real(path, obj)
    monkeypatch.setattr(rec, "write_json", failing)
    with pytest.raises(OSError, match="disk gone"):
        record(w, 8, seed=2, task="b")
    monkeypatch.setattr(rec, "write_json", real)
    w.close()
    # the uncommitted episode's files exist, but readers trust info.json; the episode itself (its
    # step log has the end record) is read from the step log, after the committed one (issue 22)
    assert (root / "data/chunk-000/file-001.parquet").exists()
    assert pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").num_rows == 2
    seen = LocalDataset(root)
    assert seen.committed_episodes == 1 and seen.num_episodes == 2 and len(seen.episodes) == 2
    assert seen.episodes[1]["success"] is True and seen.episode(1)["task"] == "b" and seen.episode(1)["length"] == 8
    w = DatasetWriter(root, make_embodiment(), recover=False)     # rolls back the leftovers
    assert pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").num_rows == 1
    assert not (root / "data/chunk-000/file-001.parquet").exists()
    assert pq.read_table(root / "meta/tasks.parquet").num_rows == 1
    assert w.recover() == [1]                                     # the step log had its end record
    w.close()
    ds = LocalDataset(root)
    assert ds.num_episodes == 2 and ds.episodes[1]["success"] is True and not ds.episodes[1]["interrupted"]
    assert ds.episode(1)["task"] == "b" and ds.tasks == ["a", "b"]


def test_step_log_of_an_already_committed_episode_is_not_added_twice(tmp_path):
    root = tmp_path / "ds"
    w = DatasetWriter(root, make_embodiment())
    ep = w.begin_episode(task="t", seed=1)
    for i in range(4):
        ep.add_step(*make_step(i, 1))
    copy = ep.path.read_bytes()
    w.end_episode(ep, success=True)
    ep.path.write_bytes(copy)            # as if the process died between info.json and the unlink
    assert w.recover() == [] and not ep.path.exists()
    assert w.num_episodes == 1
    # a log whose header never reached the disk is dropped; one from another body is set aside
    (w.steplog_dir / "episode_empty.jsonl").write_bytes(b'{"type":"hea')
    other = DatasetWriter(tmp_path / "other", make_embodiment(name="other_arm"))
    ep = other.begin_episode(task="t")
    ep.add_step(*make_step(0))
    foreign = w.steplog_dir / ep.path.name
    foreign.write_bytes(ep.path.read_bytes())
    other.discard_episode(ep)
    other.close()
    with pytest.warns(RuntimeWarning, match="another embodiment"):
        assert w.recover() == []
    assert not (w.steplog_dir / "episode_empty.jsonl").exists()
    assert not foreign.exists() and foreign.with_name(foreign.name + ".unrecoverable").exists()
    assert w.num_episodes == 1
    w.close()


# -- errors and edge cases --------------------------------------------------------------------------
def test_corrupt_or_missing_dataset_gives_clear_errors(tmp_path, dataset):
    with pytest.raises(DatasetError, match="no such dataset"):
        LocalDataset(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"meta/info\.json: missing"):
        LocalDataset(tmp_path / "empty")
    root = tmp_path / "ds"
    with DatasetWriter(root, make_embodiment()) as w:
        record(w, 3, seed=1, task="t")
    info = root / "meta/info.json"
    info.write_text(info.read_text()[:50])
    with pytest.raises(DatasetError, match=r"info\.json: corrupt JSON"):
        LocalDataset(root)
    with pytest.raises(DatasetError, match=r"info\.json: corrupt JSON"):
        DatasetWriter(root, make_embodiment())
    # a corrupt data file is named too
    root2 = tmp_path / "ds2"
    with DatasetWriter(root2, make_embodiment()) as w:
        record(w, 3, seed=1, task="t")
    (root2 / "data/chunk-000/file-000.parquet").write_bytes(b"garbage")
    with pytest.raises(DatasetError, match=r"file-000\.parquet"):
        LocalDataset(root2).episode(0)


def test_bad_steps_are_refused_and_empty_episodes_dropped(tmp_path):
    w = DatasetWriter(tmp_path / "ds", make_embodiment())
    ep = w.begin_episode(task="t")
    obs, a = make_step(0)
    with pytest.raises(ValueError, match="action"):
        ep.add_step(obs, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="non-finite"):
        ep.add_step(obs, np.array([np.nan, 0], np.float32))
    with pytest.raises(ValueError, match="observation.images.top"):
        ep.add_step(Observation(images={"top": np.zeros((4, 4, 3), np.uint8)}, state=obs.state), a)
    assert ep.num_steps == 0
    assert w.end_episode(ep, success=False) is None and w.num_episodes == 0
    with pytest.raises(RecordingError, match="ended"):
        ep.add_step(obs, a)
    ep2 = w.begin_episode(task="t")
    ep2.add_step(obs, a)
    w.discard_episode(ep2)
    assert not ep2.path.exists() and w.num_episodes == 0
    w.close()


def test_odd_sizes_png_steplog_and_image_mode(tmp_path):
    odd = make_embodiment(width=33, height=21)
    with DatasetWriter(tmp_path / "odd", odd, steplog_images="png") as w:
        _, _, _, imgs = record(w, 5, seed=3, task="t", width=33, height=21)
    info = json.loads((tmp_path / "odd/meta/info.json").read_text())
    assert info["features"][IMG]["info"]["video.pix_fmt"] == "yuv444p"
    frames, _, _, pix = decode_mp4(tmp_path / f"odd/videos/{IMG}/chunk-000/file-000.mp4")
    assert frames.shape == (5, 21, 33, 3) and pix == "yuv444p"
    assert np.abs(frames.astype(int) - imgs).mean() < 8
    with pytest.raises(ValueError, match="even sizes"):
        DatasetWriter(tmp_path / "odd2", odd, codec="mpeg4")
    assert not (tmp_path / "odd2").exists()

    with DatasetWriter(tmp_path / "img", make_embodiment(), video=False) as w:
        _, _, _, imgs = record(w, 4, seed=4, task="t")
    info = json.loads((tmp_path / "img/meta/info.json").read_text())
    assert info["features"][IMG]["dtype"] == "image" and info["video_path"] is None
    t = pq.read_table(tmp_path / "img/data/chunk-000/file-000.parquet")
    cell = t.column(IMG)[0].as_py()
    png = cv2.cvtColor(cv2.imdecode(np.frombuffer(cell["bytes"], np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    assert np.array_equal(png, imgs[0])                                   # lossless
    assert np.array_equal(LocalDataset(tmp_path / "img").frames(0, "top"), imgs)


def test_recording_overhead(tmp_path):
    """add_step must stay far below a control period; end_episode for 100 steps well under a second."""
    w = DatasetWriter(tmp_path / "ds", make_embodiment())
    steps = [make_step(i, 5) for i in range(100)]
    for _ in range(2):                            # second round: warm caches and encoder libraries
        ep = w.begin_episode(task="t", seed=5)
        times = []
        for obs, a in steps:
            t0 = time.perf_counter()
            ep.add_step(obs, a, timing={"policy_ms": 1.0})
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        w.end_episode(ep, success=True, final_state=steps[-1][0].state)
        end_s = time.perf_counter() - t0
    w.close()
    add_ms = 1000 * float(np.median(times))
    print(f"\nadd_step (96x96 camera, state 10, action 2): median {add_ms:.3f} ms, "
          f"p95 {1000 * np.percentile(times, 95):.3f} ms; end_episode (100 steps): {1000 * end_s:.0f} ms")
    assert add_ms < 2.0
    assert end_s < 3.0
