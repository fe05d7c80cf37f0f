"""One recorder interface: a robot dataset and a GUI step log take the same calls
(`embodia.agent.recording.recorder.Recorder`), so a caller records without asking which it has."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyarrow")

from embodia.agent.recording.gui_log import GuiRecorder, list_gui_episodes, read_gui_episode  # noqa: E402
from embodia.agent.recording.recorder import RecordedEpisode, Recorder, open_recorder  # noqa: E402
from embodia.agent.recording.dataset import LocalDataset  # noqa: E402
from embodia.agent.recording.writer import DatasetWriter  # noqa: E402
from embodia.devices import GuiAction, Screen  # noqa: E402
from embodia.devices.embodiment import Channel, Embodiment  # noqa: E402
from embodia.devices.gui import gui_embodiment  # noqa: E402
from embodia.devices.observation import Observation  # noqa: E402

ARM = Embodiment(name="toy_arm", kind="toy arm", hz=10.0, actions=(Channel("vx", -1, 1), Channel("vy", -1, 1)),
                 state=(Channel("q0"), Channel("q1"), Channel("q2")), chunk=4, exec_horizon=2)
DESK = gui_embodiment("toy_desk", "gui-desktop", Screen(64, 48))


def robot_step(i: int):
    return Observation(state=np.full(3, i, np.float32), timestamp=float(i)), np.array([0.1 * i, -0.1], np.float32)


def screen_step(i: int):
    img = np.full((48, 64, 3), 10 * i, np.uint8)
    return Observation(images={"screen": img}, screen=Screen(64, 48)), GuiAction("click", point=(100 * i, 50))


def record(rec: Recorder, steps: list, *, error: str | None = None) -> int | None:
    """The same calls for either kind: what the loop and the MCP server do."""
    ep = rec.begin_episode(task="t", seed=3, meta={"policy": "test"})
    assert isinstance(ep, RecordedEpisode)
    for t, (obs, action) in enumerate(steps[:-1]):
        extra = {"intervention": True} if t == 1 else {"safety": {"risk": "low"}}
        assert ep.step(obs, action, {"policy_ms": 1.0}, extra) == t
    index = rec.end_episode(ep, success=True, info={"error": error}, final_obs=steps[-1][0])
    rec.close()
    return index


def test_both_recorders_take_the_same_calls(tmp_path):
    robot, gui = open_recorder(tmp_path / "arm", ARM), open_recorder(tmp_path / "desk", DESK)
    assert isinstance(robot, DatasetWriter) and isinstance(gui, GuiRecorder)
    assert isinstance(robot, Recorder) and isinstance(gui, Recorder)
    assert record(robot, [robot_step(i) for i in range(4)]) == 0
    assert record(gui, [screen_step(i) for i in range(4)]) == 0

    ep = LocalDataset(tmp_path / "arm").episode(0)
    assert ep["length"] == 3 and ep["success"] is True
    assert np.allclose(ep["final_state"], np.full(3, 3.0))           # final_obs's state
    assert list(ep["intervention"]) == [False, True, False]          # of extra, the flag only

    g = read_gui_episode(list_gui_episodes(tmp_path / "desk")[0])
    assert [s["action"]["point"][0] for s in g["steps"]] == [0, 100, 200]
    assert g["steps"][1]["intervention"] is True and g["steps"][0]["safety"] == {"risk": "low"}
    assert g["end"]["final_image"]["file"].startswith("screens/final")


def test_a_gui_episode_ended_by_an_error_keeps_no_final_screen(tmp_path):
    """A lost device's last screen is not a final one: the loop never saved it, nor does the call."""
    gui = open_recorder(tmp_path / "desk", DESK)
    record(gui, [screen_step(i) for i in range(3)], error="DeviceLost: gone")
    g = read_gui_episode(list_gui_episodes(tmp_path / "desk")[0])
    assert "final_image" not in g["end"] and g["end"]["info"]["error"] == "DeviceLost: gone"
