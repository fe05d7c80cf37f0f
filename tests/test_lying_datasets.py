"""Datasets that lie (issue 35): every verb that reads a LeRobot v3 dataset (eval-offline, replay,
train, memory ingest, view) refuses each lie through the real CLI in one line with exit 2, no
traceback, nothing opened outside the dataset (watched with inotify, which sees the opens of
pyarrow's and FFmpeg's C code too) and no NaN in any report; a hypothesis strategy over info.json's
fields gets a valid read or a DatasetError, never anything else.

The datasets are two expert episodes of sim:twogap-push written by the project's own recorder,
copied and corrupted per case."""
import ctypes
import importlib
import json
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

cli = importlib.import_module("embodia.agent.cli.app")
from embodia.agent.evaluation.evaluate import evaluate, write_json  # noqa: E402
from embodia.agent.recording.dataset import LocalDataset  # noqa: E402
from embodia.agent.recording.dataset_checks import DatasetError  # noqa: E402
from embodia.agent.recording.writer import DatasetWriter  # noqa: E402
from embodia.devices import open_device  # noqa: E402

INFO = "meta/info.json"
DATA0 = "data/chunk-000/file-000.parquet"
DATA1 = "data/chunk-000/file-001.parquet"
VIDEO0 = "videos/observation.images.top/chunk-000/file-000.mp4"
EPISODES0 = "meta/episodes/chunk-000/file-000.parquet"
MARKER = "outside-target"          # the folder of faithful copies a lying path may point at


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Two expert episodes of twogap-push, written by the project's recorder."""
    root = tmp_path_factory.mktemp("base") / "ds"
    with open_device("sim:twogap-push") as dev:
        w = DatasetWriter(root, dev.embodiment)
        evaluate(dev, dev.expert(), episodes=2, seed=0, recorder=w, episode_meta={"device": "sim:twogap-push"})
        w.close()
    shutil.rmtree(root / ".steplogs", ignore_errors=True)
    return root


# -- watching for opens outside the dataset ---------------------------------------------------------
class OpenWatch:
    """inotify IN_OPEN/IN_ACCESS on files and folders: did anything in this process (Python, pyarrow
    or FFmpeg) open or list them? stat() and resolve() do not count, as they read no content."""

    IN_ACCESS, IN_OPEN = 0x1, 0x20

    def __init__(self, paths):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        assert self.fd >= 0, "inotify is not available"
        for p in paths:
            assert self.libc.inotify_add_watch(self.fd, str(p).encode(), self.IN_OPEN | self.IN_ACCESS) >= 0, p

    def events(self) -> int:
        try:
            return len(os.read(self.fd, 1 << 16))
        except BlockingIOError:
            return 0

    def close(self):
        os.close(self.fd)


def test_the_open_watch_sees_a_parquet_read_by_pyarrow(base, tmp_path):
    """The watch itself can fail: a pyarrow read of a watched file is seen, a stat is not."""
    f = tmp_path / "x.parquet"
    shutil.copyfile(base / DATA0, f)
    w = OpenWatch([f])
    f.stat(), f.resolve()
    assert w.events() == 0
    pq.read_table(f)
    assert w.events() > 0
    w.close()


# -- the lies ---------------------------------------------------------------------------------------
def edit_info(**fields):
    """info.json with some top-level fields replaced (NaN written as Python writes it: bare NaN)."""
    def lie(root, outside):
        info = json.loads((root / INFO).read_text())
        info.update(fields)
        (root / INFO).write_text(json.dumps(info))
    return lie


def nested(root, outside):
    (root / INFO).write_text("[" * 100_000)


def empty(root, outside):
    """An honest dataset of no episodes, as the recorder leaves it when nothing was recorded."""
    shutil.rmtree(root)
    with open_device("sim:twogap-push") as dev:
        DatasetWriter(root, dev.embodiment).close()
    shutil.rmtree(root / ".steplogs", ignore_errors=True)


def poke(rel, column, frame, channel, value):
    """One recorded number replaced (NaN, inf) in a data parquet."""
    def lie(root, outside):
        t = pq.read_table(root / rel)
        rows = t.column(column).to_pylist()
        rows[frame][channel] = value
        t = t.set_column(t.schema.get_field_index(column), t.schema.field(column),
                         pa.array(rows, type=t.schema.field(column).type))
        pq.write_table(t, root / rel)
    return lie


def outside_copy(rel, outside):
    """A faithful copy of a dataset file outside the dataset: if a reader followed a path to it,
    the read would succeed, so only a refusal keeps it unopened."""
    return shutil.copyfile(rel, outside / f"{MARKER}-{rel.name}")


def template_to(key, kind, rel_dir):
    """data_path / video_path pointing at copies outside: absolute, or relative with '..'."""
    def lie(root, outside):
        for f in sorted((root / rel_dir).glob("file-*")):
            outside_copy(f, outside)
        ext = "parquet" if key == "data_path" else "mp4"
        target = f"{outside}/{MARKER}-file-{{file_index:03d}}.{ext}"
        if kind == "dotdot":
            target = os.path.relpath(target, root)
            assert ".." in target
        edit_info(**{key: target})(root, outside)
    return lie


def symlink_out(rel, relative=False):
    """A dataset file replaced by a symlink to its copy outside (absolute, or relative with '..')."""
    def lie(root, outside):
        f = root / rel
        target = outside_copy(f, outside)
        f.unlink()
        f.symlink_to(os.path.relpath(target, f.parent) if relative else target)
    return lie


def episodes_dir_out(root, outside):
    """meta/episodes as a relative symlink (with '..') to a copy of it outside."""
    dst = outside / f"{MARKER}-episodes"
    shutil.copytree(root / "meta/episodes", dst)
    shutil.rmtree(root / "meta/episodes")
    (root / "meta/episodes").symlink_to(os.path.relpath(dst, root / "meta"))


def plain_state_3(root, outside):
    """A plain LeRobot dataset (no embodia section) whose metadata agrees on a state of 3 numbers
    (shape, stats) while the data holds 10 a frame: only the data file tells."""
    info = json.loads((root / INFO).read_text())
    info.pop("embodia")
    info["features"]["observation.state"].update(shape=[3], names=None)
    (root / INFO).write_text(json.dumps(info))
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["observation.state"] = {k: v if k == "count" else v[:3] for k, v in stats["observation.state"].items()}
    (root / "meta/stats.json").write_text(json.dumps(stats))


def state_shape(shape, names=None):
    def lie(root, outside):
        info = json.loads((root / INFO).read_text())
        info["features"]["observation.state"].update(shape=shape, names=names)
        (root / INFO).write_text(json.dumps(info))
    return lie


def action_shape(shape):
    def lie(root, outside):
        info = json.loads((root / INFO).read_text())
        info["features"]["action"]["shape"] = shape
        (root / INFO).write_text(json.dumps(info))
    return lie


def modality_out(root, outside):
    """The dataset's own meta/modality.json, a symlink to a valid mapping outside it."""
    target = outside / f"{MARKER}-modality.json"
    target.write_text(json.dumps({"embodiment": "planar_pusher", "action": {"vx": {"start": 0, "end": 1},
                                                                           "vy": {"start": 1, "end": 2}}}))
    (root / "meta/modality.json").symlink_to(target)


def steplogs_out(root, outside):
    """.steplogs (where a killed writer's episodes wait) as a symlink to a folder of logs outside."""
    logs = outside / f"{MARKER}-steplogs"
    logs.mkdir()
    (logs / "episode_0001.jsonl").write_text('{"kind": "header"}\n')
    (root / ".steplogs").symlink_to(logs)


def set_column(rel, column, values, type=None):
    """A column of a parquet file rewritten: ``values`` maps its rows to the lie (``type``: the
    column's new type, e.g. a success stored as text)."""
    def lie(root, outside):
        t = pq.read_table(root / rel)
        arr = pa.array(values(t.column(column).to_pylist()), type=type or t.schema.field(column).type)
        pq.write_table(t.set_column(t.schema.get_field_index(column), pa.field(column, arr.type), arr), root / rel)
    return lie


def at(k, value):
    """Rows with row ``k`` replaced by ``value(rows)``."""
    return lambda rows: rows[:k] + [value(rows)] + rows[k + 1:]


def nan_stats(root, outside):
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["action"]["mean"][0] = float("nan")
    (root / "meta/stats.json").write_text(json.dumps(stats))


LIES = {
    "fps 0": (edit_info(fps=0), "fps"),
    "fps NaN": (edit_info(fps=float("nan")), "fps"),
    "total_episodes 10^12": (edit_info(total_episodes=10 ** 12), "total_episodes"),
    "total_episodes 3 of 2": (edit_info(total_episodes=3), "total_episodes"),
    "total_frames off by one": (edit_info(total_frames=195), "total_frames"),
    "info.json of 100,000 [": (nested, "nested too deeply"),
    "0 episodes": (empty, "no (successful )?episodes"),
    "0 episodes claimed": (edit_info(total_episodes=0, total_frames=0), "no (successful )?episodes"),
    "NaN action": (poke(DATA1, "action", 5, 0, float("nan")), "non-finite"),
    "inf state": (poke(DATA0, "observation.state", 3, 2, float("inf")), "non-finite"),
    "NaN stats": (nan_stats, r"stats\.json: action\.mean"),
    "state [3] for 10 numbers": (state_shape([3]), r"features\.observation\.state\.shape \[3\] but the "
                                                    r"embodiment has 10 state channels"),
    "state [3] with 10 names": (state_shape([3], [f"s{i}" for i in range(10)]),
                                r"features\.observation\.state: 10 names for shape \[3\]"),
    "plain info.json, state [3] for 10 numbers": (plain_state_3, r"observation\.state holds 10 values"),
    "action [100000]": (action_shape([100000]), r"features\.action\.shape"),
    "data_path absolute": (template_to("data_path", "abs", "data/chunk-000"), "data_path"),
    "data_path ..": (template_to("data_path", "dotdot", "data/chunk-000"), "data_path"),
    "data file symlinked out": (symlink_out(DATA0), "outside the dataset"),
    "video_path absolute": (template_to("video_path", "abs", "videos/observation.images.top/chunk-000"),
                            "video_path"),
    "video_path ..": (template_to("video_path", "dotdot", "videos/observation.images.top/chunk-000"),
                      "video_path"),
    "video symlinked out (..)": (symlink_out(VIDEO0, relative=True), "outside the dataset"),
    "meta/episodes file symlinked out": (symlink_out(EPISODES0), "outside the dataset"),
    "info.json symlinked out": (symlink_out(INFO), "outside the dataset"),
    "stats.json symlinked out": (symlink_out("meta/stats.json"), "outside the dataset"),
    "tasks.parquet symlinked out": (symlink_out("meta/tasks.parquet"), "outside the dataset"),
    "modality.json symlinked out": (modality_out, "outside the dataset"),
    # issue 56: a success as text ("no" is true in Python), a repeated frame, time going backwards or
    # NaN, actions stored as text (which numpy parses)
    "success 'no'": (set_column(EPISODES0, "embodia/success", lambda rows: ["no"] * len(rows), pa.string()),
                     "embodia/success 'no' is not true, false or null"),
    "frame_index repeated": (set_column(DATA0, "frame_index", at(3, lambda rows: rows[2])),
                             "frame_index does not rise at frame 3"),
    "timestamp backwards": (set_column(DATA0, "timestamp", at(5, lambda rows: rows[4] - 1.0)),
                            "timestamp does not rise at frame 5"),
    "timestamp NaN": (set_column(DATA0, "timestamp", at(3, lambda rows: float("nan"))),
                      "timestamp is not a finite number at frame 3"),
    "actions as text": (set_column(DATA1, "action", lambda rows: [[str(x) for x in r] for r in rows],
                                   pa.list_(pa.string())), "action: holds lists of string, not of numbers"),
    ".steplogs symlinked out": (steplogs_out, "outside the dataset"),
    "meta/episodes symlinked out (..)": (episodes_dir_out, "outside the dataset"),
}


def make(base, tmp_path, lie) -> tuple[Path, Path]:
    """A corrupted copy of ``base`` and the folder of outside targets it may point at."""
    root, outside = tmp_path / "ds", tmp_path / f"{MARKER}-outside"
    shutil.copytree(base, root)
    outside.mkdir()
    lie(root, outside)
    return root, outside


VERBS = {
    "eval-offline": lambda ds, tmp: ["eval-offline", ds, "--policy", "recorded", "--json", tmp / "report.json"],
    "replay": lambda ds, tmp: ["replay", ds, "--episode", "all", "--json", tmp / "report.json"],
    "train": lambda ds, tmp: ["train", "--data", ds, "--out", tmp / "ckpt", "--steps", "1", "--batch-size", "2",
                              "--hidden", "32", "--layers", "1", "--save-every", "1"],
    "memory ingest": lambda ds, tmp: ["memory", "ingest", tmp / "mem", "--data", ds],
    "view": lambda ds, tmp: ["view", ds, "--out", tmp / "view"],
}


def invoke(args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def strict_json(path: Path):
    """A report parsed as strict JSON: bare NaN/Infinity (which Python would accept) is a failure."""
    def refuse(c):
        raise AssertionError(f"{path} holds bare {c}")
    return json.loads(path.read_text(), parse_constant=refuse)


def assert_refused(r, tmp: Path, words: str):
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2, (r.exit_code, r.output, repr(r.exception))
    assert isinstance(r.exception, SystemExit), repr(r.exception)          # no traceback
    assert "Traceback" not in r.output and len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert re.search(words, r.output, re.I), (words, r.output)
    assert not (tmp / "report.json").exists()


@pytest.mark.parametrize("verb", list(VERBS))
@pytest.mark.parametrize("name", list(LIES))
def test_every_verb_refuses_every_lie_in_one_line(base, tmp_path, name, verb):
    lie, words = LIES[name]
    root, outside = make(base, tmp_path, lie)
    watched = [outside, *outside.rglob("*")]
    watch = OpenWatch(watched)
    try:
        r = invoke(VERBS[verb](root, tmp_path))
        assert_refused(r, tmp_path, words)
        assert watch.events() == 0, f"{verb} opened a file outside the dataset ({name})"
    finally:
        watch.close()


@pytest.mark.parametrize("name", ["fps 0", "NaN action", "data_path ..", "0 episodes"])
def test_train_refuses_a_lying_held_out_set_before_training(base, tmp_path, name):
    lie, words = LIES[name]
    root, _ = make(base, tmp_path, lie)
    r = invoke(["train", "--data", base, "--heldout", root, *VERBS["train"](root, tmp_path)[3:]])
    assert_refused(r, tmp_path, words)
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize("verb", ["eval-offline", "train"])
def test_an_svg_in_place_of_a_video_is_refused_by_every_verb_that_decodes_it(base, tmp_path, verb):
    """Before: an AttributeError traceback (FFmpeg reads the SVG as a stream it has no decoder for)."""
    def svg(root, outside):
        (root / VIDEO0).write_text('<svg xmlns="http://www.w3.org/2000/svg" width="96" height="96"></svg>')
    root, _ = make(base, tmp_path, svg)
    assert_refused(invoke(VERBS[verb](root, tmp_path)), tmp_path, "not a video this FFmpeg can decode")


@pytest.mark.parametrize("verb", ["eval-offline", "replay", "view"])
def test_the_honest_dataset_passes_the_same_verbs(base, tmp_path, verb):
    """The control: the uncorrupted copy is read, so the refusals above are the lies' doing."""
    root, _ = make(base, tmp_path, lambda root, outside: None)
    r = invoke(VERBS[verb](root, tmp_path))
    assert r.exit_code == 0, r.output
    if verb != "view":
        strict_json(tmp_path / "report.json")


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["train", "memory ingest"])
def test_the_honest_dataset_trains_and_ingests(base, tmp_path, verb):
    root, _ = make(base, tmp_path, lambda root, outside: None)
    r = invoke(VERBS[verb](root, tmp_path))
    assert r.exit_code == 0, r.output
    assert ("checkpoint written" if verb == "train" else "ingested 2 successful episodes") in r.output


def test_a_stray_nested_info_json_beside_a_dataset_is_no_gui_recording(base, tmp_path):
    """Every dataset verb first asks whether its folder is a GUI recording (a root info.json): a
    nested one is a plain no, and the dataset is read as what it is."""
    from embodia.agent.recording.gui_log import is_gui_recording
    root, _ = make(base, tmp_path, lambda root, outside: (root / "info.json").write_text("[" * 100_000))
    assert not is_gui_recording(root)
    assert invoke(VERBS["view"](root, tmp_path)).exit_code == 0


def test_an_info_json_over_the_size_cap_is_refused_before_it_is_read(base, tmp_path, monkeypatch):
    from embodia.agent.recording import dataset_checks
    root, _ = make(base, tmp_path, lambda root, outside: None)
    monkeypatch.setattr(dataset_checks, "MAX_JSON_BYTES", 1000)       # the real cap is 64 MB
    with pytest.raises(DatasetError, match=r"info\.json: \d+ bytes, more than the 1000"):
        LocalDataset(root)


def test_a_report_with_a_nan_is_written_as_valid_json(tmp_path):
    """A policy may predict NaN; the report then holds null, never bare NaN/Infinity."""
    write_json({"mae": float("nan"), "per": [np.float32("inf"), 1.5], "n": np.int64(3)}, tmp_path / "r.json")
    assert strict_json(tmp_path / "r.json") == {"mae": None, "per": [None, 1.5], "n": 3}


# -- hypothesis over info.json fields ---------------------------------------------------------------
values = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
    st.sampled_from([0, 1, 2, 3, 10, 194, 10 ** 12, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.sampled_from(["v3.0", "v2.1", "../x/{file_index}", "/etc/{chunk_index}",
                                           "data/{chunk_index.__class__}", "{video_key}/{0}"]),
    st.lists(st.integers(-3, 200_000), max_size=4),
    st.recursive(st.integers(0, 5), lambda c: st.lists(c, max_size=3), max_leaves=20))
FIELDS = ["fps", "total_episodes", "total_frames", "total_tasks", "codebase_version", "data_path", "video_path",
          "robot_type", "features", "embodia", "features.observation.state.shape", "features.action.shape",
          "features.action.names", "features.observation.images.top.shape",
          "features.observation.images.top.dtype", "features.observation.state.dtype",
          "embodia.embodiment.hz", "embodia.embodiment.chunk", "embodia.embodiment.exec_horizon",
          "embodia.embodiment.name", "embodia.embodiment.actions", "embodia.embodiment.state",
          "embodia.embodiment.cameras"]
FEATURES = ("observation.state", "action", "observation.images.top")


def set_field(info: dict, field: str, value) -> None:
    """info[field] = value, where a field may be a feature's own key (``features.action.shape``) or
    the stored embodiment's (``embodia.embodiment.hz``); skipped when an earlier edit replaced the
    object that held it."""
    def child(d, k):
        return d.get(k) if isinstance(d, dict) else None
    if field.startswith("features.") and field.count(".") >= 2:
        key = next(k for k in FEATURES if field.startswith(f"features.{k}."))
        holder, name = child(child(info, "features"), key), field[len(f"features.{key}."):]
    elif field.startswith("embodia."):
        holder, name = child(child(info, "embodia"), "embodiment"), field.rsplit(".", 1)[-1]
    else:
        holder, name = info, field
    if isinstance(holder, dict):
        holder[name] = value


@pytest.fixture(scope="module")
def scratch(base, tmp_path_factory):
    root = tmp_path_factory.mktemp("hyp") / "ds"
    shutil.copytree(base, root)
    return root


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(edits=st.lists(st.tuples(st.sampled_from(FIELDS), values), min_size=1, max_size=3))
def test_any_info_json_reads_or_is_refused_with_a_dataset_error(base, scratch, edits):
    info = json.loads((base / INFO).read_text())
    for field, value in edits:
        set_field(info, field, value)
    (scratch / INFO).write_text(json.dumps(info))         # NaN/inf written as Python writes them
    try:
        ds = LocalDataset(scratch)
        for i in range(ds.num_episodes):
            ep = ds.episode(i)
            assert np.isfinite(ep["action"]).all() and np.isfinite(ep["state"]).all()
            for cam in ds.embodiment.cameras:
                assert len(ds.frames(i, cam.name)) == ep["length"]
        assert math.isfinite(ds.fps) and ds.fps > 0
    except DatasetError as e:
        assert "\n" not in str(e) and str(scratch) in str(e)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(edits=st.lists(st.tuples(st.sampled_from(FIELDS), values), min_size=1, max_size=3),
       verb=st.sampled_from(["eval-offline", "view"]))
def test_any_info_json_through_the_cli_exits_0_or_2_in_one_line(base, scratch, tmp_path_factory, edits, verb):
    info = json.loads((base / INFO).read_text())
    for field, value in edits:
        set_field(info, field, value)
    (scratch / INFO).write_text(json.dumps(info))
    tmp = tmp_path_factory.mktemp("out")
    r = invoke(VERBS[verb](scratch, tmp))
    assert isinstance(r.exception, SystemExit) or r.exception is None, (edits, repr(r.exception), r.output)
    assert "Traceback" not in r.output
    if r.exit_code == 0:
        if verb == "eval-offline":
            strict_json(tmp / "report.json")
    else:
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (edits, r.output)
