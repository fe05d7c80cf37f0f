"""The vision-language backbone: tokenizer, image pipeline, context tokens, save/load."""
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from embodia.devices.embodiment import Camera, Channel, Embodiment
from embodia.policies.backbone import Backbone, BackboneLoadError, META_FILE, prompt_text, text_body
from embodia.policies.backbone_tiny import tiny_config, train_tokenizer

torch.set_num_threads(2)

ARM = Embodiment(
    name="planar_pusher", kind="planar pusher", hz=10.0,
    actions=(Channel("vx", -1, 1, "m/s"), Channel("vy", -1, 1, "m/s")),
    state=(Channel("pusher_x"), Channel("pusher_y")), cameras=(Camera("top", 96, 96),),
    chunk=16, exec_horizon=8, convention="world-frame velocity targets")
GRIPPER = Embodiment(
    name="gripper", kind="6-dof arm with gripper", hz=20.0,
    actions=tuple(Channel(n, -1, 1) for n in ("dx", "dy", "dz", "droll", "dpitch", "dyaw", "grip")),
    cameras=(Camera("wrist", 96, 96), Camera("front", 128, 96)))
INSTRUCTIONS = ["push the red block to the left", "pick up the green cube", "open the drawer",
                "move the blue disk onto the target"]


def corpus():
    return [ARM.prompt(), GRIPPER.prompt(), *INSTRUCTIONS] * 2


def img(seed, h=96, w=96):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(corpus())


@pytest.fixture(scope="module")
def bb(tok):
    return Backbone.build(tok, tiny_config(tok), seed=0)


# -- tokenizer ---------------------------------------------------------------------------------

def test_tokenizer_round_trip_and_specials(tok):
    for s in ["push the red block", "  leading spaces\tand tabs\nnew line", "Grüße, ça va? 机器人 🤖 ∑x²",
              "<embodiment> name=x; action=velocity[vx] in [-1,1] m/s </embodiment>", "", "\x00\x7f"]:
        ids = tok(s)["input_ids"]
        assert tok.decode(ids) == s
    for special in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|endoftext|>", "<pad>"):
        ids = tok(f"a{special}b", add_special_tokens=False)["input_ids"]
        assert tok.convert_tokens_to_ids(special) in ids
    assert tok.pad_token == "<pad>" and tok.padding_side == "right"
    again = train_tokenizer(corpus())
    assert again.get_vocab() == tok.get_vocab()                   # deterministic
    assert len(tok) <= 1024


def test_a_lone_text_is_tokenized_once_and_each_call_gets_its_own_copy(bb, monkeypatch):
    calls = []
    real = type(bb.tokenizer).__call__
    monkeypatch.setattr(type(bb.tokenizer), "__call__", lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    monkeypatch.setattr(bb, "_token_cache", {})
    first, mask = bb.tokenize(["push the red block"])
    first[0, 0] = -7                                     # a caller that writes into its ids ...
    again, _ = bb.tokenize(["push the red block"])
    assert len(calls) == 1 and int(again[0, 0]) != -7    # ... does not change the next decision's
    assert torch.equal(again, bb.tokenizer(["push the red block"], return_tensors="pt")["input_ids"])
    bb.tokenize(["push the red block", "a batch of two"])   # batches are not kept
    assert len(bb._token_cache) == 1
    for i in range(40):
        bb.tokenize([f"text {i}"])
    assert len(bb._token_cache) == 32                    # bounded: the oldest go first


def test_mlp_widths_round_up_to_the_multiple_asked(tok):
    cfg = tiny_config(tok, hidden=64, vision_hidden=64, vision_heads=4, mlp_ratio=5.8, multiple_of=64)
    assert cfg.text_config.intermediate_size == 384 and cfg.vision_config.intermediate_size == 384
    assert tiny_config(tok, hidden=64, mlp_ratio=5.8).text_config.intermediate_size == 371   # as before
    with pytest.raises(ValueError, match="multiple_of"):
        tiny_config(tok, multiple_of=0)


# -- images ------------------------------------------------------------------------------------

def test_patchify_matches_pil_processor(bb):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    ip = bb.image_processor
    assert isinstance(ip, Qwen2VLImageProcessorPil)
    for shape in [(96, 96), (100, 150), (480, 640), (60, 200)]:
        images = [img(i, *shape) for i in range(3)]
        ref = ip(images=images, return_tensors="pt")
        resized = bb.preprocess_images(images)
        assert resized.dtype == torch.uint8 and resized.ndim == 4
        pv, grid = bb.patchify(resized)
        assert torch.equal(grid, ref["image_grid_thw"])
        assert pv.shape == ref["pixel_values"].shape
        assert (pv - ref["pixel_values"]).abs().max().item() < 1e-5
    # mixed sizes come back as a list and still match, in order
    images = [img(0), img(1, 128, 96), img(2)]
    resized = bb.preprocess_images(images)
    assert isinstance(resized, list)
    pv, grid = bb.patchify(resized)
    ref = ip(images=images, return_tensors="pt")
    assert torch.equal(grid, ref["image_grid_thw"]) and (pv - ref["pixel_values"]).abs().max() < 1e-5


def test_image_sizes(bb, tok):
    assert bb.preprocess_images([img(0)]).shape == (1, 84, 84, 3)
    assert bb.image_tokens(96, 96) == 9 and bb.image_tokens(128, 128) == 16
    fixed = Backbone(bb.model, tok, bb.image_processor, image_size=(112, 56))
    r = fixed.preprocess_images([img(0), img(1, 480, 640)])
    assert r.shape == (2, 56, 112, 3) and fixed.image_tokens(480, 640) == 8
    ref = bb.image_processor(images=list(r.numpy()), return_tensors="pt")  # already 28-aligned: no resize
    pv, grid = fixed.patchify(r)
    assert torch.equal(grid, ref["image_grid_thw"]) and (pv - ref["pixel_values"]).abs().max() < 1e-5
    with pytest.raises(ValueError, match="multiples"):
        Backbone(bb.model, tok, bb.image_processor, image_size=(100, 100))
    with pytest.raises(ValueError, match="uint8"):
        bb.preprocess_images([img(0).astype(np.float32)])


# -- prompt and forward ------------------------------------------------------------------------

def test_prompt_layout(bb):
    text = bb.prompt_text(ARM.prompt(), "push", 2, [9, 4])
    assert text.startswith("<|vision_start|>" + "<|image_pad|>" * 9 + "<|vision_end|><|vision_start|>")
    assert text.endswith("<|vision_end|>" + ARM.prompt() + "\npush")
    assert prompt_text("", "x", 1, 1) == "<|vision_start|><|image_pad|><|vision_end|>x"
    ids, mask = bb.tokenize([text])
    assert int((ids == bb.image_token_id).sum()) == 13 and mask.all()
    # default count: a 96x96 camera; a wrong count fails with a message that says what to do
    assert bb.prompt_text("", "x", 1) == prompt_text("", "x", 1, 9)
    ids, mask = bb.tokenize([bb.prompt_text("", "x", 1, 4)])
    pv, grid = bb.patchify(bb.preprocess_images([img(0)]))
    with pytest.raises(ValueError, match="tokens_per_image"):
        bb(ids, mask, pv, grid)


def test_prepare_is_encode(bb):
    batch = bb.prepare([[img(0)]], [ARM.prompt()], ["push"])
    assert set(batch) == {"input_ids", "attention_mask", "pixel_values", "image_grid_thw"}
    with torch.inference_mode():
        a, _ = bb(**batch)
        b, _ = bb.encode([[img(0)]], [text_body(ARM.prompt(), "push")])
    assert torch.equal(a, b)


def test_forward_shapes_and_masks(bb):
    assert bb.hidden_size == 64 and bb.layer == 1 and bb.num_layers == 2
    texts = [text_body(ARM.prompt(), "push"), text_body(GRIPPER.prompt(), INSTRUCTIONS[1])]
    with torch.inference_mode():
        ctx, mask = bb.encode([[img(0)], [img(1), img(2, 96, 128)]], texts)
    assert ctx.shape[:2] == mask.shape and ctx.shape[0] == 2 and ctx.shape[2] == 64
    assert mask.dtype == torch.bool and mask[1].all() and not mask[0].all()
    assert torch.isfinite(ctx).all()
    assert (ctx[0][~mask[0]] == 0).all() and (ctx[0][mask[0]].abs().sum(-1) > 0).all()
    # samples without images, and a batch without any image, also work
    with torch.inference_mode():
        c2, m2 = bb.encode([[], [img(0)]], ["only text", "x"])
        c3, m3 = bb.encode([[]], ["only text"])
    assert torch.isfinite(c2).all() and c3.shape[:2] == m3.shape


def test_batching_invariance(bb):
    short = text_body(ARM.prompt(), "push")
    long = text_body(GRIPPER.prompt(), INSTRUCTIONS[3] + " and then " + INSTRUCTIONS[1])
    with torch.inference_mode():
        alone, m_alone = bb.encode([[img(0)]], [short])
        both, m_both = bb.encode([[img(0)], [img(5), img(6)]], [short, long])
        long_alone, _ = bb.encode([[img(5), img(6)]], [long])
    n = int(m_alone.sum())
    assert int(m_both[0].sum()) == n and both.shape[1] > n
    assert torch.allclose(both[0, :n], alone[0], atol=1e-5)
    assert torch.allclose(both[1], long_alone[0], atol=1e-5)


def test_mrope_positions_and_token_types(bb):
    samples = [[img(0)], [img(1, 128, 96), img(2, 480, 640)], [], [img(3, 60, 200)]]
    texts = ["push", "pick up the cube and then more words", "only text", "x"]
    flat = [i for s in samples for i in s]
    pv, grid = bb.patchify(bb.preprocess_images(flat))
    counts, k, full = (grid.prod(-1) // 4).tolist(), 0, []
    for s, t in zip(samples, texts):
        full.append(bb.prompt_text("", t, len(s), counts[k:k + len(s)]))
        k += len(s)
    ids, mask = bb.tokenize(full)
    types = bb.token_types(ids)
    assert int(types.sum()) == sum(counts) and set(types.unique().tolist()) == {0, 1}
    ref, _ = bb._base().get_rope_index(ids, types, grid, attention_mask=mask)
    pos = bb.mrope_positions(ids, mask, grid)
    assert pos.shape == (3, 4, ids.shape[1]) and torch.equal(pos, ref)
    # image tokens of a 3x3 merged grid get distinct (h, w) positions: M-RoPE is really 3-D
    one, _ = bb.tokenize([bb.prompt_text("", "x", 1, 9)])
    p1 = bb.mrope_positions(one, torch.ones_like(one), grid[:1])
    img_pos = p1[:, 0, one[0] == bb.image_token_id]
    assert img_pos[1].tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3] and img_pos[2].tolist() == [1, 2, 3] * 3
    # without mm_token_type_ids the model silently falls back to 1-D positions: different output
    with torch.inference_mode():
        ctx, _ = bb(ids, mask, pv, grid)
        plain = bb._base()(input_ids=ids, attention_mask=mask, pixel_values=pv, image_grid_thw=grid,
                           use_cache=False, output_hidden_states=True).hidden_states[bb.layer]
    m = mask.bool()
    assert (ctx[m] - plain[m]).abs().max() > 1e-4


@pytest.mark.parametrize("layer", [0, 1, 2, -1])
def test_layer_semantics(bb, tok, layer):
    """`layer` indexes transformers' hidden_states tuple; early exit gives the same tensor."""
    other = Backbone(bb.model, tok, bb.image_processor, layer=layer)
    ids, mask = bb.tokenize([bb.prompt_text(ARM.prompt(), "push", 1, 9)])
    pv, grid = bb.patchify(bb.preprocess_images([img(0)]))
    with torch.inference_mode():
        ctx, _ = other(ids, mask, pv, grid)
        ref = bb._base()(input_ids=ids, attention_mask=mask, pixel_values=pv, image_grid_thw=grid,
                         mm_token_type_ids=bb.token_types(ids), use_cache=False,
                         output_hidden_states=True).hidden_states[layer]
    assert torch.allclose(ctx, ref, atol=1e-6)
    with pytest.raises(ValueError, match="layer"):
        Backbone(bb.model, tok, bb.image_processor, layer=3)


def test_contexts_depend_on_images_and_text(bb):
    t = text_body(ARM.prompt(), "push")
    with torch.inference_mode():
        a, _ = bb.encode([[img(0)]], [t])
        b, _ = bb.encode([[img(1)]], [t])
        c, _ = bb.encode([[img(0)]], [text_body(ARM.prompt(), "pull")])
        d, _ = bb.encode([[img(0)]], [text_body(GRIPPER.prompt(), "push")])
    assert (a - b).abs().max() > 1e-3                                   # image changes every token after it
    assert (a[0, -1] - b[0, -1]).abs().max() > 1e-4
    assert (a[0, -1] - c[0, -1]).abs().max() > 1e-4                    # last token reads the instruction
    assert not (a.shape == d.shape and torch.allclose(a, d))


def test_seeding(tok, bb):
    same = Backbone.build(tok, tiny_config(tok), seed=0)
    assert all(torch.equal(p, q) for p, q in zip(bb.parameters(), same.parameters()))
    torch.manual_seed(3)
    a = Backbone.build(tok, tiny_config(tok))
    torch.manual_seed(3)
    b = Backbone.build(tok, tiny_config(tok))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), bb.parameters()))


def test_gradient_and_freezing(tok):
    bb = Backbone.build(tok, tiny_config(tok), seed=1)
    ids, mask = bb.tokenize([bb.prompt_text(ARM.prompt(), "push", 1, 9)] * 2)
    pv, grid = bb.patchify(bb.preprocess_images([img(0), img(1)]))
    ctx, m = bb(ids, mask, pv, grid)
    (ctx[m] ** 2).mean().backward()
    visual = [p.grad for p in bb.model.model.visual.parameters()]
    assert all(g is not None for g in visual) and any(g.abs().sum() > 0 for g in visual)
    assert bb.model.model.language_model.embed_tokens.weight.grad.abs().sum() > 0
    bb.requires_grad_(False)
    ctx, _ = bb(ids, mask, pv, grid)
    assert not ctx.requires_grad


# -- save / load -------------------------------------------------------------------------------

def test_save_and_load_offline(bb, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    d = bb.save_pretrained(tmp_path / "bb")
    for f in ("config.json", "model.safetensors", "tokenizer.json", "preprocessor_config.json", META_FILE):
        assert (d / f).is_file(), f
    assert json.loads((d / META_FILE).read_text())["layer"] == bb.layer
    loaded = Backbone.from_pretrained(str(d))
    assert loaded.layer == bb.layer and loaded.hidden_size == 64 and loaded.image_size is None
    samples, texts = [[img(0)], [img(1)]], [text_body(ARM.prompt(), "push"), "open the drawer"]
    with torch.inference_mode():
        a, ma = bb.encode(samples, texts)
        b, mb = loaded.encode(samples, texts)
    assert torch.equal(ma, mb) and torch.allclose(a, b, atol=0, rtol=0)
    assert Backbone.from_pretrained(d, layer=2).layer == 2


def test_non_tiny_config_by_path(tok, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = tiny_config(tok, hidden=256, layers=4, heads=8, kv_heads=4, vision_layers=2)
    assert sum(cfg.text_config.rope_parameters["mrope_section"]) == 256 // 8 // 2
    big = Backbone.build(tok, cfg, image_size=(112, 112))
    path = tmp_path / "big"
    big.save_pretrained(path)
    loaded = Backbone.from_pretrained(str(path))
    assert loaded.hidden_size == 256 and loaded.layer == 2 and loaded.image_size == (112, 112)
    with torch.inference_mode():
        ctx, mask = loaded.encode([[img(0)]], [text_body(GRIPPER.prompt(), "pick up the green cube")])
        ref, _ = big.encode([[img(0)]], [text_body(GRIPPER.prompt(), "pick up the green cube")])
    assert ctx.shape[-1] == 256 and int((loaded.tokenize([loaded.prompt_text("", "", 1, 16)])[0] ==
                                         loaded.image_token_id).sum()) == 16
    assert torch.equal(ctx, ref) and torch.isfinite(ctx).all() and mask.all()


def test_load_errors_name_the_path(bb, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope"):
        Backbone.from_pretrained(missing)
    d = bb.save_pretrained(tmp_path / "ok")
    (d / "preprocessor_config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"ok.*preprocessor_config\.json"):
        Backbone.from_pretrained(d)
    d = bb.save_pretrained(tmp_path / "badweights")
    (d / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(BackboneLoadError, match="badweights"):
        Backbone.from_pretrained(d)
    d = bb.save_pretrained(tmp_path / "badconfig")
    (d / "config.json").write_text("{ not json")
    with pytest.raises(OSError, match=r"badconfig.*config\.json"):
        Backbone.from_pretrained(d)


# -- construction checks -----------------------------------------------------------------------

def test_config_checks_and_unsupported_processor(tok, bb):
    with pytest.raises(ValueError, match="heads"):
        tiny_config(tok, hidden=64, heads=5)
    with pytest.raises(ValueError, match="kv_heads"):
        tiny_config(tok, hidden=64, heads=4, kv_heads=3)
    for hidden, heads in [(96, 4), (128, 4), (256, 8)]:
        cfg = tiny_config(tok, hidden=hidden, heads=heads, kv_heads=heads // 2)
        assert sum(cfg.text_config.rope_parameters["mrope_section"]) == hidden // heads // 2
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    with pytest.raises(NotImplementedError, match="Idefics3ImageProcessorPil"):
        Backbone(bb.model, tok, Idefics3ImageProcessorPil())


def test_qwen2_vl_also_works(tok):
    """Qwen2-VL shares the processor and prompt format; it raises without mm_token_type_ids."""
    from transformers import Qwen2VLConfig
    t = tiny_config(tok)
    cfg = Qwen2VLConfig(
        text_config=dict(vocab_size=t.text_config.vocab_size, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         pad_token_id=t.text_config.pad_token_id, bos_token_id=0, eos_token_id=0,
                         rope_parameters=t.text_config.rope_parameters),
        vision_config=dict(depth=1, embed_dim=64, hidden_size=64, mlp_ratio=2, num_heads=4, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=t.image_token_id, video_token_id=t.video_token_id,
        vision_start_token_id=t.vision_start_token_id, vision_end_token_id=t.vision_end_token_id)
    q2 = Backbone.build(tok, cfg)
    samples, texts = [[img(0)], [img(1, 128, 96)]], ["push", "pick up the green cube"]
    with torch.inference_mode():
        fast, mask = q2.encode(samples, texts)
        q2._fast_positions = False                      # let transformers compute the 3-D positions
        slow, _ = q2.encode(samples, texts)
    assert fast.shape[-1] == 64 and torch.allclose(fast, slow, atol=1e-6)
