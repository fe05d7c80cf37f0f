"""An Android episode through the loop and the CLI against the fake adb server: actions reach the
phone as the expected commands, the record holds every step with its screen and UI tree, a risky
tap is refused, and killing the server mid-episode ends the episode cleanly with its record saved."""
import json

import fakeadb
from typer.testing import CliRunner

from embodia.agent.cli.app import app
from embodia.agent.loop.episode import run_episode
from embodia.agent.recording.gui_log import GuiRecorder, list_gui_episodes, read_gui_episode
from embodia.devices import GuiAction
from embodia.devices.android import open_android
from embodia.policies import GuiReplayPolicy

fake_adb, new_fake_adb = fakeadb.fake_adb, fakeadb.new_fake_adb      # fixtures


class KillsServer(GuiReplayPolicy):
    """Replays actions; before the action at ``at`` the adb server dies (cable pulled)."""

    def __init__(self, actions, server, at):
        super().__init__(actions)
        self.server, self.at = server, at

    def act(self, obs, instruction):
        if self.cursor == self.at:
            self.server.stop()
        return super().act(obs, instruction)


PLAN = [GuiAction("click", point=(500, 500)), GuiAction("type", text="a; reboot"),
        GuiAction("system_button", button="back"), GuiAction("system_button", button="home"),
        GuiAction("open_app", app="com.android.settings")]


def test_killing_the_server_mid_episode_ends_it_cleanly_with_the_record_saved(fake_adb, tmp_path):
    fake_adb.phone.ui_xml = ('<?xml version="1.0"?><hierarchy rotation="0"><node index="0" text="Search" '
                             'class="android.widget.EditText" focused="true" bounds="[0,0][1080,200]" />'
                             '</hierarchy>')
    dev = open_android("emulator-5554", host="127.0.0.1", port=fake_adb.port)
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    r = run_episode(dev, KillsServer(PLAN, fake_adb, at=2), recorder=rec, instruction="settings")
    assert r.error is not None and r.error.startswith("DeviceLost") and "emulator-5554" in r.error
    assert r.steps == 2
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0], load_images=True)
    assert [s["action"]["type"] for s in ep["steps"]] == ["click", "type"]
    assert ep["end"] is not None and ep["end"]["info"]["error"] == r.error       # closed and saved
    assert ep["steps"][0]["screenshot"].shape == (2400, 1080, 3)
    assert ep["steps"][0]["screen"] == {"width": 1080, "height": 2400, "pixel_ratio": 420 / 160}
    # what the phone executed before it went away, as its sh would run it
    cmds = [c for c in fake_adb.phone.commands if c[0] == "input"]
    assert cmds[:2] == [["input", "tap", "540", "1200"], ["input", "text", "a;%sreboot"]]
    assert fake_adb.phone.typed == "a; reboot" and not fake_adb.phone.hazards


def test_embodia_run_on_a_phone_records_and_the_gate_refuses_a_risky_tap(fake_adb, tmp_path, monkeypatch):
    phone = fake_adb.phone
    phone.ui_xml = ('<?xml version="1.0"?><hierarchy rotation="0"><node index="0" text="Send" '
                    'class="android.widget.Button" resource-id="com.chat:id/send" clickable="true" '
                    'bounds="[0,2200][540,2400]" /></hierarchy>')
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"type": "open_app", "app": "com.android.settings"},
                                {"type": "click", "point": [250, 958]},            # on "Send"
                                {"type": "system_button", "button": "home"}]))
    r = CliRunner().invoke(app, ["run", "--device", "android:emulator-5554", "--policy", f"actions:{plan}",
                                 "--record", str(tmp_path / "rec")], catch_exceptions=False)
    assert r.exit_code == 1 and "RiskRefused" in r.output and "--allow send" in r.output
    assert phone.launched == ["com.android.settings"]
    assert not any(c[:2] == ["input", "tap"] for c in phone.commands)          # Send was never tapped
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])
    assert ep["steps"][-1]["executed"] is False and ep["steps"][-1]["safety"]["risk"] == "send"
    assert ep["steps"][0]["ui_tree"][0]["text"] == "Send"
    # allowed for an unattended run: it runs, and the decision is on the step
    r = CliRunner().invoke(app, ["run", "--device", "android:emulator-5554", "--policy", f"actions:{plan}",
                                 "--record", str(tmp_path / "rec"), "--allow", "send"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert any(c[:2] == ["input", "tap"] for c in phone.commands)
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[1])
    assert ep["steps"][1]["safety"]["by"] == "allow-list" and ep["steps"][1]["executed"] is True
