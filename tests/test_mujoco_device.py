"""The generic `mujoco:` device on MJCF files this project did not write (shipped with gymnasium)."""
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from embodia.devices import ActionError, open_device

ASSETS = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets"


def test_loads_a_third_party_mjcf_and_derives_its_embodiment():
    with open_device(f"mujoco:{ASSETS / 'half_cheetah.xml'}", size="32x24") as dev:
        emb = dev.embodiment
        # half_cheetah.xml: 6 motors named after their joints, ctrlrange -1 1, no sensors.
        assert [c.name for c in emb.actions] == ["bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"]
        assert all((c.low, c.high) == (-1.0, 1.0) for c in emb.actions)
        nq, nv = dev.model.nq, dev.model.nv
        assert emb.state_dim == nq + nv and emb.state[0].name == "qpos[0]"
        assert "action=ctrl[bthigh,bshin,bfoot,fthigh,fshin,ffoot] in [-1,1]" in emb.prompt()
        # hz comes from substeps of the model timestep
        assert emb.hz == pytest.approx(1.0 / (dev.model.opt.timestep * dev.substeps))
        obs = dev.reset(seed=0)
        assert obs.state.shape == (nq + nv,) and obs.state.dtype == np.float32
        cam = emb.cameras[0]
        assert obs.images[cam.name].shape == (24, 32, 3) and obs.images[cam.name].dtype == np.uint8
        assert obs.images[cam.name].std() > 0            # a real picture, not a blank buffer


def test_nan_action_is_refused_with_a_clear_error_and_state_untouched():
    with open_device(f"mujoco:{ASSETS / 'ant.xml'}", render="0") as dev:
        before = dev.reset(seed=0).state.copy()
        with pytest.raises(ActionError, match=r"non-finite.*actuator0|non-finite"):
            dev.act([np.nan] + [0.0] * 7)
        assert np.array_equal(dev.observe().state, before)


def test_out_of_range_actions_are_clipped_to_ctrlrange():
    with open_device(f"mujoco:{ASSETS / 'ant.xml'}", render="0") as dev:
        dev.reset(0)
        executed = dev.act([5.0, -5.0] + [0.0] * 6)
        assert executed[:2].tolist() == [1.0, -1.0]
        assert dev.data.ctrl[:2].tolist() == [1.0, -1.0]


def test_declared_control_rate_sets_substeps():
    with open_device(f"mujoco:{ASSETS / 'half_cheetah.xml'}", hz="25", render="0") as dev:
        dt = dev.model.opt.timestep
        assert dev.substeps == round(1 / (25 * dt))
        dev.reset(0)
        t0 = dev.data.time
        dev.act(np.zeros(6))
        assert dev.data.time - t0 == pytest.approx(dev.substeps * dt)


def test_same_seed_and_actions_give_identical_states():
    def rollout():
        with open_device(f"mujoco:{ASSETS / 'ant.xml'}", render="0") as dev:
            dev.reset(3)
            rng = np.random.default_rng(0)
            for _ in range(20):
                dev.act(rng.uniform(-1, 1, 8))
            return dev.observe().state
    assert np.array_equal(rollout(), rollout())


def test_sensors_become_state_channels_and_missing_files_are_clear(tmp_path):
    xml = tmp_path / "arm.xml"
    xml.write_text("""<mujoco><option timestep="0.002"/>
      <worldbody><camera name="top" pos="0 0 2"/>
        <body name="link"><joint name="hinge" type="hinge" damping="0.1"/>
          <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/><site name="tip" pos="0.3 0 0"/></body>
      </worldbody>
      <actuator><motor name="torque" joint="hinge" ctrlrange="-2 2" ctrllimited="true"/></actuator>
      <sensor><jointpos name="angle" joint="hinge"/><framepos name="tip" objtype="site" objname="tip"/></sensor>
    </mujoco>""")
    with open_device(f"mujoco:{xml}?hz=50&size=16x16") as dev:
        assert [c.name for c in dev.embodiment.state] == ["angle", "tip[0]", "tip[1]", "tip[2]"]
        assert dev.embodiment.actions[0].high == 2.0 and dev.substeps == 10
        assert [c.name for c in dev.embodiment.cameras] == ["top"]
    with pytest.raises(FileNotFoundError, match="MJCF file not found"):
        open_device(f"mujoco:{tmp_path / 'nope.xml'}")
    with pytest.raises(ValueError, match="camera 'side' not in the model"):
        open_device(f"mujoco:{xml}", cameras="side")
    with pytest.raises(ValueError, match="no named shifts"):
        open_device(f"mujoco:{xml}", shift="heavy")


UNSTABLE = """
import mujoco, numpy as np
import embodia.devices.mujoco
m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><body><joint/><geom size=".1"/></body></worldbody></mujoco>')
d = mujoco.MjData(m)
d.qvel[:] = np.inf
mujoco.mj_step(m, d)
print('{"json": "line"}')
"""


def test_mujoco_warnings_go_to_the_log_not_stdout_or_a_file(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", UNSTABLE], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == '{"json": "line"}\n'            # a benchmark's JSON line is all there is on stdout
    assert "MuJoCo: Nan, Inf or huge value in QVEL" in out.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
