"""One recorder interface: a robot dataset and a GUI step log take the same calls
(`embodia.agent.recording.recorder.Recorder`), so a caller records without asking which it has."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyarrow")

from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.agent.recording.dataset import LocalDataset  # noqa: E402
from embodia.agent.recording.gui_log import GuiRecorder, list_gui_episodes, read_gui_episode  # noqa: E402
from embodia.agent.recording.recorder import RecordedEpisode, Recorder, open_recorder  # noqa: E402
from embodia.agent.recording.writer import DatasetWriter  # noqa: E402
from embodia.devices import Device, GuiAction, Screen  # noqa: E402
from embodia.devices.embodiment import Channel, Embodiment  # noqa: E402
from embodia.devices.gui import gui_embodiment  # noqa: E402
from embodia.devices.observation import Observation  # noqa: E402
from embodia.policies.base import Policy  # noqa: E402

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


class UncheckedArm(Device):
    """A robot body with no success check (no "success" capability): nobody can verify its episodes."""

    embodiment = ARM
    max_steps = 3

    def reset(self, seed=None):
        self.t = 0
        return self.observe()

    def observe(self):
        return Observation(state=np.full(3, self.t, np.float32), timestamp=float(self.t))

    def act(self, action):
        self.t += 1
        return np.asarray(action, np.float32)


class Still(Policy):
    def act(self, obs, instruction):
        return np.zeros((1, 2), np.float32)


def test_an_unverified_robot_episode_is_stored_as_a_failure_and_a_gui_one_as_unknown(tmp_path):
    """A dataset's success is a bool: the loop's episode nobody could verify is stored as False there
    (as the loop always stored robot episodes), while a GUI step log keeps the None."""
    robot = open_recorder(tmp_path / "arm", ARM)
    r = run_episode(UncheckedArm(), Still(), seed=0, recorder=robot)
    robot.close()
    assert r.success is None and r.steps == 3 and r.episode_index == 0
    ep = LocalDataset(tmp_path / "arm").episode(0)
    assert ep["success"] is False and np.allclose(ep["final_state"], np.full(3, 3.0))

    direct = open_recorder(tmp_path / "arm2", ARM)          # the call itself, outside the loop
    assert record_unknown(direct, [robot_step(i) for i in range(3)]) == 0
    assert LocalDataset(tmp_path / "arm2").episode(0)["success"] is False
    gui = open_recorder(tmp_path / "desk", DESK)
    record_unknown(gui, [screen_step(i) for i in range(3)])
    assert read_gui_episode(list_gui_episodes(tmp_path / "desk")[0])["end"]["success"] is None


def record_unknown(rec: Recorder, steps: list) -> int | None:
    ep = rec.begin_episode(task="t")
    for obs, action in steps[:-1]:
        ep.step(obs, action)
    index = rec.end_episode(ep, success=None, info={}, final_obs=steps[-1][0])
    rec.close()
    return index
