import math

import numpy as np
import pytest

from embodia.devices import (
    ActionError,
    Camera,
    Channel,
    Embodiment,
    GuiAction,
    Observation,
    check_action,
    check_chunk,
    open_device,
    parse_uri,
)
from embodia.devices.registry import UnknownDevice


def pusher(**kw):
    return Embodiment(name="planar_pusher", kind="planar pusher",
                      actions=(Channel("vx", -1, 1, "m/s"), Channel("vy", -1, 1, "m/s")),
                      state=(Channel("x"), Channel("y"), Channel("z")),
                      cameras=(Camera("top", 8, 6),), **kw)


def test_prompt_names_channels_limits_rate_and_cameras():
    p = pusher(hz=10, chunk=16).prompt()
    assert p.startswith("<embodiment> ") and p.endswith(" </embodiment>")
    for part in ("name=planar_pusher", "action=velocity[vx,vy] in [-1,1] m/s", "hz=10", "chunk=16",
                 "state=x,y,z", "cameras=top:8x6"):
        assert part in p


def test_prompt_differs_between_bodies():
    other = Embodiment(name="arm", kind="arm", actions=(Channel("a", -2, 2), Channel("b", -0.5, 0.5)))
    assert other.prompt() != pusher().prompt()
    assert "[-2,2]" in other.prompt() and "[-0.5,0.5]" in other.prompt()


def test_embodiment_round_trips_through_dict_with_unbounded_channels():
    e = Embodiment(name="m", kind="mujoco", actions=(Channel("free"), Channel("lim", -1, 2, "N")))
    d = e.to_dict()
    assert d["actions"][0]["low"] is None          # JSON-safe
    assert Embodiment.from_dict(d) == e


@pytest.mark.parametrize("kw", [dict(hz=0), dict(chunk=4, exec_horizon=8), dict(exec_horizon=0)])
def test_embodiment_rejects_inconsistent_fields(kw):
    with pytest.raises(ValueError):
        pusher(**kw)


def test_check_action_clips_refuses_nan_and_wrong_shape():
    e = pusher()
    assert check_action([3, -0.25], e).tolist() == [1.0, -0.25]
    with pytest.raises(ActionError, match="vy"):
        check_action([0, math.nan], e)
    with pytest.raises(ActionError, match="inf"):
        check_action([math.inf, 0], e)
    with pytest.raises(ActionError, match=r"shape \(2,\)"):
        check_action([0, 0, 0], e)
    assert check_chunk(np.full((4, 2), 5.0), e).max() == 1.0


def test_observation_validate_names_the_bad_field():
    e = pusher()
    good = Observation(images={"top": np.zeros((6, 8, 3), np.uint8)}, state=np.zeros(3, np.float32))
    assert good.validate(e) is good
    with pytest.raises(ValueError, match="observation.state"):
        Observation(images=good.images, state=np.zeros(4, np.float32)).validate(e)
    with pytest.raises(ValueError, match=r"non-finite.*\['y'\]"):
        Observation(images=good.images, state=np.array([0, np.nan, 0], np.float32)).validate(e)
    with pytest.raises(ValueError, match="observation.images.top"):
        Observation(images={"top": np.zeros((8, 8, 3), np.uint8)}, state=good.state).validate(e)
    assert set(good.features()) == {"observation.state", "observation.images.top"}


def test_gui_action_validates_at_the_edge():
    a = GuiAction("swipe", point=(100, 200), end=(100, 800), duration_ms=300)
    assert GuiAction.from_dict(a.to_dict()) == a
    with pytest.raises(ActionError, match="unknown GUI action"):
        GuiAction("launch_missiles")
    with pytest.raises(ActionError, match="0..1000"):
        GuiAction("click", point=(1001, 5))
    with pytest.raises(ActionError, match="requires 'text'"):
        GuiAction("type")
    with pytest.raises(ActionError, match="system_button"):
        GuiAction("system_button", button="reboot")
    assert GuiAction("click", element=3).element == 3   # an element reference stands in for a point


def test_registry_errors_are_clear():
    assert parse_uri("sim:metaworld/reach-v3") == ("sim", "metaworld/reach-v3", {})
    with pytest.raises(UnknownDevice, match="no scheme"):
        open_device("twogap-push")
    with pytest.raises(UnknownDevice, match="known: sim:, mujoco:"):
        open_device("robot:arm")


def test_prompt_groups_channel_names_sharing_a_prefix():
    e = Embodiment(name="arm", kind="arm", actions=(Channel("dx", -1, 1), Channel("gripper", -1, 1)),
                   state=tuple(Channel(n) for n in ("hand_x", "hand_y", "gripper", "goal_x", "goal_y")))
    assert "state=hand_{x,y},gripper,goal_{x,y}" in e.prompt()
