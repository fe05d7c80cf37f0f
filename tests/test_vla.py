"""The VLA policy: training end to end, checkpoints, resume, bad input, non-tiny configurations."""
import json

import numpy as np
import pytest
import torch

from embodia.agent.loop.episode import run_episode
from embodia.agent.training.train import TrainConfig, build_model, train
from embodia.devices import Observation, open_device
from embodia.policies.robot.vla import CheckpointError, VLAPolicy, load_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    from embodia.agent.recording.writer import DatasetWriter
    root = tmp_path_factory.mktemp("demos") / "twogap"
    with open_device("sim:twogap-push") as dev:
        w = DatasetWriter(root, dev.embodiment)
        for s in range(3):
            run_episode(dev, dev.expert(), seed=100 + s, recorder=w, max_steps=40)
        w.close()
    return root


def small_cfg(data, out, **kw):
    base = dict(data=[str(data)], out=str(out), steps=24, batch_size=16, save_every=12, threads=1,
                only_success=False, freeze_backbone_after=12, frozen_batch_size=16, hidden=32, heads=2,
                head=dict(dim=32, depth=2, heads=2))
    base.update(kw)
    return TrainConfig(**base)


def test_training_lowers_the_loss_and_writes_a_loadable_checkpoint(demos, tmp_path):
    logs = []
    train(small_cfg(demos, tmp_path / "ck", steps=60, save_every=30, freeze_backbone_after=30, lr=3e-3),
          progress=False, log=logs.append)
    losses = [float(line.split("loss ")[1].split()[0]) for line in logs if line.startswith("step ")]
    assert len(losses) == 2 and losses[1] < losses[0] * 0.85, losses
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["trained_steps"] == 60 and "planar_pusher" in cfg["embodiments"]
    for name in ("model.safetensors", "normalization.json", "backbone/config.json", "backbone/model.safetensors",
                 "backbone/tokenizer.json", "backbone/preprocessor_config.json"):
        assert (tmp_path / "ck" / name).is_file(), name


def test_resume_continues_exactly_where_the_run_stopped(demos, tmp_path):
    straight = tmp_path / "straight"
    train(small_cfg(demos, straight), progress=False, log=lambda *_: None)
    split = tmp_path / "split"
    train(small_cfg(demos, split, steps=12), progress=False, log=lambda *_: None)
    train(small_cfg(demos, split), resume=True, progress=False, log=lambda *_: None)
    a = load_checkpoint(straight)[0].head_state_dict()
    b = load_checkpoint(split)[0].head_state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def ckpt(demos, tmp_path_factory):
    out = tmp_path_factory.mktemp("ck") / "ck"
    train(small_cfg(demos, out), progress=False, log=lambda *_: None)
    return out


def test_round_trip_gives_identical_actions_for_identical_seeds(ckpt, tmp_path):
    with open_device("sim:twogap-push") as dev:
        obs = dev.reset(0)
        p1 = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        model, norms = load_checkpoint(ckpt)
        save_checkpoint(model, norms, tmp_path / "copy")
        p2 = VLAPolicy.from_pretrained(tmp_path / "copy").bind(dev.embodiment)
        p1.reset(7), p2.reset(7)
        a1, a2 = p1.act(obs, dev.instruction), p2.act(obs, dev.instruction)
        assert a1.shape == (16, 2) and np.array_equal(a1, a2)
        p1.reset(8)
        assert not np.array_equal(p1.act(obs, dev.instruction), a1)   # the seed matters


def test_bad_observations_get_errors_naming_the_field(ckpt):
    with open_device("sim:twogap-push") as dev:
        obs = dev.reset(0)
        p = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        bad_img = Observation(images={"top": np.zeros((64, 64, 3), np.uint8)}, state=obs.state)
        with pytest.raises(ValueError, match="observation.images.top"):
            p.act(bad_img, "push")
        with pytest.raises(ValueError, match=r"observation.state.*\(10,\)"):
            p.act(Observation(images=obs.images, state=obs.state[:7]), "push")
        nan = obs.state.copy()
        nan[4] = np.nan
        with pytest.raises(ValueError, match="puck_x"):
            p.act(Observation(images=obs.images, state=nan), "push")
    with open_device("sim:metaworld/reach-v3") as other:
        with pytest.raises(CheckpointError, match="sawyer"):
            VLAPolicy.from_pretrained(ckpt).bind(other.embodiment)


def test_corrupt_checkpoints_get_clear_errors(ckpt, tmp_path):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(ckpt, bad)
    (bad / "model.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes()[:100])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_checkpoint(bad)
    (bad / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json"):
        load_checkpoint(bad)
    (bad / "normalization.json").unlink()
    with pytest.raises(CheckpointError, match="normalization.json"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointError, match="not a directory"):
        load_checkpoint(tmp_path / "nowhere")


def test_a_non_tiny_configuration_loads_by_path_and_decides(demos, tmp_path):
    from embodia.agent.recording.dataset import LocalDataset
    from embodia.agent.training.train import Samples
    cfg = small_cfg(demos, tmp_path / "big", hidden=256, layers=4, heads=8, head=dict(dim=128, depth=4, heads=8))
    ds = [LocalDataset(demos)]
    model = build_model(cfg, ds)
    norms = Samples(ds, model.backbone, model.cfg, only_success=False, log=lambda *_: None).norms
    save_checkpoint(model, norms, tmp_path / "big")
    with open_device("sim:twogap-push") as dev:
        p = VLAPolicy.from_pretrained(tmp_path / "big").bind(dev.embodiment)
        assert p.model.backbone.hidden_size == 256 and p.model.head.config.dim == 128
        chunk = p.act(dev.reset(0), dev.instruction)
        assert chunk.shape == (16, 2) and np.all(np.abs(chunk) <= 1.0 + 1e-6)


def test_temporal_ensembling_returns_one_blended_action_per_step(ckpt):
    with open_device("sim:twogap-push") as dev:
        obs = dev.reset(0)
        p = VLAPolicy.from_pretrained(ckpt, ensemble=0.1).bind(dev.embodiment)
        p.reset(0)
        first = p.act(obs, dev.instruction)
        assert first.shape == (1, 2)
        second = p.act(obs, dev.instruction)
        # step 1 averages chunk 0's second action with chunk 1's first
        p_plain = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        p_plain.reset(0)
        c0, c1 = p_plain.act(obs, dev.instruction), p_plain.act(obs, dev.instruction)
        w = np.exp(-0.1 * np.array([1, 0]))
        assert np.allclose(second[0], (w[0] * c0[1] + w[1] * c1[0]) / w.sum(), atol=1e-6)


def test_a_checkpoint_that_decides_every_k_steps_runs_k_actions_a_decision(ckpt, tmp_path):
    import shutil
    from embodia.policies.robot.steered import SteeredPolicy, memory_for
    every3 = tmp_path / "every3"
    shutil.copytree(ckpt, every3)
    cfg = json.loads((every3 / "config.json").read_text())
    (every3 / "config.json").write_text(json.dumps({**cfg, "exec_horizon": 3}))

    def decisions(policy, dev, **kw):
        calls, act = [], policy.act
        policy.act = lambda obs, instruction: calls.append(1) or act(obs, instruction)
        r = run_episode(dev, policy, seed=0, max_steps=12, **kw)
        return len(calls), r.steps

    with open_device("sim:twogap-push") as dev:        # the body decides after every action
        assert dev.embodiment.exec_horizon == 1
        plain = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        fast = VLAPolicy.from_pretrained(every3).bind(dev.embodiment)
        assert plain.exec_horizon is None and fast.exec_horizon == 3
        n, steps = decisions(plain, dev)
        assert n == steps
        n, steps = decisions(fast, dev)
        assert steps > 3 and n == -(-steps // 3)
        n, steps = decisions(fast, dev, exec_horizon=2)     # the caller's choice wins
        assert n == -(-steps // 2)
        steered = SteeredPolicy(fast, memory_for(fast), namespace="t")     # steering keeps the rate
        assert steered.exec_horizon == 3
        n, steps = decisions(steered, dev)
        assert n == -(-steps // 3)
    for bad in (0, 17, 2.5, "2", True):
        (every3 / "config.json").write_text(json.dumps({**cfg, "exec_horizon": bad}))
        with pytest.raises(CheckpointError, match="exec_horizon"):
            VLAPolicy.from_pretrained(every3)


def test_two_bodies_train_together_through_the_frozen_phase(demos, tmp_path):
    """One checkpoint, two embodiments of different D, prompt lengths and state sizes."""
    from embodia.agent.recording.writer import DatasetWriter
    reach = tmp_path / "reach"
    with open_device("sim:metaworld/reach-v3") as dev:
        w = DatasetWriter(reach, dev.embodiment)
        for s in range(2):
            run_episode(dev, dev.expert(), seed=s, recorder=w, max_steps=30)
        w.close()
    cfg = small_cfg(demos, tmp_path / "ck", steps=20, save_every=20, freeze_backbone_after=10)
    cfg.data.append(str(reach))
    train(cfg, progress=False, log=lambda *_: None)
    cfg_json = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert {e: v["id"] for e, v in cfg_json["embodiments"].items()} == {"planar_pusher": 0, "sawyer": 1}
    for uri, shape in (("sim:twogap-push", (16, 2)), ("sim:metaworld/reach-v3", (16, 4))):
        with open_device(uri) as dev:
            p = VLAPolicy.from_pretrained(tmp_path / "ck").bind(dev.embodiment)
            assert p.act(dev.reset(0), dev.instruction).shape == shape


def test_random_shift_moves_the_image_and_repeats_its_edges():
    from embodia.agent.training.train import random_shift
    im = torch.arange(36, dtype=torch.uint8).view(6, 6, 1).expand(6, 6, 3).contiguous()
    seen = set()
    for s in range(40):
        out = random_shift(im, 2, np.random.default_rng(s))
        assert out.shape == im.shape and out.dtype == torch.uint8
        # every shifted image is a window of the edge-padded original: its rows and columns stay sorted
        assert torch.all(out[1:, :, 0] >= out[:-1, :, 0]) and torch.all(out[:, 1:, 0] >= out[:, :-1, 0])
        seen.add(int(out[0, 0, 0]))
    assert len(seen) > 3 and 0 in seen          # several offsets drawn, the edge value repeated into the gap


def test_shift_augments_the_live_images_and_nothing_else(demos):
    from embodia.agent.recording.dataset import LocalDataset
    from embodia.agent.training.train import Samples
    cfg = small_cfg(demos, "unused")
    ds = [LocalDataset(demos)]
    model = build_model(cfg, ds)
    samples = Samples(ds, model.backbone, model.cfg, only_success=False, log=lambda *_: None)
    plain = samples.batch(np.random.default_rng(3), 8)
    moved = samples.batch(np.random.default_rng(3), 8, shift=4)
    for key in ("state", "action", "input_ids", "image_grid_thw"):
        assert torch.equal(plain[key], moved[key]), key
    assert not torch.equal(plain["pixel_values"], moved["pixel_values"])


def test_the_ema_moves_every_float_tensor_as_one_lerp_would_and_copies_the_rest():
    from embodia.agent.training.train import ema_update
    g = torch.Generator().manual_seed(0)
    current = {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g), "n": torch.tensor([7])}
    ema = {"w": torch.zeros(3, 4), "b": torch.ones(4), "n": torch.tensor([1])}
    expected = {k: v.clone() for k, v in ema.items()}
    ema_update(ema, current.items(), step=5, cap=0.999)
    decay = 6 / 15                    # the warm-up: (1 + step) / (10 + step), under the cap
    for k in ("w", "b"):
        assert torch.allclose(ema[k], expected[k] + (1 - decay) * (current[k] - expected[k]))
    assert ema["n"].item() == 7
    before = ema["b"].clone()
    ema_update(ema, current.items(), step=10 ** 6, cap=0.5)       # the cap wins late
    assert torch.allclose(ema["b"], (before + current["b"]) / 2)
