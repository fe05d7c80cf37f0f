import os

# Offline, CPU, few threads, offscreen GL: every test runs as CI runs it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("OMP_NUM_THREADS", "2")
