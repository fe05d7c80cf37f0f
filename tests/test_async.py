"""Asynchronous execution: the control rate held against a slow policy, the delayed prefix skipped,
stalls counted, clean ends (Ctrl-C, lost device, policy bug), and prefix inpainting in the sampler."""
import json
import threading
import time

import numpy as np
import pytest
import torch

from embodia.action_heads import sample
from embodia.agent.loop.asynchronous import THREAD_NAME, _Plan, check_async, inpaint_weights, run_async
from embodia.agent.loop.episode import run_episode
from embodia.devices import Channel, DeviceLost, Embodiment, Observation, SimDevice, check_action, open_device

HZ = 50.0            # a 20 ms control period ...
LATENCY = 0.04       # ... and a policy that takes two of them


class StepDevice(SimDevice):
    """State = steps taken; keeps every action it receives; can fail at a given step."""

    def __init__(self, fail_at=None, fail=DeviceLost("unplugged"), chunk=16):
        self.embodiment = Embodiment(name="stepper", kind="test", hz=HZ, chunk=chunk, exec_horizon=1,
                                     actions=(Channel("t", -1, 1), Channel("s", -1, 1)), state=(Channel("n"),))
        self.capabilities = frozenset({"success"})
        self.fail_at, self.fail, self.received = fail_at, fail, []
        self.instruction = "step"

    def reset(self, seed=None):
        self.received = []
        return self.observe()

    def observe(self):
        return Observation(state=np.array([len(self.received)], np.float32))

    def act(self, action):
        if self.fail_at is not None and len(self.received) == self.fail_at:
            raise self.fail
        a = check_action(action, self.embodiment)
        self.received.append(a.copy())
        return a

    def success(self):
        return False


class SlowRamp:
    """Sleeps LATENCY, then returns a chunk whose row i is meant for step n + i (n: the steps taken
    when it was asked): channel 0 says which step a row is for, channel 1 which decision made it."""

    def __init__(self, length=16, fail_at_call=None):
        self.length, self.fail_at_call, self.calls = length, fail_at_call, 0

    def reset(self, seed=None):
        self.calls = 0

    def act(self, obs, instruction):
        self.calls += 1
        if self.calls == self.fail_at_call:
            raise KeyError("bug")
        time.sleep(LATENCY)
        n = float(obs.state[0])
        return np.stack([(n + np.arange(self.length)) / 1000, np.full(self.length, n / 1000)], 1).astype(np.float32)


class Recorder:
    def __init__(self):
        self.steps, self.ended = [], None

    def begin_episode(self, task, seed, meta):
        return self

    def step(self, obs, action, timing, extra=None):       # the `Recorder` calls, as the loop makes them
        self.steps.append((float(obs.state[0]), np.asarray(action).copy()))

    def end_episode(self, ep, success, info, final_obs):
        self.ended = dict(success=success, final_state=final_obs.state, info=info)
        return 3


def inference_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


def rate(stamps):
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def test_async_holds_the_control_rate_a_sync_loop_cannot():
    stamps = []
    run_episode(StepDevice(), SlowRamp(), max_steps=20, pace=True,
                on_step=lambda step: stamps.append(time.perf_counter()) and False)
    sync_frac = rate(stamps) / HZ
    r = run_async(StepDevice(), SlowRamp(), max_steps=60)     # paced by default
    a = r.timing["async"]
    assert sync_frac < 0.6, sync_frac                 # a decision every step: the loop waits for each
    assert a["rate_frac"] > 0.9 and a["achieved_hz"] > 0.9 * HZ, a
    assert a["stall_steps"] == 0 and a["dropped_chunks"] == 0
    assert 2 <= a["delay_steps"]["p50"] <= 4           # LATENCY is two periods
    assert r.steps == 60 and r.error is None and not inference_threads()


def test_the_delayed_prefix_is_skipped_and_every_row_lands_on_its_own_step():
    dev = StepDevice()
    r = run_async(dev, SlowRamp(), max_steps=50)
    got = np.stack(dev.received)
    # channel 0 names the step a row was meant for: every step got its own row, none late or early
    assert np.allclose(got[:, 0] * 1000, np.arange(50), atol=1e-3)
    a = r.timing["async"]
    assert a["switch_steps"][0] == 0 and len(a["delays"]) == a["chunks"] - 1 >= 10
    for t, d in zip(a["switch_steps"][1:], a["delays"]):
        # the chunk that took over at step t was asked at step t - d, so it starts at its row d
        assert got[t, 1] * 1000 == pytest.approx(t - d, abs=1e-3) and d >= 1
        assert got[t - 1, 1] * 1000 < t - d               # the step before ran the older chunk


def test_a_chunk_shorter_than_the_delay_stalls_and_the_stalls_are_counted():
    r = run_async(StepDevice(), SlowRamp(length=1), max_steps=10)
    assert r.steps == 10 and r.timing["async"]["stall_steps"] >= 8
    assert r.timing["async"]["rate_frac"] < 0.7


def test_the_recorder_gets_every_executed_step_and_the_end():
    dev, rec = StepDevice(), Recorder()
    r = run_async(dev, SlowRamp(), max_steps=30, recorder=rec)
    assert [s for s, _ in rec.steps] == list(range(30))      # frame t = (obs before, action executed)
    assert np.allclose(np.stack([a for _, a in rec.steps]), np.stack(dev.received))
    assert rec.ended["final_state"].tolist() == [30.0] and r.episode_index == 3


@pytest.mark.parametrize("fail, field", [(KeyboardInterrupt(), "interrupted"), (DeviceLost("unplugged"), "error")])
def test_ctrl_c_or_a_lost_device_stops_the_inference_thread_and_closes_the_episode(fail, field):
    dev, rec = StepDevice(fail_at=12, fail=fail), Recorder()
    r = run_async(dev, SlowRamp(), max_steps=100, recorder=rec)
    assert r.steps == 12 and len(rec.steps) == 12 and not inference_threads()
    if field == "interrupted":
        assert r.interrupted and rec.ended["info"]["interrupted"] is True
    else:
        assert r.error.startswith("DeviceLost") and "unplugged" in rec.ended["info"]["error"]


def test_a_bug_in_the_policy_thread_saves_the_episode_then_surfaces():
    rec = Recorder()
    with pytest.raises(KeyError):
        run_async(StepDevice(), SlowRamp(fail_at_call=3), max_steps=100, recorder=rec)
    assert rec.ended is not None and "KeyError" in rec.ended["info"]["error"] and not inference_threads()


def test_torch_threads_are_limited_during_the_episode_and_restored_after():
    seen = []

    class Probe(SlowRamp):
        def act(self, obs, instruction):
            seen.append(torch.get_num_threads())
            return super().act(obs, instruction)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run_async(StepDevice(), Probe(), max_steps=5)
        assert seen and max(seen) == 1 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_ensembling_blends_the_chunks_that_cover_a_step():
    plan = _Plan(ensemble=True)
    plan.add(0, np.zeros((4, 1), np.float32), now=0)
    plan.add(2, np.ones((4, 1), np.float32), now=3)
    w = np.exp(-0.5)                                   # the older chunk, one newer chunk after it
    assert plan.action(3)[0] == pytest.approx(1 / (1 + w))
    assert plan.action(4)[0] == 1.0                    # only the newer chunk reaches step 4
    assert not plan.add(0, np.zeros((2, 1), np.float32), now=5)   # all its rows are past: dropped


def test_inpaint_weights_pin_the_delay_then_decay_to_zero():
    w = inpaint_weights(10, 3)
    assert w[:3].tolist() == [1.0, 1.0, 1.0] and 0 < w[-1] < 0.05 and np.all(np.diff(w[2:]) < 0)


def test_what_async_cannot_run_is_refused_before_the_episode():
    with pytest.raises(ValueError, match="prefix"):
        check_async(StepDevice(), SlowRamp(), "inpaint")
    with pytest.raises(ValueError, match="unknown smoothing"):
        check_async(StepDevice(), SlowRamp(), "blur")
    with pytest.raises(TypeError, match="smooth"):      # one entry point: smoothing is run_async's alone
        run_episode(StepDevice(), SlowRamp(), max_steps=2, smooth="ensemble")
    with pytest.raises(TypeError, match="async_exec"):
        run_episode(StepDevice(), SlowRamp(), max_steps=2, async_exec=True)


# -- prefix inpainting in the real bundled model ---------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    from embodia.agent.loop.factory import make_policy
    dev = open_device("sim:twogap-push")
    pol = make_policy("embodia-tiny", dev, threads=1)
    yield dev, pol
    dev.close()


def test_without_a_prefix_the_chunk_is_the_plain_samplers_bit_for_bit(tiny):
    dev, pol = tiny
    obs = dev.reset(0)
    pol.reset(5)
    chunk = pol.predict_chunk(obs, dev.instruction)
    pol.reset(5)
    emb = pol.embodiment
    batch = pol.model.backbone.prepare([[obs.images["top"]]], [emb.prompt()], [dev.instruction])
    with torch.inference_mode():
        ctx, cm = pol.model.context(**batch)
        state, smask, amask, eid = pol.inputs(emb, obs.state)
        x = sample(pol.model.head, ctx, state, smask, eid, amask, steps=pol.steps, generator=pol.generator,
                   ctx_mask=cm)
    plain = pol.norms[emb.name]["action"].unnormalize(x[0, :, :emb.action_dim].numpy())
    assert np.array_equal(chunk, np.asarray(plain, np.float32))
    pol.reset(5)       # a prefix with zero weight changes nothing either
    assert np.array_equal(chunk, pol.predict_chunk(obs, dev.instruction, prefix=chunk[:4] + 0.3,
                                                   prefix_weights=np.zeros(4)))


def boundary(dev, pol, seed, inpaint, k=4, d=3):
    """Chunk A from step 0; a new chunk B asked at step k while A runs d more steps, so that B
    takes over at step k + d. Returns A, B and the jump the switch makes: how far B's first
    executed action departs from the action A had planned for that step (normalized units)."""
    obs = dev.reset(seed)
    pol.reset(seed)
    a = pol.predict_chunk(obs, dev.instruction)
    for t in range(k):
        dev.act(a[t])
    obs = dev.observe()
    kw = dict(prefix=a[k:], prefix_weights=inpaint_weights(len(a) - k, d)) if inpaint else {}
    b = pol.predict_chunk(obs, dev.instruction, **kw)
    norm = pol.norms[pol.embodiment.name]["action"]
    return a, b, float(np.linalg.norm(norm.normalize(b[d]) - norm.normalize(a[k + d])))


def test_inpainting_continues_the_old_chunk_and_shrinks_the_jump_at_the_switch(tiny):
    dev, pol = tiny
    plain, inpainted = [], []
    for seed in range(8):
        a, b, jump = boundary(dev, pol, seed, inpaint=True)
        assert np.allclose(b[:3], a[4:7], atol=1e-5)        # the delayed prefix is the old plan itself
        inpainted.append(jump)
        plain.append(boundary(dev, pol, seed, inpaint=False)[2])
    assert np.mean(inpainted) < 0.3 * np.mean(plain), (inpainted, plain)


def test_async_inpainting_runs_the_bundled_model_without_stalls(tiny):
    dev, pol = tiny
    r = run_async(dev, pol, seed=0, max_steps=30, smooth="inpaint", hz=30.0)
    a = r.timing["async"]
    assert r.steps == 30 and r.error is None and a["stall_steps"] == 0 and a["chunks"] > 10
    assert not inference_threads()


def test_cli_runs_and_evaluates_asynchronously_and_refuses_smoothing_without_it(tmp_path):
    from typer.testing import CliRunner

    from embodia.agent.cli.app import app
    runner = CliRunner()
    res = runner.invoke(app, ["run", "--async", "--smooth", "inpaint", "-n", "1", "--max-steps", "8",
                              "--record", str(tmp_path / "rec")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "async (inpaint)" in res.output and "0 stalls" in res.output and "recorded as episode 0" in res.output
    out = tmp_path / "eval.json"
    res = runner.invoke(app, ["eval", "--async", "--smooth", "ensemble", "-n", "1", "--json", str(out)],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output     # eval has no --max-steps: one whole episode at 10 Hz
    rep = json.loads(out.read_text())["async"]
    assert rep["smooth"] == "ensemble" and rep["rate_frac_mean"] > 0.9 and rep["stall_steps"] == 0
    res = runner.invoke(app, ["run", "--smooth", "inpaint", "--max-steps", "2", "--no-record"])
    assert res.exit_code == 2 and "--smooth applies with --async" in res.output
