"""The recorder a run writes to: a GUI step log for screens, a LeRobotDataset v3 for everything else,
both behind one interface (`Recorder`), so the loop and the MCP server record without asking which.

Both take the same calls::

    ep = recorder.begin_episode(task="open the menu", seed=0, meta={"policy": "..."})
    ep.step(obs, executed_action, {"policy_ms": 3.1, "device_ms": 8.0}, extra)   # once per step
    index = recorder.end_episode(ep, success=True, info={...}, final_obs=obs)
    recorder.close()

``extra`` holds the step's notes: ``{"intervention": True}`` for a person's step, and on a GUI
log anything else worth keeping (the safety decision, ``"executed": False`` for a refused action);
a robot dataset's frame has fixed LeRobot columns, so it keeps only the intervention flag.
``final_obs`` is the last observation: a GUI log saves its screen (not after an episode whose
``info`` names an error: a lost device's last screen is not a final one), a dataset its state.
``success`` None (nobody could verify the episode) stays None in a GUI log; a dataset stores a bool,
so there it is stored as a failure (``False``), as the loop always recorded robot episodes.
The older calls (``add_step`` with each recorder's own extras, ``end_episode(final_state=...)``)
still work.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from embodia.agent.recording.gui_log import GuiRecorder
from embodia.agent.recording.writer import DatasetWriter
from embodia.devices import Embodiment

__all__ = ["Recorder", "RecordedEpisode", "open_recorder"]


@runtime_checkable
class RecordedEpisode(Protocol):
    """One episode being recorded (made by ``Recorder.begin_episode``)."""

    @property
    def num_steps(self) -> int: ...

    def step(self, obs, action, timing: dict | None = None, extra: dict | None = None) -> int:
        """Record step t: the observation before the action, the action executed; returns t."""


@runtime_checkable
class Recorder(Protocol):
    """What the loop and the MCP server record through (`DatasetWriter`, `GuiRecorder`)."""

    def begin_episode(self, task: str = "", seed: int | None = None,
                      meta: dict | None = None) -> RecordedEpisode: ...

    def end_episode(self, ep, success: bool | None = None, final_state=None, info: dict | None = None,
                    final_obs=None) -> int | None:
        """Close ``ep``; its index in the recording (None when nothing was kept)."""

    def close(self) -> None: ...


def open_recorder(out: str | Path, embodiment: Embodiment) -> Recorder:
    """GUI bodies get screenshots at native size + JSON actions (no video); others the LeRobot layout.
    Raises RecordingError (a ValueError) or OSError when ``out`` cannot take the recording."""
    if embodiment.is_gui:
        return GuiRecorder(out, embodiment)
    return DatasetWriter(out, embodiment)
