"""A recording killed with SIGKILL: a reader sees its complete episodes, and the one that ended but
was not committed, without a writer reopening the folder (issue 22); `replay --episode all` then
replays them."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from typer.testing import CliRunner

from embodia.agent.cli.app import app
from embodia.agent.recording.dataset import LocalDataset

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.recording.writer import DatasetWriter
    from embodia.devices import open_device
    root, mode = sys.argv[1], sys.argv[2]
    with open_device("sim:twogap-push") as dev:
        w = DatasetWriter(root, dev.embodiment)
        pol = dev.expert()
        for s in range(2):                         # two committed episodes
            run_episode(dev, pol, seed=s, recorder=w, max_steps=30, episode_meta={"device": "sim:twogap-push"})
        ep = w.begin_episode(task="push", seed=7, meta={"device": "sim:twogap-push"})
        obs = dev.reset(7)
        for _ in range(12):
            a = pol.act(obs, "push")[0] if hasattr(pol, "act") else None
            ep.add_step(obs, a)
            dev.act(a)
            obs = dev.observe()
        if mode == "ended":                        # the end record is on disk, the commit never ran
            ep._finish({"type": "end", "success": True, "final_state": obs.state.tolist(), "info": {},
                        "end_time": 0.0})
        os.kill(os.getpid(), signal.SIGKILL)
""")


def record_and_kill(root, mode):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MUJOCO_GL="egl")
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(root), mode], env=env, capture_output=True, text=True)
    assert p.returncode == -9, p.stderr[-2000:]


def test_a_killed_recording_shows_its_episodes_without_a_writer(tmp_path):
    for mode, success, interrupted in (("running", False, True), ("ended", True, False)):
        root = tmp_path / mode
        record_and_kill(root, mode)
        ds = LocalDataset(root)
        assert ds.committed_episodes == 2 and ds.num_episodes == 3, mode
        ep = ds.episode(2)
        assert ep["length"] == 12 and ep["state"].shape == (12, ds.embodiment.state_dim)
        assert ep["success"] is success and ep["interrupted"] is interrupted and ep["seed"] == 7
        assert ds.frames(2, "top").shape == (12, 96, 96, 3)
        assert ds.episodes[2]["episode_index"] == 2
    r = CliRunner().invoke(app, ["replay", str(tmp_path / "ended"), "--episode", "all"])
    assert r.output.count("episode ") == 3 and "Traceback" not in r.output, r.output
