"""Test-time scaling of the chat GUI policies (`samples=N`, `select=`): N candidate replies for one
conversation, unparsable ones dropped, the rest voted on a grid or judged by the model, and the
choice recorded. A loopback fake server (tests/fake_openai.py) stands in for vLLM; the tiny
Qwen2.5-VL of tests/test_local_vlm.py samples through `num_return_sequences` with forced rows."""
import hashlib
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from embodia.agent.cli.app import app  # noqa: E402
from embodia.agent.loop.factory import PolicyError, make_policy  # noqa: E402
from embodia.agent.recording.gui_log import list_gui_episodes, read_gui_episode  # noqa: E402
from embodia.devices import GuiAction, Observation, Screen  # noqa: E402
from embodia.devices.coords import to_pixels  # noqa: E402
from embodia.devices.gui import gui_embodiment  # noqa: E402
from embodia.policies.gui.prompt import PolicyGaveUp  # noqa: E402
from embodia.policies.gui.remote import OpenAIPolicy  # noqa: E402
from embodia.policies.gui.selection import vote, vote_key  # noqa: E402

pytest.register_assert_rewrite("fake_openai")
import test_local_vlm  # noqa: E402
from fake_openai import Reply, completion  # noqa: E402
from test_gui_sim_remote import expert_plan  # noqa: E402
from test_local_vlm import TARGET, Phone  # noqa: E402

pytest_plugins = ("fake_openai",)
model_dir = test_local_vlm.model_dir        # its tiny saved Qwen2.5-VL, a module fixture

PHONE = Screen(400, 800)
TREE = [{"index": 1, "role": "Button", "text": "Send", "bounds": [0, 700, 200, 800], "clickable": True}]


def ours(**action) -> str:
    return "I will do this.\n```json\n" + json.dumps(action) + "\n```"


def choices(*texts: str) -> Reply:
    """A completion with one choice per text, as a server that honours ``n`` answers."""
    body = completion(texts[0], "test", 0)
    body["choices"] = [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                       for i, t in enumerate(texts)]
    return Reply(body=json.dumps(body).encode())


def obs(shade=0, tree=TREE) -> Observation:
    img = np.zeros((800, 400, 3), np.uint8)
    img[..., 0] = (np.arange(400) * 255 // 400)[None, :]
    img[..., 2] = shade
    return Observation(images={"screen": img}, screen=PHONE, ui_tree=tree)


def policy(fake, **kw) -> OpenAIPolicy:
    return OpenAIPolicy("test", fake.url, api_key_env=None, image_max_side=400, backoff_s=0.01, **kw).bind(
        gui_embodiment("fake-phone", "gui-phone", PHONE))


@pytest.fixture(autouse=True)
def no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


AGREE = [ours(type="click", point=[502, 251]), ours(type="type", text="hello"),
         ours(type="click", point=[508, 256]), ours(type="click", point=[100, 900]),
         ours(type="click", point=[511, 262])]


# -- vote ------------------------------------------------------------------------------------------
def test_three_of_five_agreeing_candidates_win_the_vote_with_share_0_6(fake_openai):
    fake_openai.script(choices(*AGREE))
    pol = policy(fake_openai, samples=5)
    a = pol.act(obs(), "send hello")
    assert a.type == "click" and a.point == pytest.approx((507, 256.333), abs=1e-3)     # the group's mean
    (req,) = fake_openai.chats                                                           # one request, n=5
    assert req.body["n"] == 5 and req.body["temperature"] == 0.7
    sel = pol.step_record()["selection"]
    assert (sel["method"], sel["samples"], sel["parsed"], sel["dropped"], sel["chosen"]) == ("vote", 5, 5, 0, 0)
    assert sel["share"] == 0.6 and [g["votes"] for g in sel["groups"]] == [3, 1, 1]
    assert [g["action"]["type"] for g in sel["groups"]] == ["click", "type", "click"]     # ties: first seen first
    attempt = pol.step_record()["attempts"][0]
    assert [c["reply"] for c in attempt["candidates"]] == AGREE and attempt["requests"] == 1
    assert pol.info()["candidates"] == 5 and pol.info()["calls"] == 1
    # the history shows the executed (mean) action, as with one sample
    fake_openai.script(choices(*AGREE))
    pol.act(obs(), "send hello")
    assert '"point": [507.0, 256.3333333333333]' in fake_openai.chats[1].texts()[1]


def test_vote_key_snaps_points_to_the_grid_and_keeps_elements_keys_and_status_apart():
    assert vote_key(GuiAction("click", point=(502, 251))) == vote_key(GuiAction("click", point=(524, 274)))
    assert vote_key(GuiAction("click", point=(499, 251))) != vote_key(GuiAction("click", point=(502, 251)))
    assert vote_key(GuiAction("click", point=(499, 251)), grid=50) == vote_key(GuiAction("click", point=(451, 260)),
                                                                              grid=50)
    assert vote_key(GuiAction("click", element=3)) != vote_key(GuiAction("click", element=4))
    assert vote_key(GuiAction("key", keys=("Ctrl", "S"))) == vote_key(GuiAction("key", keys=("ctrl", "s")))
    assert vote_key(GuiAction("terminate", status="success")) != vote_key(GuiAction("terminate", status="failure"))
    groups = vote([GuiAction("click", point=(0, 1000))] * 3 + [GuiAction("wait")] * 3)
    assert groups[0].action.point == (0, 1000) and groups[0].members == (0, 1, 2)       # tie: the earliest
    assert groups[1].members == (3, 4, 5)


def test_a_server_that_ignores_n_gets_n_requests(fake_openai):
    fake_openai.script(*AGREE[:4])                      # plain entries: one choice per request
    pol = policy(fake_openai, samples=4)
    a = pol.act(obs(), "send hello")
    assert a.type == "click" and a.point == pytest.approx((505, 253.5))                  # [502,251] + [508,256]
    assert len(fake_openai.chats) == 4
    assert fake_openai.chats[0].body["n"] == 4 and all("n" not in r.body for r in fake_openai.chats[1:])
    assert all(r.body["temperature"] == 0.7 for r in fake_openai.chats)
    assert pol.step_record()["attempts"][0]["requests"] == 4 and pol.info()["calls"] == 4
    fake_openai.script(*AGREE[:4])                      # remembered: no more n for this server
    pol.act(obs(), "send hello")
    assert len(fake_openai.chats) == 8 and all("n" not in r.body for r in fake_openai.chats[4:])


def test_unparsable_candidates_are_dropped_and_recorded_and_a_round_without_any_is_retried(fake_openai):
    fake_openai.script(choices("no idea", "Action: click(start_box='(5000,5000)')", "hmm"),
                       choices(AGREE[0], "still no idea", AGREE[2]))
    pol = policy(fake_openai, samples=3, max_retries=1)
    a = pol.act(obs(), "send hello")
    assert a.type == "click" and a.point == pytest.approx((505, 253.5))
    first, second = pol.step_record()["attempts"]
    assert first["dropped"] == [0, 1, 2] and first["error"] == "none of the 3 candidates parsed"
    assert "outside the 0..1000 screen" in first["candidates"][1]["error"]
    assert second["dropped"] == [1] and second["error"] is None
    assert second["candidates"][1]["reply"] == "still no idea"
    assert second["candidates"][1]["error"].startswith("no action found")
    assert [c["error"] is None for c in second["candidates"]] == [True, False, True]
    sel = pol.step_record()["selection"]
    assert (sel["samples"], sel["parsed"], sel["dropped"], sel["share"]) == (3, 2, 1, 1.0)
    # the retry carries the first refused candidate and its error, as with one sample
    retry = fake_openai.chats[1].body["messages"]
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[2]["content"] == "no idea" and first["candidates"][0]["error"] in retry[3]["content"]
    assert pol.info()["parse_failures"] == 4 and pol.info()["candidates"] == 6

    fake_openai.script(choices("no", "no"))
    with pytest.raises(PolicyGaveUp, match="1 rounds of 2 samples"):
        policy(fake_openai, samples=2, max_retries=0).act(obs(), "x")


# -- judge -----------------------------------------------------------------------------------------
def test_the_judge_sees_every_candidate_and_its_number_picks_one(fake_openai):
    cands = [ours(type="click", point=[500, 250]), ours(type="click", element=1), ours(type="type", text="hello")]
    fake_openai.script(choices(*cands), "2")
    pol = policy(fake_openai, samples=3, select="judge", judge_model="judge-7b")
    assert pol.act(obs(), "send hello") == GuiAction("click", element=1)                 # candidate 2
    sampled, judged = fake_openai.chats
    assert judged.body["model"] == "judge-7b" and judged.body["temperature"] == 0.0 and "n" not in judged.body
    system, text = judged.texts()
    assert "Reply with the number of the best candidate and nothing else." in system
    assert "Task: send hello" in text and '[1] Button "Send"' in text                   # the tree names element 1
    listed = ['1. {"type": "click", "point": [500.0, 250.0]}', '2. {"type": "click", "element": 1}',
              '3. {"type": "type", "text": "hello"}']
    assert "\n".join(listed) in text and "Reply with the number (1 to 3)" in text
    assert judged.image_urls() == sampled.image_urls()                                  # the same screenshot
    sel = pol.step_record()["selection"]
    assert (sel["method"], sel["chosen"], sel["share"]) == ("judge", 1, 0.3333)
    assert sel["judge"]["reply"] == "2" and sel["judge"]["choice"] == 2 and sel["judge"]["model"] == "judge-7b"
    assert pol.info()["judge_calls"] == 1 and pol.info()["calls"] == 2


def test_judge_lists_points_in_the_coordinates_of_the_replies(fake_openai):
    def call(x, y):
        return '<tool_call>{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [%d, %d]}}' \
               '</tool_call>' % (x, y)
    fake_openai.script(choices(call(100, 200), call(30, 40)), " 1\n")
    pol = policy(fake_openai, samples=2, select="judge", coords="image_px")
    a = pol.act(obs(tree=None), "tap")
    size = pol.step_record()["input_size"]
    assert '1. {"type": "click", "point": [100.0, 200.0]}' in fake_openai.chats[1].texts()[1]
    assert f"which is {size[0]}x{size[1]}" in fake_openai.chats[1].texts()[1]
    assert a.point == pytest.approx((100 / size[0] * 1000, 200 / size[1] * 1000))


def test_a_judge_reply_that_is_not_a_bare_number_falls_back_to_the_vote(fake_openai):
    cands = [ours(type="type", text="hello"), ours(type="click", point=[500, 250]),
             ours(type="click", point=[501, 251])]
    fake_openai.script(choices(*cands), "the second one", choices(*cands), "7")
    pol = policy(fake_openai, samples=3, select="judge")
    a = pol.act(obs(), "send hello")
    assert a.type == "click" and a.point == (500.5, 250.5)                              # the vote's winner
    sel = pol.step_record()["selection"]
    assert sel["fallback"] == "vote" and sel["chosen"] == 0 and sel["share"] == pytest.approx(0.6667)
    assert sel["judge"]["reply"] == "the second one" and sel["judge"]["error"] == "not a bare integer"
    assert "choice" not in sel["judge"]
    pol.act(obs(), "send hello")
    assert pol.step_record()["selection"]["judge"]["error"] == "7 is not a candidate number (1 to 2)"
    assert pol.info()["judge_refused"] == 2
    # one distinct candidate: nothing to judge, no judge request
    fake_openai.script(choices(cands[1], cands[2], cands[1]))
    pol.act(obs(), "send hello")
    assert len(fake_openai.chats) == 5 and "judge" not in pol.step_record()["selection"]


# -- the hook and propose --------------------------------------------------------------------------
def test_a_select_callable_or_a_propose_caller_picks_among_the_distinct_candidates(fake_openai):
    seen = []

    def prefer_typing(candidates, obs, instruction):
        seen.append((candidates, instruction))
        return next((i for i, c in enumerate(candidates) if c.type == "type"), None)

    fake_openai.script(choices(*AGREE))
    pol = policy(fake_openai, samples=5, select=prefer_typing)
    assert pol.act(obs(), "send hello") == GuiAction("type", text="hello")
    (cands, instruction), = seen
    assert [c.type for c in cands] == ["click", "type", "click"] and instruction == "send hello"
    sel = pol.step_record()["selection"]
    assert sel["method"] == "custom" and sel["selector"].endswith("prefer_typing") and sel["share"] == 0.2

    fake_openai.script(choices(*AGREE[:3]))               # no typing candidate: None defers to the vote
    pol2 = policy(fake_openai, samples=3, select=lambda c, o, i: None)
    assert pol2.act(obs(), "x").point == pytest.approx((505, 253.5))
    assert pol2.step_record()["selection"]["deferred"] == "vote"
    fake_openai.script(choices(*AGREE[:2]))
    with pytest.raises(ValueError, match="returned 5; expected an index 0..1 or None"):
        policy(fake_openai, samples=2, select=lambda c, o, i: 5).act(obs(), "x")

    fake_openai.script(choices(*AGREE))
    pol3 = policy(fake_openai, samples=2)
    proposed = pol3.propose(obs(), "send hello", n=5)
    assert [a.type for a in proposed] == ["click", "type", "click"]
    assert proposed[0].point == pytest.approx((507, 256.333), abs=1e-3)
    assert fake_openai.chats[-1].body["n"] == 5
    assert pol3.step_record()["selection"]["method"] == "propose" and "chosen" not in pol3.step_record()["selection"]
    fake_openai.script(*[choices(*AGREE[:2])] * 3)
    pol3.act(obs(), "send hello")
    assert "Previous actions: none." in fake_openai.chats[-1].texts()[1]                # propose chose nothing
    pol3.propose(obs(), "send hello")
    pol3.after_step(obs(), proposed[1])                     # a re-ranker executed the second; the loop says so
    pol3.act(obs(shade=5), "send hello")
    text = fake_openai.chats[-1].texts()[1]
    assert '{"step": 0, "action": {"type": "click", "point": [502.0, 251.0]}, "outcome": "not confirmed' in text
    assert '{"step": 1, "action": {"type": "type", "text": "hello"}, "outcome": "executed; the screen changed"}' \
        in text


def test_bad_settings_are_refused(fake_openai):
    with pytest.raises(ValueError, match="unknown selection 'best'"):
        policy(fake_openai, samples=3, select="best")
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        policy(fake_openai, samples=0)
    with pytest.raises(ValueError, match="sample_temperature must be > 0"):
        policy(fake_openai, samples=3, sample_temperature=0.0)


# -- samples=1 is what it was ----------------------------------------------------------------------
# sha256 of each request body, its screenshot data URL replaced by "<image>", captured from the code
# before sampling existed (a refused reply, its retry, then a second decision with history). A
# deliberate change of the prompt changes these: recapture them then.
BEFORE = ["bbda16d0e4693412115b365e94b1762adfd127f60c7bef697e115fc13082d0ff",
          "1b9661577f98a240f2bf9a5aff47cf57591d8f3b2d25ed87bc0ae782c2b5e1af",
          "3d295a6296a13ce523809e39ca0abe3ecaa1fe61389338d7193a40f03dd84937"]


def _bodies(fake, **kw) -> list[bytes]:
    start = len(fake.chats)
    fake.script("no action here", '{"type": "click", "point": [250, 937]}', '{"type": "type", "text": "hi"}')
    pol = policy(fake, **kw)
    pol.act(obs(0), "send hi")
    pol.after_step(None, None)
    pol.act(obs(9), "send hi")
    out = []
    for r in fake.chats[start:]:
        raw = r.raw
        for u in r.image_urls():
            raw = raw.replace(u.encode(), b"<image>")
        out.append(raw)
    return out


def test_one_sample_sends_exactly_the_requests_sent_before_sampling_existed(fake_openai):
    plain = _bodies(fake_openai)
    assert [hashlib.sha256(b).hexdigest() for b in plain] == BEFORE, [json.loads(b) for b in plain]
    assert plain == _bodies(fake_openai, samples=1, select="judge", judge_model="other")
    assert [list(r.body) for r in fake_openai.chats] == [["model", "messages", "temperature", "max_tokens"]] * 6


# -- wiring: factory and CLI -----------------------------------------------------------------------
def test_factory_and_cli_pass_samples_and_select(fake_openai, monkeypatch, tmp_path):
    class Desk:
        embodiment = gui_embodiment("d", "gui-desktop", Screen(1600, 900))

    pol = make_policy("openai:test", Desk(), base_url=fake_openai.url, samples=4, select="judge")
    assert (pol.samples, pol.select) == (4, "judge")
    with pytest.raises(PolicyError, match="--samples applies to openai:<model> and hf:<path>"):
        make_policy("random", Desk(), samples=4)

    uri = "gui-sim:settings?task=open-turn-off"
    instruction, plan = expert_plan(uri, seed=3)
    wrong = ours(type="system_button", button="home")
    fake_openai.script(*[choices(wrong, "```json\n" + json.dumps(a) + "\n```", "```json\n" + json.dumps(a) + "\n```")
                         for a in plan])
    rec = tmp_path / "rec"
    r = CliRunner().invoke(app, ["run", "--device", uri, "--policy", "openai:test", "--base-url", fake_openai.url,
                                 "--seed", "3", "--record", str(rec), "--max-steps", "10", "--samples", "3",
                                 "--select", "vote"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "success" in r.output and fake_openai.left == 0
    assert all(c.body["n"] == 3 for c in fake_openai.chats)
    steps = read_gui_episode(list_gui_episodes(rec)[0])["steps"]
    assert [s["policy_record"]["selection"]["share"] for s in steps] == [pytest.approx(2 / 3, abs=1e-4)] * len(plan)
    r = CliRunner().invoke(app, ["run", "--device", uri, "--policy", "openai:test", "--base-url", fake_openai.url,
                                 "--no-record", "--samples", "3", "--select", "best"])
    assert r.exit_code == 2 and "unknown selection 'best'" in r.output


# -- LocalVLMPolicy: N sequences from one generate call --------------------------------------------
class ForceRows:
    """Makes row i of each `generate` call emit ``replies[i]`` then end-of-text."""

    def __init__(self, tokenizer, replies):
        self.seqs = [tokenizer(r, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for r in replies]
        self.start = None

    def __call__(self, input_ids, scores):
        import torch
        if self.start is None:
            self.start = input_ids.shape[1]
        forced = torch.full_like(scores, float("-inf"))
        for row in range(scores.shape[0]):
            seq = self.seqs[row % len(self.seqs)]
            forced[row, seq[min(input_ids.shape[1] - self.start, len(seq) - 1)]] = 0.0
        return forced


def test_local_policy_samples_n_sequences_in_one_generate_call_and_votes(model_dir, monkeypatch):
    from transformers import LogitsProcessorList

    from embodia.policies.gui.local_vlm import LocalVLMPolicy

    dev = Phone()
    pol = LocalVLMPolicy(model_dir, max_new_tokens=40, max_retries=0, samples=3, sample_temperature=0.5)
    force = ForceRows(pol.tokenizer, [TARGET, "no idea", TARGET.replace("250", "255")])
    pol.generation_kwargs = {"logits_processor": LogitsProcessorList([force])}
    pol.bind(dev.embodiment)
    calls, real = [], pol.net.generate
    monkeypatch.setattr(pol.net, "generate", lambda **kw: calls.append(kw) or real(**kw))
    a = pol.act(dev.observe(), "tap the green button")
    assert a.type == "click" and a.point == (500, 252.5)
    assert to_pixels(a.point, dev.embodiment.screen) == (200, 202)
    (kw,) = calls
    assert (kw["num_return_sequences"], kw["do_sample"], kw["temperature"]) == (3, True, 0.5)
    attempt = pol.step_record()["attempts"][0]
    assert [c["reply"] for c in attempt["candidates"]] == [TARGET, "no idea", TARGET.replace("250", "255")]
    assert attempt["dropped"] == [1] and attempt["tokens"] == sum(len(s) for s in force.seqs)
    sel = pol.step_record()["selection"]
    assert (sel["parsed"], sel["dropped"], sel["share"]) == (2, 1, 1.0)
