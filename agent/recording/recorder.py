"""The recorder a run writes to: a GUI step log for screens, a LeRobotDataset v3 for everything else."""
from __future__ import annotations

from pathlib import Path

from embodia.agent.recording.gui_log import GuiRecorder
from embodia.agent.recording.writer import DatasetWriter
from embodia.devices import Embodiment


def open_recorder(out: str | Path, embodiment: Embodiment):
    """GUI bodies get screenshots at native size + JSON actions (no video); others the LeRobot layout.
    Raises RecordingError (a ValueError) or OSError when ``out`` cannot take the recording."""
    if embodiment.is_gui:
        return GuiRecorder(out, embodiment)
    return DatasetWriter(out, embodiment)
