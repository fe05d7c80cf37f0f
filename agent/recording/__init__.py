"""Recording and datasets: what an episode leaves on disk, and reading it back.

Owns: the crash-safe step log every run writes first, the LeRobotDataset v3 writer (parquet + mp4 +
meta) and reader, and the GUI step log (screenshots + JSON actions).
May import: ``embodia.devices`` only (the vocabulary); nothing else in ``embodia.agent``.
"""
from embodia.agent.recording.dataset import LocalDataset
from embodia.agent.recording.dataset_checks import DatasetError
from embodia.agent.recording.gui_log import (
           GuiRecorder,
           is_gui_recording,
           read_gui_episode,
)
from embodia.agent.recording.steplog import RecordingError
from embodia.agent.recording.writer import DatasetWriter

__all__ = ["DatasetWriter", "RecordingError", "LocalDataset", "DatasetError", "GuiRecorder", "is_gui_recording",
           "read_gui_episode"]
