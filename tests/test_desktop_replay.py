"""GUI actions typed into embodia as an episode fill a real Tk form on Xvfb: `embodia replay
actions.json --device desktop:N` runs them through the loop (safety gate, recording), the form's
own state proves each action landed, on several screen sizes; the recorded episode then replays on
a fresh form with screen-divergence checks, and stops when the screen is not the recorded one."""
import json

import pytest
from typer.testing import CliRunner

from embodia.agent.cli.app import app
from embodia.agent.recording.gui_log import list_gui_episodes, read_gui_episode
from embodia.devices import Screen

pytest_plugins = ("gui_fixtures",)

SIZES = [((1280, 800), {"at": (100, 80)}), ((1024, 768), {"at": (480, 460)}),
         ((1600, 900), {"at": (1040, 600)})]
TEXT = "Grüße, 你好 ✓ $(id); `x` 100%"


def form_actions(form, screen):
    return [{"type": "click", "point": list(form.point("entry", screen))},
            {"type": "type", "text": TEXT},
            {"type": "click", "point": list(form.point("check", screen))},
            {"type": "click", "point": list(form.point("submit", screen))}]


def replay(*args):
    r = CliRunner().invoke(app, ["replay", *map(str, args)], catch_exceptions=False)
    return r.exit_code, r.output


@pytest.mark.parametrize("xvfb, tk_form", SIZES, indirect=True, ids=["1280x800", "1024x768", "1600x900"])
def test_replayed_actions_fill_the_form_on_every_screen_size(xvfb, tk_form, tmp_path):
    screen = Screen(xvfb.width, xvfb.height)
    actions = tmp_path / "fill.json"
    actions.write_text(json.dumps(form_actions(tk_form, screen), ensure_ascii=False))
    code, out = replay(actions, "--device", f"desktop:{xvfb.display.lstrip(':')}",
                       "--record", tmp_path / "rec", "--json", tmp_path / "r.json")
    assert code == 0, out
    state = tk_form.wait_state(lambda s: s["submits"] >= 1)
    assert state["entry"] == TEXT and state["checked"] is True and state["submits"] == 1
    presses = [e["widget"] for e in state["events"] if e["type"] == "press"]
    assert presses == ["entry", "check", "submit"]
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0], load_images=True)
    assert [s["action"]["type"] for s in ep["steps"]] == ["click", "type", "click", "click"]
    assert all(s["screen"]["width"] == xvfb.width and s["screenshot"].shape == (xvfb.height, xvfb.width, 3)
               for s in ep["steps"])
    assert json.loads((tmp_path / "r.json").read_text())["episodes"][0]["completed"] is True


def test_recorded_episode_replays_and_stops_on_a_different_screen(xvfb, tmp_path):
    from gui_fixtures import start_tk_form
    form = start_tk_form(xvfb, tmp_path / "a")
    screen = Screen(xvfb.width, xvfb.height)
    actions = tmp_path / "fill.json"
    actions.write_text(json.dumps(form_actions(form, screen), ensure_ascii=False))
    code, out = replay(actions, "--device", f"desktop:{xvfb.display}", "--record", tmp_path / "rec")
    assert code == 0, out
    form.wait_state(lambda s: s["submits"] >= 1)
    form.stop()
    # the same episode, from its record, on a fresh form: same screens, same result
    fresh = start_tk_form(xvfb, tmp_path / "b")
    code, out = replay(tmp_path / "rec", "--device", f"desktop:{xvfb.display}",
                       "--stop-on-divergence", "0.02", "--json", tmp_path / "r.json")
    assert code == 0, out
    state = fresh.wait_state(lambda s: s["submits"] >= 1)
    assert state["entry"] == TEXT and state["checked"] and state["submits"] == 1
    fresh.stop()
    # a screen that is not the recorded one (the form elsewhere): nothing is executed
    moved = start_tk_form(xvfb, tmp_path / "c", at=(600, 400), live=True)   # logs every event
    code, out = replay(tmp_path / "rec", "--device", f"desktop:{xvfb.display}",
                       "--stop-on-divergence", "0.02", "--json", tmp_path / "r2.json")
    assert code == 1 and "diverged before action 0" in out
    rep = json.loads((tmp_path / "r2.json").read_text())["episodes"][0]
    assert rep["steps"] == 0 and rep["diverged_at"] == 0 and rep["max_divergence"] > 0.02
    assert not any(e["type"] == "press" for e in (moved.state() or {"events": []})["events"])
    moved.stop()
