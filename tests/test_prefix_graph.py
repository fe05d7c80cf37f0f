"""The backbone prefix computed on the device (`GraphedPrefix`): what it replays is what transformers
computes, layouts it cannot reproduce run eagerly, and a policy's decisions do not change.

CUDA graphs need a GPU; here the "capture" is an eager stand-in whose replay recomputes into the
same output tensor (as a graph replay rewrites it), so the static buffers, the plan and the
comparison run for real on the CPU."""
from __future__ import annotations

import shutil
import sysconfig
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from embodia.action_heads.graphs import eager_capture
from embodia.policies import prefix_graph
from embodia.policies.backbone import Backbone
from embodia.policies.backbone_tiny import tiny_config, train_tokenizer
from embodia.policies.prefix_graph import GraphedPrefix, window_index

WORDS = ["pick up the red block and place it in the bin", "arm body with a gripper and two cameras"]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(WORDS, vocab_size=512)


def batch_of(bb, cams, side, instruction="pick up the red block", seed=0):
    rng = np.random.default_rng(seed)
    images = [[rng.integers(0, 256, (side, side, 3), dtype=np.uint8) for _ in range(cams)]]
    return bb.prepare(images, [WORDS[1]], [instruction])


def test_window_order_is_qwen25s_windows_row_by_row():
    # 16x16 patches -> 8x8 merged, windows of 112 px = 4 merged patches a side: 2x2 windows
    order = window_index([(1, 16, 16)], merge=2, window=112, patch=14)
    assert order[:8].tolist() == [0, 1, 2, 3, 8, 9, 10, 11]
    assert order[16:20].tolist() == [4, 5, 6, 7]
    assert sorted(order.tolist()) == list(range(64))
    # a grid that windows do not divide (6x6 merged, side 4) pads, and the second image is offset
    two = window_index([(1, 12, 12), (1, 4, 4)], merge=2, window=112, patch=14)
    assert two[:5].tolist() == [0, 1, 2, 3, 6] and sorted(two.tolist()) == list(range(40))


@pytest.mark.parametrize("layers,layer,vision_layers,side", [(4, None, 5, 224), (3, -1, 4, 168), (2, 0, 2, 84)])
def test_the_device_side_prefix_equals_transformers(tok, layers, layer, vision_layers, side):
    """Windowed and full vision blocks, the middle layer, the last (normed) and the embeddings, 1 and
    3 cameras: the replayed prefix gives transformers' hidden states (through the projection)."""
    torch.manual_seed(0)
    bb = Backbone.build(tok, tiny_config(tok, layers=layers, vision_layers=vision_layers), layer=layer,
                        image_size=(side, side))
    for cams in (1, 3):
        batch = batch_of(bb, cams, side, seed=cams)
        graphed = GraphedPrefix(bb, lambda x: 2 * x, capture=eager_capture, devices=("cpu",))
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("error")
            ref, _ = bb(**batch)
            ctx, mask = graphed(batch)
            again, _ = graphed(batch_of(bb, cams, side, seed=cams + 10))   # new pixels, same layout: replayed
            ref2, _ = bb(**batch_of(bb, cams, side, seed=cams + 10))
        assert mask.all() and ctx.shape == ref.shape
        assert float((ctx - 2 * ref).norm() / ref.norm()) < 1e-5
        assert float((again - 2 * ref2).norm() / ref2.norm()) < 1e-5
        assert len(graphed.captured) == 1
        plan = next(iter(graphed.captured.values()))[4][0]
        splits = {type(s) for s in plan.block_masks}
        # 224 px: 2x2 windows of 64 patches per image, 84 px: one window per image (equal segments, a
        # batch without a mask); 168 px: windows cut by the image's edge (unequal: the mask)
        assert splits == ({torch.Tensor, int} if side == 168 else {int}), (side, splits)


def test_a_layout_it_cannot_reproduce_runs_eagerly_with_a_warning(tok, monkeypatch):
    torch.manual_seed(0)
    bb = Backbone.build(tok, tiny_config(tok, layers=2, vision_layers=2), image_size=(224, 224))
    # a wrong window order (the identity) must be caught by the comparison, not replayed
    monkeypatch.setattr(prefix_graph, "window_index", lambda g, m, w, p: np.arange(sum(t * h * w_ // m // m
                                                                                    for t, h, w_ in g)))
    graphed = GraphedPrefix(bb, lambda x: x, capture=eager_capture, devices=("cpu",))
    batch = batch_of(bb, 1, 224)
    with torch.inference_mode(), pytest.warns(UserWarning, match="differs from transformers"):
        assert graphed(batch) is None
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error")          # said once: the layout is remembered as eager
        assert graphed(batch) is None
    # a padded batch of two, or no image, is not a layout it captures
    two = bb.prepare([[np.zeros((224, 224, 3), np.uint8)], []], [WORDS[1], WORDS[1]], ["a", "b b b"])
    assert graphed(two) is None
    # and off the devices it serves it stays out of the way
    assert GraphedPrefix(bb, lambda x: x)(batch_of(bb, 1, 224)) is None


def test_a_policys_decisions_are_the_same_with_the_prefix_replayed():
    from embodia.devices import open_device
    from embodia.policies.robot.vla import VLAPolicy
    from embodia.policies import BUNDLED_CHECKPOINTS
    TINY = BUNDLED_CHECKPOINTS / "embodia-tiny"

    with open_device("sim:twogap-push") as dev:
        eager = VLAPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
        graphed = VLAPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
        graphed.prefix = GraphedPrefix(graphed.model.backbone, graphed.model.proj, capture=eager_capture,
                                       devices=("cpu",))
        for seed, instruction in ((0, dev.instruction), (1, dev.instruction), (2, "push it " * 30)):
            obs = dev.reset(seed)
            eager.reset(seed), graphed.reset(seed)
            a = eager.predict_chunk(obs, instruction)
            b = graphed.predict_chunk(obs, instruction)
            assert np.allclose(a, b, atol=1e-5), (seed, np.abs(a - b).max())
        assert len(graphed.prefix.captured) == 2 and not graphed.prefix.failed


def _two_layouts(tok):
    torch.manual_seed(0)
    return Backbone.build(tok, tiny_config(tok, layers=3, vision_layers=4), layer=2, image_size=(224, 224))


def test_the_compiled_blocks_run_inside_the_graph_and_a_failing_compiler_falls_back(tok, monkeypatch):
    """``compile``: every vision block and text layer runs the compiler's function (a wrapper that
    counts calls here; inductor in the slow test below); a compiler that fails when first run (as
    inductor does, lazily) is said once and the layout is captured uncompiled, equal either way."""
    calls = []

    def counting(fn):
        return lambda *a, **k: calls.append(fn.__name__) or fn(*a, **k)

    def broken(fn):
        def run(*a, **k):
            raise RuntimeError("InductorError: no working C compiler\n(traceback)")
        return run

    monkeypatch.delenv(prefix_graph.PREFIX_COMPILE_ENV, raising=False)
    bb = _two_layouts(tok)
    assert GraphedPrefix(bb, lambda x: x).compile is False            # off unless asked
    monkeypatch.setenv(prefix_graph.PREFIX_COMPILE_ENV, "1")
    assert GraphedPrefix(bb, lambda x: x).compile is True
    batch = batch_of(bb, 3, 224)
    with torch.inference_mode():
        ref, _ = bb(**batch)
    def wrong(fn):          # compiles, but its blocks do not compute what the model's do
        return lambda *a: fn(*a) * 1.1

    for compiler, compiled in ((counting, True), (broken, False), (wrong, False)):
        graphed = GraphedPrefix(bb, lambda x: x, capture=eager_capture, devices=("cpu",), compiler=compiler)
        with warnings.catch_warnings(record=True) as said, torch.inference_mode():
            warnings.simplefilter("always")
            ctx, _ = graphed(batch)
            graphed(batch)
        lines = [str(w.message) for w in said]
        assert float((ctx - ref).norm() / ref.norm()) < 1e-5
        assert graphed.compile is compiled and len(graphed.captured) == 1 and not graphed.failed
        if compiled:        # (block by block, end to end, the capture, two replays) x (4 vision blocks, 2 layers)
            assert not lines and sorted(set(calls)) == ["text_layer", "vision_block"]
            assert calls.count("vision_block") == 5 * 4 and calls.count("text_layer") == 5 * 2
            assert len(graphed.block_errors) == 6 and max(graphed.block_errors) < 1e-6
            assert graphed.compiled_errors[0] < 1e-5
        elif compiler is broken:
            assert lines == ["backbone prefix: compiled blocks not used, capturing it uncompiled: "
                             "RuntimeError: InductorError: no working C compiler"]
        else:
            assert len(lines) == 1 and lines[0].startswith(
                "backbone prefix: compiled blocks not used, capturing it uncompiled: ValueError: a compiled block "
                "differs from the uncompiled one (relative error 1.00e-01)")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None or not Path(sysconfig.get_paths()["include"], "Python.h").exists(),
                    reason="inductor's CPU backend needs a C++ compiler and Python's headers")
def test_torch_compile_of_the_prefix_matches_transformers_with_one_compile_per_kind(tok):
    """The real compiler (inductor's CPU backend; seconds): one compilation per block kind and segment
    length serves every block, and the compiled prefix gives transformers' hidden states."""
    from torch._dynamo.utils import counters
    bb = _two_layouts(tok)
    batch = batch_of(bb, 3, 224)
    torch._dynamo.reset()
    counters.clear()
    graphed = GraphedPrefix(bb, lambda x: x, capture=eager_capture, devices=("cpu",), compile=True)
    with warnings.catch_warnings(record=True) as said, torch.inference_mode():
        warnings.simplefilter("always")
        ref, _ = bb(**batch)
        ctx, _ = graphed(batch)
        again, _ = graphed(batch)
    assert not [w for w in said if "backbone prefix" in str(w.message)]
    assert graphed.compile and len(graphed.captured) == 1
    # vision: windows of 64 and whole images of 256 (two segment lengths), text: one
    assert counters["stats"]["unique_graphs"] == 3
    assert float((ctx - ref).norm() / ref.norm()) < 1e-4 and torch.equal(ctx, again)
