"""GUI episodes through the one control loop: recording, the safety gate, terminate, device loss,
replay with screen-divergence checks. A small in-process GUI device stands in for a screen."""
import json

import numpy as np
import pytest

from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.replay import replay_gui
from embodia.agent.loop.safety import SafetyGate, classify
from embodia.agent.recording.gui_log import GuiRecorder, list_gui_episodes, load_actions, read_gui_episode
from embodia.devices import DeviceLost, GuiAction, Screen
from embodia.devices.gui import GuiDevice, gui_embodiment
from embodia.policies import GuiReplayPolicy

TREE = [
    {"index": 0, "role": "EditText", "text": "", "desc": "message", "bounds": [0, 0, 400, 100], "focused": True},
    {"index": 1, "role": "Button", "text": "Send", "bounds": [0, 700, 200, 800]},
    {"index": 2, "role": "Button", "text": "Cancel", "bounds": [200, 700, 400, 800]},
    {"index": 3, "role": "EditText", "text": "", "desc": "PIN", "bounds": [0, 100, 400, 200], "password": True},
]


class FakeScreen(GuiDevice):
    """A 400x800 'phone' whose screen shows how many input actions it has received."""

    supported = frozenset({"click", "long_press", "swipe", "type", "system_button", "key", "scroll"})
    capabilities = frozenset({"screenshot", "ui_tree"})

    def __init__(self, lose_after: int | None = None):
        super().__init__()
        self.screen = Screen(400, 800, 2.0)
        self.embodiment = gui_embodiment("fake-phone", "gui-phone", self.screen)
        self.log: list[tuple] = []
        self.lose_after = lose_after
        self.tint = 0

    def _screen(self):
        return self.screen

    def _grab(self):
        img = np.full((800, 400, 3), 30 * len(self.log) % 256, np.uint8)
        img[..., 2] = self.tint
        return img

    def _ui_tree(self):
        return [dict(e) for e in TREE]

    def _execute(self, action, p, q):
        if self.lose_after is not None and len(self.log) >= self.lose_after:
            raise DeviceLost("fake phone unplugged")
        self.log.append((action.type, p, q, action.text))


def actions():
    return [GuiAction("click", point=(500, 50)), GuiAction("type", text="héllo; $(id)"),
            GuiAction("click", element=2), GuiAction("terminate", status="success"),
            GuiAction("click", point=(10, 10))]            # after terminate: never executed


def test_episode_is_recorded_with_screens_sizes_and_ends_at_terminate(tmp_path):
    dev = FakeScreen()
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    r = run_episode(dev, GuiReplayPolicy(actions()), seed=3, instruction="say hello", recorder=rec,
                    episode_meta={"device": "fake:"})
    assert r.error is None and r.steps == 4 and r.success is None
    assert r.info["claimed_status"] == "success"
    # element 2 (Cancel, bounds 200..400 x 700..800) -> its centre in pixels
    assert dev.log == [("click", (200, 40), None, None), ("type", None, None, "héllo; $(id)"),
                       ("click", (300, 750), None, None)]
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0], load_images=True)
    assert ep["header"]["task"] == "say hello" and ep["header"]["seed"] == 3
    assert [s["action"]["type"] for s in ep["steps"]] == ["click", "type", "click", "terminate"]
    assert ep["steps"][1]["action"]["text"] == "héllo; $(id)"
    assert ep["steps"][2]["action"]["point"] == [750.0, 937.5]       # resolved element, 0..1000
    assert all(s["screen"] == {"width": 400, "height": 800, "pixel_ratio": 2.0} for s in ep["steps"])
    assert ep["steps"][0]["ui_tree"][1]["text"] == "Send"
    shots = [s["screenshot"] for s in ep["steps"]]
    assert [int(x[0, 0, 0]) for x in shots] == [0, 30, 60, 90]      # the screen BEFORE each action
    assert ep["end"]["success"] is None and ep["end"]["final_image"]["file"] == "screens/final.png"


def test_risky_action_is_refused_by_default_recorded_and_not_executed(tmp_path):
    dev = FakeScreen()
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    plan = [GuiAction("type", text="hi"), GuiAction("click", element=1), GuiAction("click", element=2)]
    r = run_episode(dev, GuiReplayPolicy(plan), recorder=rec)
    assert [a[0] for a in dev.log] == ["type"]                         # Send never reached the device
    assert r.error.startswith("RiskRefused") and "--allow send" in r.error
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])
    last = ep["steps"][-1]
    assert last["executed"] is False and last["safety"]["risk"] == "send"
    assert last["safety"]["by"] == "default-no" and "Send" in last["safety"]["evidence"]
    assert ep["end"]["info"]["error"] == r.error                       # the episode was closed and saved


@pytest.mark.parametrize("gate, by", [(SafetyGate(allow=["send"]), "allow-list"),
                                      (SafetyGate(confirm=lambda d: True), "user")])
def test_allowed_or_confirmed_risky_action_runs_and_the_decision_is_recorded(tmp_path, gate, by):
    dev = FakeScreen()
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    r = run_episode(dev, GuiReplayPolicy([GuiAction("click", element=1)]), recorder=rec, gate=gate)
    assert r.error is None and dev.log == [("click", (100, 750), None, None)]
    step = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])["steps"][0]
    assert step["executed"] is True and step["safety"] == gate.decisions[0]
    assert step["safety"]["by"] == by


def test_a_person_saying_no_refuses():
    asked = []
    gate = SafetyGate(confirm=lambda d: asked.append(d) or False)
    dev = FakeScreen()
    r = run_episode(dev, GuiReplayPolicy([GuiAction("click", point=(250, 937))]), gate=gate)
    assert asked and asked[0]["risk"] == "send" and dev.log == [] and "RiskRefused" in r.error


@pytest.mark.parametrize("action, risk", [
    (GuiAction("type", text="1234", element=3), "password"),
    (GuiAction("type", text="1234"), None),                      # focused element 0 is a message box
    (GuiAction("click", element=2), None),
    (GuiAction("long_press", point=(250, 937)), "send"),
    (GuiAction("key", keys=("shift", "delete")), None),         # in the focused message box: cuts the text
    (GuiAction("key", keys=("ctrl", "enter")), "send"),           # ... and ctrl+enter sends it
    (GuiAction("scroll", point=(500, 500), direction="down"), None),
])
def test_classify(action, risk):
    assert classify(action, TREE, (400, 800))[0] == risk


@pytest.mark.parametrize("label, risk", [("Delete chat", "delete"), ("Uninstall", "delete"),
                                         ("Install", "install"), ("Buy now", "purchase"),
                                         ("Place order", "pay"), ("Post", "send"), ("Settings", None),
                                         ("Sender name", None)])
def test_classify_labels(label, risk):
    tree = [{"index": 0, "text": label, "bounds": [0, 0, 400, 800]}]
    assert classify(GuiAction("click", element=0), tree, (400, 800))[0] == risk


def test_unknown_allow_class_is_an_error():
    with pytest.raises(ValueError, match="unknown risk class"):
        SafetyGate(allow=["sned"])


def test_device_lost_mid_episode_ends_cleanly_with_the_record_saved(tmp_path):
    dev = FakeScreen(lose_after=1)
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    r = run_episode(dev, GuiReplayPolicy(actions()), recorder=rec)
    assert r.error == "DeviceLost: fake phone unplugged" and r.steps == 1
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])
    assert len(ep["steps"]) == 1 and ep["end"]["info"]["error"] == r.error


def test_a_torn_last_line_loses_only_that_step(tmp_path):
    dev = FakeScreen()
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    ep = rec.begin_episode(task="t")
    obs = dev.reset()
    for a in actions()[:3]:
        ep.add_step(obs, a)
    ep._f.write('{"type": "step", "t": 3, "act')          # killed mid-write
    ep._f.flush()
    back = read_gui_episode(ep.path)
    assert len(back["steps"]) == 3 and back["end"] is None


def test_replay_re_executes_and_stops_when_the_screen_diverges(tmp_path):
    dev = FakeScreen()
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    run_episode(dev, GuiReplayPolicy(actions()[:3]), recorder=rec, episode_meta={"device": "fake:"})
    again = FakeScreen()
    out = replay_gui(tmp_path / "rec", device=again, stop_on_divergence=0.05)
    assert out["completed"] and out["diverged_at"] is None and again.log == dev.log
    assert out["max_divergence"] == 0.0
    changed = FakeScreen()
    changed.tint = 200                                       # a different screen: nothing runs
    out = replay_gui(tmp_path / "rec", device=changed, stop_on_divergence=0.05)
    assert out["diverged_at"] == 0 and changed.log == [] and not out["completed"]


def test_actions_file_is_validated_with_positions(tmp_path):
    f = tmp_path / "a.json"
    f.write_text(json.dumps([{"type": "click", "point": [10, 20]}, {"type": "click", "point": [10, 2000]}]))
    with pytest.raises(ValueError, match="action 1 is invalid.*outside"):
        load_actions(f)
    f.write_text(json.dumps({"actions": [{"type": "type", "text": "x"}]}))
    assert load_actions(f) == [GuiAction("type", text="x")]


def test_typing_into_a_named_field_taps_it_first():
    dev = FakeScreen()
    dev.reset()
    dev.act(GuiAction("type", text="1234", element=3))
    assert dev.log == [("click", (200, 150), None, None), ("type", (200, 150), None, "1234")]


def test_device_refuses_what_it_cannot_do_and_unknown_elements():
    dev = FakeScreen()
    r = run_episode(dev, GuiReplayPolicy([GuiAction("open_app", app="com.x")]))
    assert "cannot 'open_app'" in r.error and dev.log == []
    r = run_episode(dev, GuiReplayPolicy([GuiAction("click", element=42)]))
    assert "element 42" in r.error and dev.log == []


def test_one_key_name_is_one_key():
    assert GuiAction("key", keys="enter").keys == ("enter",)
    assert GuiAction("key", keys=["ctrl", "a"]).keys == ("ctrl", "a")


class Talkative(GuiReplayPolicy):
    """Says what its 'model' replied at each decision; gives up (ValueError) when it runs out."""

    def act(self, obs, instruction):
        self.said = {"attempts": [{"reply": f"reply {self.cursor}", "error": None}]}
        if self.cursor >= len(self.actions):
            self.said = {"attempts": [{"reply": "???", "error": "no action found"}] * 3}
            raise ValueError("the model gave no parsable action in 3 attempts")
        return super().act(obs, instruction)

    def step_record(self):
        return self.said


def test_what_the_model_said_is_recorded_per_step_and_when_it_gives_up(tmp_path):
    dev = FakeScreen()
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    r = run_episode(dev, Talkative(actions()[:2]), recorder=rec)
    assert r.error == "ValueError: the model gave no parsable action in 3 attempts" and len(dev.log) == 2
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])
    assert [s["policy_record"]["attempts"][0]["reply"] for s in ep["steps"]] == ["reply 0", "reply 1"]
    assert ep["end"]["info"]["last_policy_record"]["attempts"][0]["error"] == "no action found"


def test_a_sandbox_device_allows_risky_actions_and_still_records_the_decision(tmp_path):
    class Sandbox(FakeScreen):
        capabilities = FakeScreen.capabilities | {"sandbox"}
    dev = Sandbox()
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    r = run_episode(dev, GuiReplayPolicy([GuiAction("click", element=1)]), recorder=rec)
    assert r.error is None and dev.log == [("click", (100, 750), None, None)]
    step = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])["steps"][0]
    assert step["safety"]["risk"] == "send" and step["safety"]["by"] == "allow-list"


def test_replay_gets_the_devices_default_gate(tmp_path):
    class Sandbox(FakeScreen):
        capabilities = FakeScreen.capabilities | {"sandbox"}
    f = tmp_path / "send.json"
    f.write_text(json.dumps([{"type": "click", "element": 1}]))
    out = replay_gui(f, device=Sandbox())                                # a simulator: allowed, recorded
    assert out["completed"] and out["safety"][0]["by"] == "allow-list"
    out = replay_gui(f, device=FakeScreen())                             # a real screen: refused
    assert not out["completed"] and "RiskRefused" in out["error"] and out["safety"][0]["by"] == "default-no"
    out = replay_gui(f, device=FakeScreen(), gate=lambda dev: SafetyGate(allow=["send"]))
    assert out["completed"]
