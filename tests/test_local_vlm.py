"""`--policy hf:<path>`: a transformers VLM in this process drives a GUI device. A tiny Qwen2.5-VL is
built from a config, saved with its tokenizer, image processor and chat template, and loaded back
through `from_pretrained` offline. With random weights it never says anything executable (bounded
retries, nothing executed); with its decoding forced to one JSON action through `generation_kwargs`,
the action runs at the right pixel, and the screenshot reached the vision tower."""
import os
import re
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.agent.loop.factory import POLICY_SPECS, make_policy  # noqa: E402
from embodia.devices import Channel, Embodiment, GuiAction, Screen  # noqa: E402
from embodia.devices.coords import to_pixels  # noqa: E402
from embodia.devices.gui import GuiDevice, gui_embodiment  # noqa: E402
from embodia.policies.gui.local_vlm import LocalVLMPolicy, ModelLoadError  # noqa: E402
from embodia.policies.gui.prompt import CORRECTION, system_prompt  # noqa: E402
from embodia.policies.gui.prompt import PolicyGaveUp  # noqa: E402
from embodia.policies.gui.reply import parse_reply  # noqa: E402

torch.set_num_threads(2)

SCREEN = Screen(400, 800)
TARGET = '{"type": "click", "point": [500, 250]}'
# Qwen2.5-VL's chat format, written small: image parts become the vision placeholder.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


class Phone(GuiDevice):
    """A 400x800 phone that logs what it executes."""

    supported = frozenset({"click", "type", "swipe"})

    def __init__(self):
        super().__init__()
        self.embodiment = gui_embodiment("fake-phone", "gui-phone", SCREEN)
        self.log: list[tuple] = []

    def _screen(self):
        return SCREEN

    def _grab(self):
        img = np.zeros((800, 400, 3), np.uint8)
        img[:, :, 0] = np.arange(400, dtype=np.uint8)[None, :] // 2
        img[200:260, 100:300, 1] = 255          # a "button"
        return img

    def _execute(self, action, p, q):
        self.log.append((action.type, p))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A saved tiny Qwen2.5-VL: config, random weights, tokenizer + chat template, PIL image processor."""
    from transformers import Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from embodia.policies.backbone import quiet_progress
    from embodia.policies.backbone_tiny import tiny_config, train_tokenizer

    emb = Phone().embodiment
    corpus = [system_prompt(emb, "norm1000", (84, 168), with_tree=t) for t in (False, True)]
    corpus += [CORRECTION, emb.prompt(), TARGET, '{"type": "type", "text": "hello"}',
               "Task: Previous actions: none. Choose the next action. Screenshot: pixels showing the whole screen."]
    tok = train_tokenizer(corpus * 4, vocab_size=768)
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(tiny_config(tok, hidden=64)).eval()
    d = tmp_path_factory.mktemp("tiny-vlm")
    with quiet_progress():
        model.save_pretrained(d)
    tok.save_pretrained(d)
    Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=128 * 128, patch_size=14, temporal_patch_size=2,
                             merge_size=2).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def no_template_dir(model_dir, tmp_path_factory):
    """The same model saved without any chat template."""
    d = tmp_path_factory.mktemp("tiny-vlm-plain")
    for f in model_dir.iterdir():
        if f.name != "chat_template.jinja":
            shutil.copy(f, d / f.name)
    cfg = d / "tokenizer_config.json"
    cfg.write_text(re.sub(r',\s*"chat_template":\s*"(?:[^"\\]|\\.)*"', "", cfg.read_text()))
    return d


class Force:
    """A logits processor that makes the i-th `generate` call emit ``replies[i]`` then end-of-text,
    whatever the weights say (the last reply repeats for later calls)."""

    def __init__(self, tokenizer, replies):
        self.seqs = [tokenizer(r, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for r in replies]
        self.calls, self.start, self.last = -1, 0, None

    def __call__(self, input_ids, scores):
        n = input_ids.shape[1]
        if self.last is None or n != self.last + 1:        # a new generate call
            self.calls, self.start = self.calls + 1, n
        self.last = n
        seq = self.seqs[min(self.calls, len(self.seqs) - 1)]
        forced = torch.full_like(scores, float("-inf"))
        forced[:, seq[min(n - self.start, len(seq) - 1)]] = 0.0
        return forced


def spy_generate(pol, monkeypatch) -> list[dict]:
    """Record the inputs of every `generate` call of the policy's model."""
    calls, real = [], pol.net.generate

    def generate(**kw):
        calls.append(kw)
        return real(**kw)
    monkeypatch.setattr(pol.net, "generate", generate)
    return calls


def test_random_weights_never_execute_anything_and_every_attempt_is_recorded(no_template_dir, monkeypatch):
    dev = Phone()
    pol = LocalVLMPolicy(no_template_dir, max_retries=2, max_new_tokens=12).bind(dev.embodiment)
    assert pol.chat_template is None and "AutoProcessor failed" in pol.info()["processor"]
    calls = spy_generate(pol, monkeypatch)
    r = run_episode(dev, pol, instruction="tap the green button", max_steps=3)
    assert r.error.startswith("PolicyGaveUp") and "3 replies" in r.error
    assert dev.log == [] and r.steps == 0
    rec = pol.step_record()
    assert len(rec["attempts"]) == 3 == len(calls) and all(a["error"] for a in rec["attempts"])
    assert all(0 < a["tokens"] <= 12 and a["ms"] > 0 for a in rec["attempts"])
    info = pol.info()
    assert (info["calls"], info["parse_failures"], info["gave_up"]) == (3, 3, 1) and info["tokens"] > 0
    # the plain ChatML fallback template, and each retry carries the refused reply and the parser's error
    last = pol.tokenizer.decode(calls[-1]["input_ids"][0])
    assert last.startswith("<|im_start|>system\nYou operate a phone screen") and last.endswith("<|im_start|>assistant\n")
    assert last.count("Your reply could not be executed") == 2 and rec["attempts"][1]["error"][:40] in last

    with pytest.raises(PolicyGaveUp) as e:
        LocalVLMPolicy(no_template_dir, max_retries=0, max_new_tokens=4).bind(dev.embodiment).act(dev.observe(), "x")
    assert len(e.value.record["attempts"]) == 1 and e.value.record["attempts"][0]["error"]


def test_forced_decoding_yields_the_action_and_the_screenshot_reaches_the_model(model_dir, monkeypatch):
    from transformers import LogitsProcessorList

    dev = Phone()
    tok = LocalVLMPolicy(model_dir, max_new_tokens=4).tokenizer
    force = Force(tok, ["I will tap it.", TARGET])
    pol = LocalVLMPolicy(model_dir, max_new_tokens=40, max_retries=1,
                         generation_kwargs={"logits_processor": LogitsProcessorList([force])}).bind(dev.embodiment)
    assert pol.chat_template == CHAT_TEMPLATE
    calls = spy_generate(pol, monkeypatch)
    seen = []
    pol.net.model.visual.register_forward_hook(lambda m, args, kw_out: seen.append(1))
    # special tokens written in the task are text, not an extra image or an end of turn
    r = run_episode(dev, pol, instruction="tap <|image_pad|> the green button<|im_end|>", max_steps=1)
    assert r.error is None and r.steps == 1
    assert dev.log == [("click", to_pixels((500, 250), SCREEN))] == [("click", (200, 200))]

    rec = pol.step_record()
    assert [a["reply"] for a in rec["attempts"]] == ["I will tap it.", TARGET]
    assert rec["attempts"][0]["error"].startswith("no action found") and rec["attempts"][1]["error"] is None
    assert parse_reply(rec["attempts"][1]["reply"]) == GuiAction("click", point=(500, 250))
    assert rec["input_size"] == [84, 168]           # 400x800 -> Qwen's smart_resize within 128*128 pixels
    assert rec["attempts"][1]["tokens"] == len(force.seqs[1]) and rec["attempts"][1]["prompt_tokens"] > 0
    for kw in calls:                                 # both attempts saw the screenshot
        ids, grid = kw["input_ids"][0], kw["image_grid_thw"]
        assert grid.tolist() == [[1, 12, 6]] and kw["pixel_values"].shape == (12 * 6, 3 * 2 * 14 * 14)
        n_img = int((ids == pol.net.config.image_token_id).sum())
        assert n_img == 12 * 6 // 4 == int(kw["mm_token_type_ids"].sum())
    assert len(seen) == 2
    second = tok.decode(calls[1]["input_ids"][0])
    assert "<|im_start|>assistant\nI will tap it.<|im_end|>" in second
    assert CORRECTION.format(error=rec["attempts"][0]["error"]) in second
    assert second.count("<|im_end|>") == 4           # system, user, assistant, correction: the task's is text
    assert "tap <\u2060|image_pad|> the green button<\u2060|im_end|>" in second
    info = pol.info()
    assert info["decisions"] == 1 and info["calls"] == 2 and info["mean_ms"] > 0 and info["tokens_per_s"] > 0


def test_factory_builds_it_and_a_missing_path_is_named(model_dir, tmp_path):
    dev = Phone()
    assert "hf:<path>" in POLICY_SPECS
    pol = make_policy(f"hf:{model_dir}", dev, coords="image_px")
    assert isinstance(pol, LocalVLMPolicy) and pol.embodiment is dev.embodiment and pol.coords == "image_px"
    missing = tmp_path / "no-such-model"
    with pytest.raises(ValueError, match=re.escape(str(missing))):
        make_policy(f"hf:{missing}", dev)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match=re.escape(str(empty)) + ".*lacks model weights"):
        LocalVLMPolicy(empty)

    class Arm:
        embodiment = Embodiment("arm", "planar pusher", actions=(Channel("vx", -1, 1),))
    with pytest.raises(ValueError, match="drives GUI devices"):
        make_policy(f"hf:{model_dir}", Arm())
