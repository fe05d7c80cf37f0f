"""A 400x800 phone screen that executes nothing: it records every action it is asked to execute
(``log``), for the tests of GUI policies that must not act on a bad reply."""
from __future__ import annotations

import numpy as np

from embodia.devices import Screen
from embodia.devices.gui import GuiDevice, gui_embodiment


class Phone(GuiDevice):
    supported = frozenset({"click", "type"})

    def __init__(self):
        super().__init__()
        self.embodiment = gui_embodiment("fake-phone", "gui-phone", Screen(400, 800))
        self.log = []

    def _screen(self):
        return Screen(400, 800)

    def _grab(self):
        return np.zeros((800, 400, 3), np.uint8)

    def _execute(self, action, p, q):
        self.log.append(action)
