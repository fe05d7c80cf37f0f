"""The trainer's frame loading (`embodia.agent.training.frames`): worker processes load the same
bytes as this process and as the backbone's own per-frame resize, each dataset's arrival is logged,
and a dataset a worker cannot read ends the load, and `embodia train`, in one line naming it."""
import importlib
import re
import shutil

import numpy as np
import pytest

from embodia.agent.loop.episode import run_episode
from embodia.agent.recording.dataset import LocalDataset
from embodia.agent.training import frames as frames_mod
from embodia.agent.training.frames import LOADING, load_frames
from embodia.devices import open_device
from embodia.policies.backbone import Backbone
from embodia.policies.backbone_tiny import tiny_config, train_tokenizer

cli = importlib.import_module("embodia.agent.cli.app")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Three small real datasets (twogap-push, a 96x96 camera): per dataset, a successful expert
    episode (about 100 steps) and one cut at 20 steps."""
    from embodia.agent.recording.writer import DatasetWriter
    roots = []
    with open_device("sim:twogap-push") as dev:
        for k in range(3):
            root = tmp_path_factory.mktemp("frames") / f"twogap-{k}"
            w = DatasetWriter(root, dev.embodiment)
            for s in range(2):
                run_episode(dev, dev.expert(), seed=10 * k + s, recorder=w, max_steps=None if s == 0 else 20)
            w.close()
            roots.append(root)
    return roots


@pytest.fixture(scope="module")
def backbone(recorded):
    ds = LocalDataset(recorded[0])
    tok = train_tokenizer([ds.embodiment.prompt(), *ds.tasks] * 2)
    return Backbone.build(tok, tiny_config(tok), seed=0)


def _images(seed: int, n: int, h: int, w: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def test_a_whole_episode_resized_at_once_is_the_backbone_resize_of_each_frame(backbone):
    fixed = Backbone(backbone.model, backbone.tokenizer, backbone.image_processor, image_size=(112, 56))
    for bb in (backbone, fixed):
        for h, w in ((96, 96), (100, 150), (480, 640), (60, 200), (51, 73), (84, 84)):
            frames = _images(h + w, 5, h, w)
            want = bb.preprocess_images(list(frames)).numpy()
            got = bb.frame_resize([(h, w)])(frames)
            assert got.dtype == np.uint8 and got.flags.c_contiguous and np.array_equal(got, want), (h, w)
    resize = backbone.frame_resize([(96, 96)])
    assert resize(np.zeros((0, 96, 96, 3), np.uint8)).shape == (0, 84, 84, 3)
    with pytest.raises(ValueError, match="frames of 64x48: the cameras are 96x96"):
        resize(_images(0, 2, 48, 64))


def test_worker_processes_load_the_bytes_this_process_loads(recorded, backbone):
    datasets = [LocalDataset(r) for r in recorded]
    chosen = [[1, 0], [0], [1, 0]]            # an order of the caller's, and a subset
    lines = []
    here = load_frames(datasets, chosen, backbone, jobs=1, log=lines.append)
    assert lines[-1].startswith("loaded ") and lines[-1].endswith(" ms a frame, 1 process)")
    lines.clear()
    workers = load_frames(datasets, chosen, backbone, jobs=2, log=lines.append)
    # the frames as the backbone resizes them, frame by frame, from the reader
    want = [[[backbone.preprocess_images(list(ds.frames(i, "top"))).numpy()] for i in eps]
            for ds, eps in zip(datasets, chosen)]
    for got in (here, workers):
        assert [[len(cams) for cams in ds] for ds in got] == [[1, 1], [1], [1, 1]]
        for g, w in zip(got, want):
            assert all(np.array_equal(a[0], b[0]) and a[0].dtype == np.uint8 for a, b in zip(g, w))
    assert len(workers[0][0][0]) == datasets[0].episodes[1]["length"] != datasets[0].episodes[0]["length"]
    # a line as each dataset arrives (any order, counted 1/3 to 3/3), then one for the whole load
    arrived = [re.fullmatch(r"(.+): frames loaded \((\d)/3, (\d+) frames, [\d.]+ s\)", line).groups()
               for line in lines[:-1]]
    assert [k for _, k, _ in arrived] == ["1", "2", "3"]
    counts = {str(ds.root): sum(ds.episodes[i]["length"] for i in eps) for ds, eps in zip(datasets, chosen)}
    assert {root: int(n) for root, _, n in arrived} == counts
    n = sum(len(cams[0]) for ds in here for cams in ds)
    assert lines[-1].startswith(f"loaded {n} frames of 3 datasets in ") and lines[-1].endswith("2 processes)")


def test_small_loads_stay_in_this_process_and_a_dataset_given_twice_loads_once(recorded, backbone, monkeypatch):
    datasets = [LocalDataset(recorded[0]), LocalDataset(recorded[1]), LocalDataset(recorded[0])]
    monkeypatch.setattr(frames_mod, "usable_cores", lambda: 4)
    lines = []
    got = load_frames(datasets, [[0, 1], [0, 1], [0, 1]], backbone, log=lines.append)
    assert lines[-1].endswith("1 process)") and " of 2 datasets " in lines[-1]      # under PROCESS_MIN_FRAMES
    assert got[0] is got[2]
    monkeypatch.setattr(frames_mod, "PROCESS_MIN_FRAMES", 1)
    again = load_frames(datasets, [[0, 1], [0, 1], [0, 1]], backbone, log=lines.append)
    assert lines[-1].endswith("2 processes)")          # 4 cores, but 2 distinct datasets
    assert all(np.array_equal(a[0], b[0]) for x, y in zip(got, again) for a, b in zip(x, y))


def _corrupt_copy(src, dst):
    shutil.copytree(src, dst)
    video = min(dst.glob("videos/*/chunk-*/file-000.mp4"))     # the successful episode's
    video.write_bytes(b"\0not an mp4" * 64)
    return video


def test_a_dataset_a_worker_cannot_read_ends_the_load_in_one_line_naming_it(recorded, backbone, tmp_path):
    bad = tmp_path / "broken"
    video = _corrupt_copy(recorded[1], bad)
    datasets = [LocalDataset(recorded[0]), LocalDataset(bad), LocalDataset(recorded[2])]
    from embodia.agent.evaluation.workers import TaskFailed
    with pytest.raises(TaskFailed) as e:
        load_frames(datasets, [[0, 1]] * 3, backbone, jobs=2, log=lambda *_: None)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{LOADING} {bad} failed in a worker process: DatasetError: ")
    assert f"{video}: corrupt or unreadable video" in msg


def test_embodia_train_says_which_dataset_failed_to_load_in_one_line(recorded, tmp_path, monkeypatch, one_thread):
    from typer.testing import CliRunner
    bad = tmp_path / "broken"
    _corrupt_copy(recorded[1], bad)
    monkeypatch.setattr(frames_mod, "PROCESS_MIN_FRAMES", 1)     # this small set in worker processes
    monkeypatch.setattr(frames_mod, "usable_cores", lambda: 2)
    r = CliRunner().invoke(cli.app, ["train", "--data", str(recorded[0]), "--data", str(bad), "--out",
                                     str(tmp_path / "ckpt"), "--steps", "2", "--threads", "1",
                                     "--torch-device", "cpu"])
    out = r.output.strip().splitlines()
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert out[-1].startswith(f"error: {LOADING} {bad} failed in a worker process: DatasetError: "), out
    assert not (tmp_path / "ckpt" / "model.safetensors").exists()
