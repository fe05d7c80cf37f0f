import os

import pytest

# Offline, CPU, few threads, offscreen GL: every test runs as CI runs it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("OMP_NUM_THREADS", "2")

# Property tests draw the same examples on every run (CI must not pass or fail by the draw): the
# default profile is derandomized with no example database. HYPOTHESIS_PROFILE=explore draws new
# random examples on every run (500 where a test does not set its own count) to hunt for bugs.
try:
    from hypothesis import settings
except ImportError:       # the test extra is not installed: the property tests skip themselves
    pass
else:
    settings.register_profile("embodia", derandomize=True, database=None)
    settings.register_profile("explore", derandomize=False, max_examples=500)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "embodia"))


@pytest.fixture
def one_thread():
    """Small matmuls on a shared 2-core machine: one torch thread is several times faster than two."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
