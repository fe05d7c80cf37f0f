"""`--policy openai:<model>`: the request a model receives (instruction, embodiment, history, UI tree,
the resized screenshot), how its reply's coordinates map back, bounded retries of replies that do
not parse and of HTTP failures, the API key, and a real Tk form on Xvfb filled through `embodia run`
by replies in four different forms. A loopback fake server (tests/fake_openai.py) stands in for vLLM."""
import json
import socket

import numpy as np
import pytest
from typer.testing import CliRunner

from embodia.agent.cli.app import app
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import POLICY_SPECS, PolicyError, make_policy
from embodia.agent.recording.gui_log import GuiRecorder, list_gui_episodes, read_gui_episode
from embodia.devices import Channel, Embodiment, GuiAction, Observation, Screen
from embodia.devices.coords import to_pixels
from embodia.devices.gui import gui_embodiment

pytest.register_assert_rewrite("fake_openai")
from fake_openai import FakeOpenAI, Reply  # noqa: E402  (after the rewrite hook, so its asserts report well)
from fake_phone import Phone  # noqa: E402

from embodia.policies.gui.prompt import PolicyGaveUp, fit_image
from embodia.policies.gui.remote import EndpointError, OpenAIPolicy

pytest_plugins = ("gui_fixtures", "fake_openai")

KEY_ENV = "EMBODIA_TEST_OPENAI_KEY"
TREE = [
    {"index": 0, "role": "EditText", "text": "", "desc": "message", "bounds": [0, 0, 400, 100], "focused": True},
    {"index": 1, "role": "Button", "text": "Send", "bounds": [0, 700, 200, 800], "clickable": True},
    {"index": 2, "role": "FrameLayout", "bounds": [0, 0, 400, 800]},                  # a container: left out
    {"index": 3, "role": "EditText", "text": "1234", "bounds": [0, 100, 400, 200], "password": True},
]


def tool_call(action: str, **args) -> str:
    return ("<thinking>next step</thinking>\n<tool_call>\n"
            + json.dumps({"name": "computer_use", "arguments": {"action": action, **args}}) + "\n</tool_call>")


def screen_obs(w=1600, h=900, tree=None, shade=0) -> Observation:
    img = np.zeros((h, w, 3), np.uint8)
    img[..., 0] = (np.arange(w) * 255 // w)[None, :]
    img[..., 2] = shade
    return Observation(images={"screen": img}, screen=Screen(w, h), ui_tree=tree)


def policy(fake, w=1600, h=900, kind="gui-desktop", **kw) -> OpenAIPolicy:
    kw = {"api_key_env": KEY_ENV, "backoff_s": 0.01, **kw}
    return OpenAIPolicy("test", fake.url, **kw).bind(gui_embodiment(f"fake-{kind}", kind, Screen(w, h)))


@pytest.fixture(autouse=True)
def no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


# -- the request -----------------------------------------------------------------------------------
def test_request_carries_instruction_embodiment_tree_history_and_the_resized_screenshot(fake_openai):
    fake_openai.script(tool_call("left_click", coordinate=[500, 120]), '{"type": "type", "text": "hi ✓"}',
                       '{"type": "click", "element": 1}', tool_call("wait", time=1))
    pol = policy(fake_openai, 400, 800, kind="gui-phone", history=2, image_max_side=400)
    a = pol.act(screen_obs(400, 800, TREE), "send hi to Bob")
    assert a == GuiAction("click", point=(500, 120))
    req = fake_openai.chats[0]
    assert req.body["model"] == "test" and req.body["temperature"] == 0.0
    system, user = req.body["messages"]
    assert system["role"] == "system" and '{"type": "click", "point": [x, y]}' in system["content"]
    assert "0 to 1000" in system["content"] and '"element": <index>' in system["content"]
    text = user["content"][0]["text"]
    assert "Task: send hi to Bob" in text and pol.embodiment.prompt() in text
    assert "Previous actions: none." in text
    # the tree: element 1 with bounds in 0..1000, the password's text never shown, the container left out
    assert '[1] Button "Send" [0,875,500,1000] clickable' in text
    assert "[3] EditText [0,125,1000,250] password" in text and "1234" not in text and "[2]" not in text
    assert req.image_sizes() == [(200, 400)] and user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    rec = pol.step_record()
    assert (rec["model"], rec["coords"], rec["input_size"]) == ("test", "norm1000", [200, 400])
    assert [(t["reply"], t["error"]) for t in rec["attempts"]] == [(tool_call("left_click", coordinate=[500, 120]), None)]
    assert rec["attempts"][0]["ms"] > 0

    pol.after_step(None, a)                                        # the loop: it ran
    pol.act(screen_obs(400, 800, TREE, shade=9), "send hi to Bob")
    pol.after_step(None, None)
    pol.act(screen_obs(400, 800, TREE, shade=9), "send hi to Bob")   # the type changed nothing on screen
    pol.act(screen_obs(400, 800, TREE, shade=9), "send hi to Bob")   # the element click was not confirmed
    texts = [r.texts()[1] for r in fake_openai.chats]
    first = json.dumps({"step": 0, "action": {"type": "click", "point": [500.0, 120.0]},
                        "outcome": "executed; the screen changed"})
    assert first in texts[1] and first in texts[2] and first not in texts[3]      # history=2: the last two
    assert '"text": "hi ✓"' in texts[2] and "executed; the screen did not change" in texts[2]
    assert '"element": 1}, "outcome": "not confirmed as executed"' in texts[3]
    assert pol.info()["decisions"] == 4 and pol.info()["calls"] == 4 and pol.info()["mean_ms"] > 0


def test_image_px_replies_map_through_the_size_of_the_image_the_model_saw(fake_openai):
    target = (1200, 450)            # a screen pixel of the 1600x900 screen

    def at_target(req):             # a Qwen-style model answers in pixels of the image it received
        iw, ih = req.image_sizes()[0]
        return tool_call("left_click", coordinate=[(target[0] + 0.5) * iw / 1600, (target[1] + 0.5) * ih / 900])

    def uitars(req):
        iw, ih = req.image_sizes()[0]
        return f"Thought: there\nAction: click(start_box='({target[0] * iw / 1600:.1f},{target[1] * ih / 900:.1f})')"

    fake_openai.script(at_target, uitars)
    pol = policy(fake_openai, coords="image_px")
    screen = Screen(1600, 900)
    a = pol.act(screen_obs(), "click it")
    assert to_pixels(a.point, screen) == target
    size = fake_openai.chats[0].image_sizes()[0]
    assert size == fit_image(1600, 900, 1280, 28) == (1260, 728)        # Qwen patches: multiples of 28
    assert pol.step_record()["input_size"] == list(size)
    assert "pixels of the screenshot you see, which is 1260x728" in fake_openai.chats[0].texts()[0]
    assert "computer_use" in fake_openai.chats[0].texts()[0]
    x, y = to_pixels(pol.act(screen_obs(), "click it").point, screen)
    assert abs(x - target[0]) <= 1 and abs(y - target[1]) <= 1         # UI-TARS rounds to 0.1 image px


def test_tree_bounds_follow_the_coordinate_convention(fake_openai):
    fake_openai.script(tool_call("left_click", coordinate=[10, 10]))
    policy(fake_openai, 400, 800, kind="gui-phone", coords="image_px", image_max_side=400).act(
        screen_obs(400, 800, TREE), "x")
    text = fake_openai.chats[0].texts()[1]
    assert '[1] Button "Send" [0,343,98,392] clickable' in text        # a 196x392 image: bounds scaled
    assert "mobile_use" in fake_openai.chats[0].texts()[0] and "system_button" in fake_openai.chats[0].texts()[0]


# -- retries ---------------------------------------------------------------------------------------
def test_two_bad_replies_then_a_good_one_succeeds_on_the_third_attempt(fake_openai):
    fake_openai.script("I should probably click the button.", "Action: click(start_box='(5000,5000)')",
                       "Thought: ok\nAction: click(start_box='(100,200)')")
    pol = policy(fake_openai, max_retries=2)
    assert pol.act(screen_obs(), "press it") == GuiAction("click", point=(100, 200))
    attempts = pol.step_record()["attempts"]
    assert [a["error"] is None for a in attempts] == [False, False, True]
    assert "outside the 0..1000 screen" in attempts[1]["error"]
    retry = fake_openai.chats[2].body["messages"]
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert retry[2]["content"] == "I should probably click the button."
    assert attempts[0]["error"] in retry[3]["content"] and attempts[1]["error"] in retry[5]["content"]
    assert pol.info()["parse_failures"] == 2 and pol.info()["calls"] == 3


def test_giving_up_after_max_retries_executes_nothing_and_keeps_the_replies(fake_openai, tmp_path):
    fake_openai.script(*["no idea"] * 3)

    dev = Phone()
    pol = OpenAIPolicy("test", fake_openai.url, max_retries=2).bind(dev.embodiment)
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    r = run_episode(dev, pol, instruction="do it", recorder=rec)
    assert r.error.startswith("PolicyGaveUp") and "3 replies" in r.error and dev.log == [] and r.steps == 0
    assert len(fake_openai.chats) == 3 and pol.info()["gave_up"] == 1
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])
    assert ep["steps"] == [] and len(ep["end"]["info"]["last_policy_record"]["attempts"]) == 3

    fake_openai.script("still nothing")
    with pytest.raises(PolicyGaveUp) as e:
        OpenAIPolicy("test", fake_openai.url, max_retries=0).bind(dev.embodiment).act(dev.observe(), "x")
    assert isinstance(e.value, ValueError) and e.value.record["attempts"][0]["reply"] == "still nothing"


def test_server_errors_are_retried_with_backoff_then_reported(fake_openai):
    fake_openai.script(500, Reply(status=503, headers={"Retry-After": "0"}), tool_call("type", text="x"))
    pol = policy(fake_openai)
    assert pol.act(screen_obs(), "x") == GuiAction("type", text="x")
    assert len(fake_openai.chats) == 3 and pol.info()["http_retries"] == 2 and pol.info()["calls"] == 1
    fake_openai.script(502, 502)
    with pytest.raises(EndpointError, match=r"HTTP 502 .*after 2 tries"):
        policy(fake_openai, http_retries=1).act(screen_obs(), "x")


def test_unauthorized_names_the_url_and_the_env_var_never_the_key(monkeypatch):
    with FakeOpenAI(require_key="the-right-key") as fake:
        monkeypatch.setenv(KEY_ENV, "sk-wrong-secret-123")
        with pytest.raises(EndpointError) as e:
            policy(fake).act(screen_obs(), "x")
        msg = str(e.value)
        assert fake.url + "/chat/completions" in msg and "401" in msg and f"${KEY_ENV}, which is set" in msg
        assert "sk-wrong-secret-123" not in msg and "Incorrect API key provided: ***" in msg
        assert len(fake.chats) == 1                                       # a 401 is not retried
        monkeypatch.delenv(KEY_ENV)
        with pytest.raises(EndpointError, match=f"\\${KEY_ENV}, which is unset, so none was sent"):
            policy(fake).act(screen_obs(), "x")


def test_the_key_is_sent_only_when_its_env_var_is_set(fake_openai, monkeypatch):
    fake_openai.script(*[tool_call("wait", time=1)] * 2)
    pol = policy(fake_openai)
    pol.act(screen_obs(), "x")
    monkeypatch.setenv(KEY_ENV, "sk-local")                 # read at call time, not at construction
    pol.act(screen_obs(), "x")
    assert "authorization" not in fake_openai.chats[0].headers
    assert fake_openai.chats[1].headers["authorization"] == "Bearer sk-local"


def test_native_tool_calls_parse_and_a_foreign_answer_is_an_endpoint_error(fake_openai):
    call = {"id": "c0", "type": "function",
            "function": {"name": "computer_use", "arguments": json.dumps({"action": "key", "keys": ["ctrl", "s"]})}}
    fake_openai.script(Reply(content=None, tool_calls=[call]), Reply(body=b"<html>hello</html>"))
    pol = policy(fake_openai)
    assert pol.act(screen_obs(), "save") == GuiAction("key", keys=("ctrl", "s"))
    with pytest.raises(EndpointError, match="did not answer with an OpenAI chat completion"):
        pol.act(screen_obs(), "save")


def test_an_unreachable_server_is_retried_then_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # closed again: nothing listens there
    pol = OpenAIPolicy("test", f"http://127.0.0.1:{port}/v1", http_retries=1, backoff_s=0.01).bind(
        gui_embodiment("d", "gui-desktop", Screen(1600, 900)))
    with pytest.raises(EndpointError, match=f"cannot reach http://127.0.0.1:{port}/v1/chat/completions .* after 2 tries"):
        pol.act(screen_obs(), "x")


def test_factory_spec_and_the_actions_a_device_supports(monkeypatch, fake_openai):
    class Desk:
        embodiment = gui_embodiment("d", "gui-desktop", Screen(1600, 900))
        supported = frozenset({"click", "type"})

    class Arm:
        embodiment = Embodiment("arm", "planar pusher", actions=(Channel("vx", -1, 1),))

    assert "openai:<model>" in POLICY_SPECS
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(PolicyError, match="--base-url"):
        make_policy("openai:test", Desk())
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.url)
    pol = make_policy("openai:qwen2.5-vl:7b", Desk(), coords="image_px")    # model names may hold ':'
    assert (pol.model, pol.base_url, pol.coords) == ("qwen2.5-vl:7b", fake_openai.url, "image_px")
    fake_openai.script(tool_call("wait", time=1))
    make_policy("openai:test", Desk()).act(screen_obs(), "x")
    system = fake_openai.chats[0].texts()[0]
    assert '{"type": "click"' in system and '{"type": "terminate"' in system and "double_click" not in system
    with pytest.raises(ValueError, match="drives GUI devices"):
        make_policy("openai:test", Arm(), base_url=fake_openai.url)


# -- end to end: a real form on Xvfb, filled through `embodia run` -----------------------------------
TEXT = "Grüße, 你好 ✓"


def test_embodia_run_fills_a_real_form_from_replies_in_four_forms(xvfb, tk_form, fake_openai, tmp_path):
    screen = Screen(xvfb.width, xvfb.height)

    def centre_px(widget, req):     # the widget's centre in pixels of the image the model received
        iw, ih = req.image_sizes()[0]
        x0, y0, x1, y1 = tk_form.rect(widget)
        return [round((x0 + x1) / 2 * iw / screen.width, 1), round((y0 + y1) / 2 * ih / screen.height, 1)]

    fake_openai.script(
        lambda req: tool_call("left_click", coordinate=centre_px("entry", req)),                 # GUI-Owl
        tool_call("type", text=TEXT),
        "Thought: the checkbox is just below the name.\nAction: click(start_box='(99999,5)')",  # refused
        lambda req: "Thought: tick Subscribe\nAction: click(start_box='({}, {})')".format(*centre_px("check", req)),
        "Now submit.\n```json\n" + json.dumps({"type": "click", "point": list(tk_form.point("submit", screen))})
        + "\n```",                                                                          # our JSON, 0..1000
        tool_call("terminate", status="success"))
    rec = tmp_path / "rec"
    r = CliRunner().invoke(app, ["run", "--device", f"desktop:{xvfb.display.lstrip(':')}", "--policy", "openai:test",
                                 "--base-url", fake_openai.url, "--coords", "image_px", "--record", str(rec),
                                 "--max-steps", "10"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    state = tk_form.wait_state(lambda s: s["submits"] >= 1)
    assert state["entry"] == TEXT and state["checked"] is True and state["submits"] == 1
    assert [e["widget"] for e in state["events"] if e["type"] == "press"] == ["entry", "check", "submit"]

    chats = fake_openai.chats
    assert len(chats) == 6 and fake_openai.left == 0
    assert {c.image_sizes()[0] for c in chats} == {fit_image(xvfb.width, xvfb.height, 1280, 28)}
    retry = chats[3].body["messages"]
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
    assert "(99999,5)" in retry[2]["content"] and "outside the screen" in retry[3]["content"]
    assert '"type": "type", "text": "Grüße, 你好 ✓"}, "outcome": "executed; the screen changed"' in chats[4].texts()[1]

    ep = read_gui_episode(list_gui_episodes(rec)[0])
    steps = ep["steps"]
    assert [s["action"]["type"] for s in steps] == ["click", "type", "click", "click", "terminate"]
    assert steps[1]["action"]["text"] == TEXT
    assert tk_form.contains("check", *to_pixels(steps[2]["action"]["point"], screen))
    tries = steps[2]["policy_record"]["attempts"]
    assert len(tries) == 2 and "outside the screen" in tries[0]["error"] and tries[1]["error"] is None
    assert all(len(s["policy_record"]["attempts"]) == 1 for i, s in enumerate(steps) if i != 2)
    assert steps[0]["policy_record"]["input_size"] == list(fit_image(xvfb.width, xvfb.height, 1280, 28))
    assert ep["end"]["info"]["policy"]["parse_failures"] == 1 and ep["end"]["info"]["claimed_status"] == "success"
