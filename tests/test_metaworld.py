"""`sim:metaworld/<task>`: embodiment, seeding, determinism, expert, action checks, shifts, images."""
import json
import os
import subprocess
import sys

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import pytest

pytest.importorskip("metaworld")

from embodia.devices import ActionError, open_device  # noqa: E402
from embodia.devices.base import Device  # noqa: E402
from embodia.sim.metaworld import MetaWorldDevice, list_tasks, open_metaworld  # noqa: E402


def run_expert(dev, seed):
    """The closed loop from the brief; returns (success, steps)."""
    pol = dev.expert()
    obs = dev.reset(seed)
    pol.reset(seed)
    t = 0
    for t in range(dev.max_steps):
        a = pol.act(obs, dev.instruction)
        assert a.shape == (1, 4) and a.dtype == np.float32
        dev.act(a[0])
        obs = dev.observe()
        if dev.success():
            break
    return dev.success(), t + 1


@pytest.fixture(scope="module")
def pick_place():
    d = open_metaworld("pick-place-v3", render="0")
    yield d
    d.close()


def test_embodiment_and_prompt(pick_place):
    d = pick_place
    e = d.embodiment
    assert isinstance(d, Device)
    assert [c.name for c in e.actions] == ["dx", "dy", "dz", "gripper"]
    assert all((c.low, c.high) == (-1.0, 1.0) for c in e.actions)
    assert e.action_kind == "delta" and e.state_dim == 39
    names = [c.name for c in e.state]
    assert names[:4] == ["hand_x", "hand_y", "hand_z", "gripper_open"]
    assert names[4:7] == ["obj1_x", "obj1_y", "obj1_z"] and names[-3:] == ["goal_x", "goal_y", "goal_z"]
    assert names[18] == "prev_hand_x"
    assert e.hz == pytest.approx(80.0) and (e.chunk, e.exec_horizon) == (16, 8)
    p = e.prompt()
    assert "action=delta[dx,dy,dz,gripper] in [-1,1]" in p
    assert "goal_{x,y,z}" in p and "+1 closes" in p
    assert {"state", "success", "expert", "deterministic"} <= d.capabilities
    assert "render" not in d.capabilities and e.cameras == ()
    assert "puck" in d.instruction and d.max_steps >= 100
    assert json.loads(json.dumps(e.to_dict()))["name"] == "sawyer"


def test_reset_observation_shapes(pick_place):
    obs = pick_place.reset(seed=0)
    obs.validate(pick_place.embodiment)
    assert obs.state.dtype == np.float32 and obs.state.shape == (39,)
    assert np.allclose(obs.state[:18], obs.state[18:36])     # first frame: prev = current
    assert not pick_place.success() and not pick_place.done()
    # observe() does not advance Meta-World's frame stack
    assert np.array_equal(pick_place.observe().state, obs.state)


def test_seed_chooses_the_task_variation(pick_place):
    def start(seed):
        s = pick_place.reset(seed).state
        return np.concatenate([s[4:7], s[36:39]])     # object and goal position
    a0, b, a1 = start(0), start(1), start(0)
    assert np.array_equal(a0, a1)
    assert np.linalg.norm(a0 - b) > 1e-3
    starts = np.array([start(s) for s in range(8)])
    assert len(np.unique(starts.round(5), axis=0)) == 8


def test_repeat_shows_k_set_ups_again():
    """repeat=3: seeds 4 and 1 start from the same object and goal, seed 2 does not; the episode
    keeps its own seed (the policy's noise) and bad values are refused."""
    with open_device("sim:metaworld/pick-place-v3?render=0&repeat=3") as dev:
        start = {s: dev.reset(s).state.copy() for s in (1, 2, 4)}
        assert dev.seed == 4 and dev.repeat == 3
    assert np.array_equal(start[4], start[1]) and not np.array_equal(start[2], start[1])
    with pytest.raises(ValueError, match="repeat"):
        MetaWorldDevice("pick-place-v3", render=False, repeat=-1)


def test_same_seed_same_actions_same_state(pick_place):
    acts = np.random.default_rng(0).uniform(-1, 1, size=(60, 4))

    def final(dev, seed):
        dev.reset(seed)
        for a in acts:
            dev.act(a)
        return dev.observe().state.copy(), dev.data.qpos.copy()

    s1, q1 = final(pick_place, 3)
    final(pick_place, 4)                     # another episode in between changes nothing
    s2, q2 = final(pick_place, 3)
    with open_metaworld("pick-place-v3", render="0") as other:
        s3, q3 = final(other, 3)
    assert np.array_equal(s1, s2) and np.array_equal(q1, q2)
    assert np.array_equal(s1, s3) and np.array_equal(q1, q3)


def test_expert_solves_pick_place(pick_place):
    results = [run_expert(pick_place, s) for s in range(5)]
    assert sum(ok for ok, _ in results) >= 4, results
    assert all(n < pick_place.max_steps for ok, n in results if ok)
    info = pick_place.info()
    json.dumps(info)
    assert {"near_object", "grasp_success", "success_step"} <= set(info)


@pytest.mark.parametrize("task", ["reach-v3", "push-v3"])
def test_expert_solves_reach_and_push(task):
    with open_metaworld(task, render="0") as d:
        assert sum(run_expert(d, s)[0] for s in range(3)) >= 2


def test_nan_refused_and_out_of_range_clipped(pick_place):
    pick_place.reset(0)
    with pytest.raises(ActionError, match="non-finite"):
        pick_place.act([0.0, np.nan, 0.0, 0.0])
    with pytest.raises(ActionError, match="shape"):
        pick_place.act([0.0, 0.0, 0.0])
    executed = pick_place.act([5.0, -3.0, 0.5, 2.0])
    assert executed.tolist() == [1.0, -1.0, 0.5, 1.0]
    assert executed.dtype == np.float32


def test_act_before_reset_is_an_error():
    with open_metaworld("reach-v3", render="0") as d:
        with pytest.raises(RuntimeError, match="reset"):
            d.act([0, 0, 0, 0])


def test_unknown_task_and_shift_errors():
    with pytest.raises(ValueError, match="pick-place-v3"):      # lists the valid tasks
        open_metaworld("pick-plaice-v3")
    with pytest.raises(ValueError, match="heavy"):              # lists the known shifts
        open_metaworld("pick-place-v3", shift="upside-down")
    with pytest.raises(ValueError, match="camera 'nope'"):
        open_metaworld("pick-place-v3", camera="nope")


def test_list_tasks_and_registry():
    tasks = list_tasks()
    assert {"pick-place-v3", "reach-v3", "push-v3"} <= set(tasks) and len(tasks) == 50
    from embodia.sim import list_targets
    assert "sim:metaworld/pick-place-v3" in list_targets()
    with open_device("sim:metaworld/reach-v3", render="0") as d:
        assert isinstance(d, MetaWorldDevice) and d.task == "reach-v3"


def test_shifts_change_the_scene_not_the_interface():
    assert {"heavy", "slippery", "camera", "dim"} <= set(MetaWorldDevice.SHIFTS)
    with open_metaworld("pick-place-v3", render="0") as nominal, \
            open_metaworld("pick-place-v3", shift="heavy", render="0") as heavy:
        b = heavy.model.body("obj").id
        assert heavy.model.body_mass[b] == pytest.approx(2 * nominal.model.body_mass[b])
        assert heavy.embodiment == nominal.embodiment
        # same variation for the same seed: the shift is in the physics, not in the seeding
        h, n = heavy.reset(2).state, nominal.reset(2).state
        assert np.allclose(h[[4, 5, 36, 37, 38]], n[[4, 5, 36, 37, 38]], atol=1e-4)
    with open_metaworld("reach-v3", shift="slippery", render="0") as d:
        assert run_expert(d, 0)[0]          # reach has nothing to grasp: unaffected


def test_rendered_image_shows_the_scene():
    with open_metaworld("pick-place-v3", size="64x48") as d:
        assert "render" in d.capabilities
        assert [(c.name, c.width, c.height) for c in d.embodiment.cameras] == [("corner", 64, 48)]
        obs = d.reset(0)
        obs.validate(d.embodiment)
        img = obs.images["corner"]
        assert img.shape == (48, 64, 3) and img.dtype == np.uint8
        assert img.std() > 10                               # not a blank frame
        red = (img[..., 0] > 100) & (img[..., 1] < 60) & (img[..., 2] < 60)
        assert red.mean() > 0.03                            # the red Sawyer arm is in view
        # upright (Meta-World's corner camera looks upside down): its up axis points up, so the
        # plain grey wall is at the top and the busy floor and table legs at the bottom
        cam = d.model.camera("corner").id
        assert d.data.cam_xmat[cam].reshape(3, 3)[2, 1] > 0
        assert img[:6].std() < img[-6:].std()
        for _ in range(15):
            d.act([1.0, 0.0, 1.0, 0.0])
        assert not np.array_equal(d.observe().images["corner"], img)   # the arm moved


def test_imports_without_metaworld():
    """The module imports without metaworld; using it says how to install it."""
    code = (
        "import sys; sys.modules['metaworld'] = None\n"
        "import embodia.sim.metaworld as m\n"
        "try:\n    m.open_metaworld('reach-v3')\nexcept ImportError as e:\n    print('ERR', e)\n"
        "from embodia.sim import list_targets\n"
        "print([t for t in list_targets() if 'metaworld' in t])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    assert "ERR" in out.stdout and "pip install 'embodia[metaworld]'" in out.stdout
    assert "unavailable" in out.stdout


def test_lerobot_protocol_gives_the_policy_no_object_or_goal():
    """obs=lerobot: the policy's state is LeRobot's 4-number agent_pos, the only camera is corner2;
    set-ups that move the object and the goal change the image and nothing else it receives."""
    with open_metaworld("pick-place-v3", obs="lerobot", size="64x64") as d:
        e = d.embodiment
        assert [c.name for c in e.state] == ["hand_x", "hand_y", "hand_z", "gripper_open"]
        assert [(c.name, c.width, c.height) for c in e.cameras] == [("corner2", 64, 64)]
        a, full_a = d.reset(1), d.full_state()
        b, full_b = d.reset(2), d.full_state()
        a.validate(e)
        assert a.state.shape == (4,) and set(a.images) == {"corner2"}
        # the object (4:7) and the goal (36:39) moved between the set-ups; the hand did not
        assert np.linalg.norm(full_a[36:39] - full_b[36:39]) > 0.01
        assert np.linalg.norm(full_a[4:7] - full_b[4:7]) > 0.01
        assert np.array_equal(a.state, b.state) and np.array_equal(a.state, full_a[:4])
        assert not np.array_equal(a.images["corner2"], b.images["corner2"])
        # the state follows the hand as it moves
        d.act([1.0, 0.0, 0.0, 0.0])
        assert d.observe().state[0] > b.state[0]


def test_lerobot_camera_is_placed_and_turned_as_lerobot_does():
    """Our corner2 image against Meta-World's own renderer with LeRobot's camera position and its
    flip of both image axes: the same view (only lighting details differ), not the mirrored one."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    ref_env = ALL_V3_ENVIRONMENTS["pick-place-v3"](render_mode="rgb_array", camera_name="corner2",
                                                   width=96, height=96)
    try:
        ref_env._partially_observable, ref_env._set_task_called = False, True
        ref_env._freeze_rand_vec, ref_env.seeded_rand_vec = False, True
        ref_env.model.cam_pos[ref_env.model.camera("corner2").id] = [0.75, 0.075, 0.7]
        ref_env.seed(3)
        ref_env.reset()
        raw = ref_env.render().astype(int)
    finally:
        ref_env.close()
    with open_metaworld("pick-place-v3", obs="lerobot", size="96x96") as d:
        ours = d.reset(3).images["corner2"].astype(int)
    flipped = np.abs(np.flip(raw, (0, 1)) - ours).mean()
    assert flipped < 15 and flipped < np.abs(raw - ours).mean() / 3


def test_lerobot_protocol_expert_acts_from_the_full_state():
    with open_metaworld("reach-v3", obs="lerobot", render="0") as d:
        assert d.reset(0).state.shape == (4,)
        assert run_expert(d, 0)[0]


def test_lerobot_protocol_refuses_other_cameras_and_unknown_protocols():
    with pytest.raises(ValueError, match="corner2"):
        open_metaworld("reach-v3", obs="lerobot", camera="corner")
    with pytest.raises(ValueError, match="observation protocol.*lerobot"):
        open_metaworld("reach-v3", obs="pixels")
    with open_device("sim:metaworld/reach-v3?obs=lerobot&render=0") as d:
        assert d.obs_protocol == "lerobot" and len(d.embodiment.state) == 4


def _drive(dev, seed, actions):
    dev.reset(seed)
    for a in actions:
        dev.act(a)
    return dev.observe().state


ACTIONS = [np.array([0.8, -0.5, 0.3, 1.0], np.float32), np.array([-0.2, 0.9, -0.6, -1.0], np.float32),
           np.array([0.5, 0.5, 0.5, 0.5], np.float32), np.array([-1.0, 0.0, 0.2, 1.0], np.float32)]


def test_delay_shift_gives_the_arm_each_action_one_step_late():
    with open_metaworld("push-v3", render="0") as nominal, \
            open_metaworld("push-v3", shift="delay", render="0") as late, \
            open_metaworld("push-v3", shift="delay", severity="2", render="0") as later:
        zero = np.zeros(4, np.float32)
        assert np.array_equal(_drive(late, 4, ACTIONS), _drive(nominal, 4, [zero] + ACTIONS[:-1]))
        assert np.array_equal(_drive(later, 4, ACTIONS), _drive(nominal, 4, [zero, zero] + ACTIONS[:-2]))
        assert not np.array_equal(_drive(late, 4, ACTIONS), _drive(nominal, 4, ACTIONS))
        assert late.info()["shift_severity"] == 1.0


def test_gain_shift_is_a_miscalibrated_arm():
    from embodia.sim.metaworld_shifts import GAIN_DRIFT, GAIN_LOSS
    with open_metaworld("push-v3", render="0") as nominal, \
            open_metaworld("push-v3", shift="gain", severity="0.5", render="0") as off:
        want = []
        for a in ACTIONS:
            b = a.copy()
            b[:3] = b[:3] * (1 - GAIN_LOSS * 0.5) + 0.5 * GAIN_DRIFT
            want.append(np.clip(b, -1, 1))
        assert np.array_equal(_drive(off, 1, ACTIONS), _drive(nominal, 1, want))


def test_pose_shift_starts_the_arm_elsewhere_and_severity_zero_is_no_shift():
    from embodia.sim.metaworld_shifts import POSE_OFFSET
    with open_metaworld("reach-v3", render="0") as nominal, \
            open_metaworld("reach-v3", shift="pose", render="0") as moved, \
            open_metaworld("reach-v3", shift="pose", severity="0", render="0") as zero:
        n, m = nominal.reset(0).state, moved.reset(0).state
        assert np.allclose(m[:3] - n[:3], POSE_OFFSET, atol=0.02)
        assert np.array_equal(zero.reset(0).state, n)
        assert np.allclose(m[4:7], n[4:7]) and np.allclose(m[36:], n[36:])   # same object and goal
        assert run_expert(moved, 0)[0]


def test_drift_grows_a_shift_over_the_stream():
    with open_metaworld("pick-place-v3", shift="heavy", severity="2", drift="4", render="0") as d:
        b = d.model.body("obj").id
        mass0 = d._scene.nominal["body_mass"][b]
        seen = []
        for ep in range(6):
            d.reset(ep)
            seen.append((d.info()["shift_severity"], d.model.body_mass[b] / mass0))
        assert [s for s, _ in seen] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.0]
        assert np.allclose([m for _, m in seen], [1.0, 1.5, 2.0, 2.5, 3.0, 3.0])   # never compounds


def test_jitter_brings_set_ups_back_similar_but_never_identical():
    pos = {}
    with open_metaworld("pick-place-v3", render="0", repeat="3", jitter="0.02") as d:
        for seed in range(9):
            s = d.reset(seed).state
            pos[seed] = np.concatenate([s[4:7], s[36:39]])
        again = np.concatenate([d.reset(4).state[4:7], d.reset(4).state[36:39]])
    with open_metaworld("pick-place-v3", render="0", repeat="3", cell="1") as exact:
        other_cell = exact.reset(0).state[4:7]
    assert np.array_equal(again, pos[4])                                    # deterministic per seed
    for seed in range(3, 9):
        same_base = pos[seed] - pos[seed % 3]
        assert 0 < np.abs(same_base).max() <= 0.04 + 1e-6                   # never identical, close
    assert np.abs(pos[0] - pos[1]).max() > 0.05                              # other set-ups: far
    assert np.abs(other_cell - pos[0][:3]).max() > 0.02                      # another cell, other set-ups


def test_shift_arguments_are_checked():
    with pytest.raises(ValueError, match="severity"):
        open_metaworld("reach-v3", shift="gain", severity="-1", render="0")
    with pytest.raises(ValueError, match="jitter"):
        open_metaworld("reach-v3", jitter="0.5", render="0")
    with pytest.raises(ValueError, match="free objects"):
        open_metaworld("door-open-v3", shift="heavy", render="0")
    with pytest.raises(ValueError, match="unknown metaworld shift.*delay"):
        open_metaworld("reach-v3", shift="late", render="0")


def test_cell_span_makes_each_block_of_seeds_its_own_cell_and_drift_follows_the_block():
    with open_metaworld("pick-place-v3", render="0", repeat="2", cell_span="4", shift="gain", drift="2") as d:
        obj = {}
        for seed in (0, 1, 2, 3, 4, 5, 6):
            obj[seed] = d.reset(seed).state[4:7].copy()
            if seed in (0, 4):
                assert d.info()["shift_severity"] == 0.0          # the first episode of a cell is clean
        assert d.info()["shift_severity"] == 1.0
        assert np.array_equal(obj[0], obj[2]) and np.array_equal(obj[1], obj[3])   # cell 0: seeds 0, 1
        assert not np.array_equal(obj[0], obj[4]) and np.array_equal(obj[4], obj[6])  # cell 1: seeds 2, 3
    with open_metaworld("pick-place-v3", render="0", repeat="2", cell="1") as d:
        assert np.array_equal(d.reset(0).state[4:7], obj[4])


def test_rendering_only_the_frames_decisions_read_changes_nothing_the_policy_does():
    """Between two decisions nothing reads the camera, so the device skips those frames ("frames_on_demand"):
    embodia-mt50 under the camera shift (it reads the corner image) does exactly what it does when every
    frame is rendered (an on_step hook reads them all), with one render per decision instead of per step."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.factory import make_policy
    runs = []
    for every_frame in (False, True):
        dev = open_device("sim:metaworld/drawer-close-v3?max_steps=40&shift=camera&severity=1")
        assert "frames_on_demand" in dev.capabilities
        renders, render = [], dev.render
        dev.render = lambda: renders.append(1) or render()
        r = run_episode(dev, make_policy("embodia-mt50", dev, threads=1), seed=3,
                        on_step=(lambda step: False) if every_frame else None)
        runs.append((r.steps, r.success, dev.full_state().round(6).tolist(), len(renders)))
        dev.close()
    (steps, ok, state, lean), (steps1, ok1, state1, every) = runs
    assert (steps, ok, state) == (steps1, ok1, state1)
    assert every == steps + 1 and lean == -(-steps // 8)     # the reset's, then one per later decision
