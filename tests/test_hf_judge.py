"""`--success judge:hf:<path>`: a transformers VLM in this process judges the episode. The tiny
Qwen2.5-VL of test_local_vlm (built from a config, saved, loaded back offline with from_pretrained):
with random weights its reply is garbage and the label is "unknown" (kept pending, never stored);
with its decoding forced to a reply, the strict parser decides, and every frame reaches the model."""
import importlib
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from test_local_vlm import Force, model_dir  # noqa: E402,F401  (a module-scoped fixture)
from typer.testing import CliRunner  # noqa: E402

from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.agent.loop.success import JudgeLabeler, SuccessSourceError, check_source, make_labeler  # noqa: E402
from embodia.devices import open_device  # noqa: E402
from embodia.memory import ScreenMemory, pending  # noqa: E402

cli = importlib.import_module("embodia.agent.cli.app")


@pytest.fixture()
def settings():
    dev = open_device("gui-sim:settings")
    yield dev
    dev.close()


def judged(dev, judge, seed=0):
    pol = dev.expert()
    return run_episode(dev, pol, seed=seed, labeler=judge, on_step=judge.on_step)


def test_random_weights_are_unknown_never_success(model_dir, settings, tmp_path):  # noqa: F811
    judge = make_labeler(f"judge:hf:{model_dir}", settings)
    assert isinstance(judge, JudgeLabeler) and judge.source == f"judge:hf:{model_dir}"
    r = judged(settings, judge)
    lab = r.info["success_label"]
    assert r.success is None and lab["success"] is None and lab["verified"] is False
    assert lab["reason"].startswith("unparsable reply:") and lab["source"] == f"judge:hf:{model_dir}"
    # the same from the command line, with a memory: nothing stored, the episode kept for review
    mem = tmp_path / "mem"
    res = CliRunner().invoke(cli.app, ["run", "-d", "gui-sim:settings", "-p", "expert", "-n", "1", "--no-record",
                                       "--memory", str(mem), "--success", f"judge:hf:{model_dir}"])
    assert res.exit_code == 0, res.output
    assert f"label unknown by judge:hf:{model_dir} (unverified" in " ".join(res.output.split())
    assert len(ScreenMemory.load(mem)) == 0 and len(pending.pending(mem)) == 1


@pytest.mark.parametrize("reply, want", [
    ('{"success": true, "confidence": 0.95, "reason": "Mobile data is on"}', (True, True, 0.95)),
    ('{"success": true, "confidence": 0.5, "reason": "maybe"}', (True, False, 0.5)),
    ('It worked, I am sure.', (None, False, None)),
    ('{"success": "yes", "confidence": 1, "reason": ""}', (None, False, None)),
])
def test_a_forced_reply_goes_through_the_strict_parser(model_dir, settings, reply, want, monkeypatch):  # noqa: F811
    from transformers import LogitsProcessorList

    judge = make_labeler(f"judge:hf:{model_dir}", settings)
    vlm = judge.reply.vlm
    tok = vlm.tokenizer
    vlm.generation_kwargs = {"logits_processor": LogitsProcessorList([Force(tok, [reply])])}
    calls, real = [], vlm.net.generate

    def generate(**kw):
        calls.append(kw)
        return real(**kw)
    monkeypatch.setattr(vlm.net, "generate", generate)
    r = judged(settings, judge)
    lab = r.info["success_label"]
    assert (lab["success"], lab["verified"], lab["confidence"]) == want
    assert r.success == (want[0] if want[1] else None)
    (kw,) = calls
    n_frames = 2 + min(3, max(0, r.steps - 1))          # first, final and up to 3 in between
    assert kw["image_grid_thw"].shape[0] == n_frames
    text = tok.decode(kw["input_ids"][0])
    assert f"The {n_frames} images" in text and repr(r.instruction) in text


def test_a_missing_folder_is_one_line_and_check_source_knows_hf(tmp_path, settings):
    check_source("judge:hf:models/x")
    with pytest.raises(SuccessSourceError, match="judge:hf:<path>"):
        check_source("judge:hf:")
    with pytest.raises(SuccessSourceError, match=str(tmp_path / "nope")):
        make_labeler(f"judge:hf:{tmp_path / 'nope'}", settings)


def test_generation_errors_are_unknown(model_dir, settings, monkeypatch):  # noqa: F811
    judge = make_labeler(f"judge:hf:{model_dir}", settings)

    def boom(**kw):
        raise RuntimeError("CUDA out of memory")
    monkeypatch.setattr(judge.reply.vlm.net, "generate", boom)
    lab = judged(settings, judge).info["success_label"]
    assert lab["success"] is None and not lab["verified"] and lab["reason"] == "no reply from the judge"
    assert judge.reply.error == "RuntimeError: CUDA out of memory"


def test_a_local_judge_is_bounded_in_time_like_an_endpoint(model_dir, settings):  # noqa: F811
    """`judge:hf` generation stops at the judge's deadline (transformers' max_time): 4,000 new
    tokens allowed, 0.5 s given; the reply is cut, so the label is unknown (issue 35)."""
    import time

    from embodia.agent.loop.hf_judge import LocalJudgeModel
    model = LocalJudgeModel(str(model_dir), max_new_tokens=4000, timeout_s=0.5)
    judge = JudgeLabeler(str(model_dir), "", api_key_env=None, reply=model)
    first = settings.reset(0)
    t0 = time.monotonic()
    lab = judge(settings, first, first, "Turn on Mobile data", 0)
    assert time.monotonic() - t0 < 0.5 + 3.0 and lab.verified is False and lab.success is None
