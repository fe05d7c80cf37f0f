"""What a device returns at each step, and the flat feature keys shared by recorder, dataset and policy."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
import numpy as np

from embodia.devices.embodiment import Screen

# One vocabulary everywhere: the same strings name features in the recorder, the LeRobot-layout
# dataset, the policy inputs and the memory.
STATE = "observation.state"
IMAGES = "observation.images"   # + "." + camera name
ACTION = "action"
TASK = "task"


def image_key(camera: str) -> str:
    return f"{IMAGES}.{camera}"


@dataclass
class Observation:
    """Images by camera name (uint8 HxWx3), the state vector (float32), GUI screen data.

    `screen` holds the screen size and pixel ratio of GUI devices (a `Screen`; a (width, height)
    given here becomes one); `ui_tree` their accessibility elements when the device gives them.
    """

    images: dict[str, np.ndarray] = field(default_factory=dict)
    state: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    timestamp: float = field(default_factory=time.monotonic)
    screen: Screen | None = None
    ui_tree: list | None = None

    def __post_init__(self):
        if self.screen is not None:
            self.screen = Screen.of(self.screen)

    def features(self) -> dict[str, np.ndarray]:
        """Flat LeRobot-style feature dict: observation.state, observation.images.<cam>."""
        out = {image_key(k): v for k, v in self.images.items()}
        out[STATE] = self.state
        return out

    def validate(self, embodiment) -> "Observation":
        """Check shapes and values against the embodiment; raise naming the offending field."""
        if self.state.shape != (embodiment.state_dim,):
            raise ValueError(f"{STATE}: expected shape ({embodiment.state_dim},) for embodiment "
                             f"{embodiment.name!r}, got {tuple(self.state.shape)}")
        if not np.all(np.isfinite(self.state)):
            bad = [embodiment.state[i].name for i in np.flatnonzero(~np.isfinite(self.state))]
            raise ValueError(f"{STATE}: non-finite values in channels {bad}")
        for cam in embodiment.cameras:
            img = self.images.get(cam.name)
            key = image_key(cam.name)
            if img is None:
                raise ValueError(f"{key}: missing (embodiment {embodiment.name!r} declares it)")
            if img.shape != (cam.height, cam.width, 3) or img.dtype != np.uint8:
                raise ValueError(f"{key}: expected uint8 ({cam.height}, {cam.width}, 3), "
                                 f"got {img.dtype} {tuple(img.shape)}")
        return self
