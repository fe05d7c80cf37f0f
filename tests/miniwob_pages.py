"""What the MiniWoB++ tests need: Chromium and the miniwob package's task pages. A test module
without them is skipped whole, with the reason."""
import pytest

from embodia.devices.cdp import find_chromium

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (apt-get install chromium)")


def miniwob_or_skip():
    """`embodia.sim.miniwob`, or the calling test module skipped (call it at import time)."""
    miniwob = pytest.importorskip("embodia.sim.miniwob")
    try:
        miniwob.html_root()
    except ImportError as e:
        pytest.skip(str(e), allow_module_level=True)
    return miniwob
