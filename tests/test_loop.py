"""The control loop with a scripted fake device: receding horizon, stopping, Ctrl-C, device loss."""
import time

import numpy as np
import pytest

from embodia.agent.loop.asynchronous import run_async
from embodia.agent.loop.episode import run_episode
from embodia.devices import Channel, DeviceLost, Embodiment, Observation, SimDevice, check_action


class CounterDevice(SimDevice):
    """State = number of steps taken; success once `goal` steps were taken; can vanish at `lose_at`."""

    def __init__(self, goal=None, lose_at=None, realtime=False, hz=10.0):
        self.embodiment = Embodiment(name="counter", kind="test", hz=hz, chunk=16, exec_horizon=8,
                                     actions=(Channel("a", -1, 1),), state=(Channel("n"),))
        self.capabilities = frozenset({"success"} | ({"realtime"} if realtime else set()))
        self.goal, self.lose_at, self.executed, self.closed = goal, lose_at, [], False
        self.instruction = "count"

    def reset(self, seed=None):
        self.executed = []
        return self.observe()

    def observe(self):
        return Observation(state=np.array([len(self.executed)], np.float32))

    def act(self, action):
        if self.lose_at is not None and len(self.executed) == self.lose_at:
            raise DeviceLost("unplugged")
        a = check_action(action, self.embodiment)
        self.executed.append(float(a[0]))
        return a

    def success(self):
        return self.goal is not None and len(self.executed) >= self.goal


class ChunkPolicy:
    """Each decision returns 16 actions tagged with the decision number (0.01 * k)."""

    def __init__(self, interrupt_at=None):
        self.calls, self.interrupt_at = 0, interrupt_at

    def reset(self, seed=None):
        self.calls = 0

    def act(self, obs, instruction):
        if self.interrupt_at is not None and self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        self.calls += 1
        return np.full((16, 1), 0.01 * self.calls, np.float32)

    def info(self):
        return {"mode": "count"}


class FakeRecorder:
    def __init__(self):
        self.steps, self.ended = [], None

    def begin_episode(self, task, seed, meta):
        self.task, self.seed, self.meta = task, seed, meta
        return self

    def step(self, obs, action, timing, extra=None):       # the `Recorder` calls, as the loop makes them
        self.steps.append((float(obs.state[0]), float(action[0])))

    def end_episode(self, ep, success, info, final_obs):
        self.ended = dict(success=success, final_state=None if final_obs is None else final_obs.state, info=info)
        return 7


def test_receding_horizon_executes_h_exec_actions_then_replans():
    dev, pol = CounterDevice(), ChunkPolicy()
    r = run_episode(dev, pol, seed=1, max_steps=20)
    assert r.steps == 20 and pol.calls == 3            # 8 + 8 + 4
    assert dev.executed == pytest.approx([0.01] * 8 + [0.02] * 8 + [0.03] * 4)
    assert r.success is False and r.info["policy"] == {"mode": "count"}


def test_exec_horizon_override_and_success_stops_early():
    dev, pol = CounterDevice(goal=5), ChunkPolicy()
    r = run_episode(dev, pol, max_steps=100, exec_horizon=2)
    assert r.success is True and r.steps == 5 and pol.calls == 3


def test_recorder_gets_obs_before_action_and_final_state():
    dev, rec = CounterDevice(), FakeRecorder()
    r = run_episode(dev, ChunkPolicy(), seed=4, max_steps=10, recorder=rec, episode_meta={"device": "x"})
    assert [s for s, _ in rec.steps] == list(range(10))     # frame t = (obs before, action executed)
    assert rec.ended["final_state"].tolist() == [10.0] and r.episode_index == 7
    assert rec.seed == 4 and rec.task == "count" and rec.meta == {"device": "x"}


def test_ctrl_c_ends_the_episode_cleanly_and_saves_it():
    dev, rec = CounterDevice(), FakeRecorder()
    r = run_episode(dev, ChunkPolicy(interrupt_at=2), max_steps=100, recorder=rec)
    assert r.interrupted and r.steps == 16
    assert rec.ended is not None and rec.ended["info"]["interrupted"] is True
    assert len(rec.steps) == 16


def test_lost_device_ends_episode_with_error_and_saved_record():
    dev, rec = CounterDevice(lose_at=5), FakeRecorder()
    r = run_episode(dev, ChunkPolicy(), max_steps=100, recorder=rec)
    assert r.error.startswith("DeviceLost") and r.steps == 5 and len(rec.steps) == 5
    assert rec.ended["success"] is False and "unplugged" in rec.ended["info"]["error"]


def test_nan_from_policy_is_refused_not_executed():
    class NanPolicy(ChunkPolicy):
        def act(self, obs, instruction):
            return np.array([[0.5], [np.nan]], np.float32)
    dev = CounterDevice()
    r = run_episode(dev, NanPolicy(), max_steps=10)
    assert dev.executed == [0.5] and "non-finite" in r.error


def test_realtime_devices_are_paced_to_their_rate():
    dev = CounterDevice(realtime=True, hz=50.0)
    t0 = time.perf_counter()
    r = run_episode(dev, ChunkPolicy(), max_steps=10)
    assert time.perf_counter() - t0 >= 9 / 50.0 * 0.95   # 10 steps span 9 periods
    fast = time.perf_counter()
    run_episode(CounterDevice(hz=50.0), ChunkPolicy(), max_steps=10)
    assert time.perf_counter() - fast < 9 / 50.0          # sim devices are not paced
    assert r.timing["overhead_frac"] < 1.0


def test_a_bug_in_the_policy_still_saves_the_episode_then_surfaces():
    class BuggyPolicy(ChunkPolicy):
        def act(self, obs, instruction):
            if self.calls == 1:
                raise KeyError("bug")
            return super().act(obs, instruction)
    dev, rec = CounterDevice(), FakeRecorder()
    with pytest.raises(KeyError):
        run_episode(dev, BuggyPolicy(), max_steps=100, recorder=rec)
    assert len(rec.steps) == 8 and "KeyError" in rec.ended["info"]["error"]


class DuckDevice:
    """A device that inherits nothing: what it defines is used, the rest keeps Device's defaults."""

    max_steps = 6

    def __init__(self):
        self.inner = CounterDevice()
        self.embodiment, self.instruction = self.inner.embodiment, None

    def reset(self, seed=None):
        self.instruction = f"count from seed {seed}"     # set by the reset: read after it
        return self.inner.reset(seed)

    def observe(self):
        return self.inner.observe()

    def act(self, action):
        return self.inner.act(action)

    def info(self):
        return {"executed": len(self.inner.executed)}


def test_a_device_that_inherits_nothing_runs_with_the_declared_defaults():
    rec = FakeRecorder()
    r = run_episode(DuckDevice(), ChunkPolicy(), seed=3, recorder=rec)
    assert r.steps == 6 and r.success is None              # its max_steps; no "success" capability
    assert r.instruction == "count from seed 3" == rec.task and r.info["executed"] == 6
    with pytest.raises(TypeError, match="not a device: it has no embodiment"):
        run_episode(object(), ChunkPolicy())


def test_a_policy_with_the_old_observe_hook_is_refused_in_one_line():
    class Old(ChunkPolicy):
        def observe(self, obs, executed):
            pass
    with pytest.raises(TypeError, match=r"Old.observe\(obs, executed\) is now after_step"):
        run_episode(CounterDevice(), Old(), max_steps=3)


class VanishingDevice(CounterDevice):
    """Gone from its `vanish_at`-th reset on (a phone unplugged between two episodes)."""

    def __init__(self, vanish_at, **kw):
        super().__init__(**kw)
        self.resets, self.vanish_at = 0, vanish_at

    def reset(self, seed=None):
        self.resets += 1
        if self.resets >= self.vanish_at:
            raise DeviceLost("unplugged between episodes")
        return super().reset(seed)


@pytest.mark.parametrize("loop", [run_episode, run_async], ids=["sync", "async"])
def test_a_device_lost_while_it_resets_ends_that_episode_with_its_record_saved(loop):
    """The reset runs inside the loop's guard: a loss there ends the episode as a loss mid-episode
    does, with an error instead of a traceback and a record that says so (no step, no final frame)."""
    rec, pol = FakeRecorder(), ChunkPolicy()
    r = loop(VanishingDevice(1), pol, seed=7, max_steps=10, recorder=rec, instruction="count")
    assert r.error == "DeviceLost: unplugged between episodes" and r.steps == 0 and r.seed == 7
    assert r.success is False and r.episode_index == 7 and pol.calls == 0
    assert rec.steps == [] and rec.task == "count" and rec.seed == 7
    assert rec.ended["success"] is False and rec.ended["final_state"] is None
    assert rec.ended["info"]["error"] == r.error and rec.ended["info"]["steps"] == 0


def test_a_reset_refused_for_another_reason_still_surfaces_after_the_record_is_saved():
    class Misconfigured(CounterDevice):
        def reset(self, seed=None):
            raise ValueError("no such task variant")
    rec = FakeRecorder()
    with pytest.raises(ValueError, match="no such task variant"):
        run_episode(Misconfigured(), ChunkPolicy(), max_steps=10, recorder=rec)
    assert "no such task variant" in rec.ended["info"]["error"]


class StepCountingDevice(CounterDevice):
    """A CounterDevice that overrides ``step`` (act and observe in one call) and counts the calls."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.stepped = 0

    def step(self, action, images=True):
        self.stepped += 1
        return super().step(action, images)


def test_the_loop_drives_a_device_through_step_and_every_listener_gets_one_transition():
    dev, rec, heard = StepCountingDevice(), FakeRecorder(), []
    r = run_episode(dev, ChunkPolicy(), seed=1, max_steps=10, recorder=rec, on_step=lambda step: heard.append(step) and False)
    assert dev.stepped == r.steps == 10
    assert [s.t for s in heard] == list(range(10))
    assert [float(s.obs.state[0]) for s in heard] == [s for s, _ in rec.steps] == list(range(10))
    assert [float(s.next_obs.state[0]) for s in heard] == list(range(1, 11))
    assert [float(s.action[0]) for s in heard] == [a for _, a in rec.steps] == dev.executed
    assert set(heard[0].timing) == {"policy_ms", "device_ms"} and heard[0].extra is None


def test_a_run_stops_at_a_lost_device_and_reports_the_episodes_before_it():
    from embodia.agent.evaluation.evaluate import evaluate
    dev = VanishingDevice(3, goal=3)
    rep = evaluate(dev, ChunkPolicy(), episodes=6, seed=10)
    assert dev.resets == 3                       # no reset tried after the loss
    assert [e["seed"] for e in rep["per_episode"]] == [10, 11, 12]
    assert rep["successes"] == 2 and rep["errors"] == 1
    assert rep["per_episode"][2]["error"].startswith("DeviceLost")


class FramedDevice(CounterDevice):
    """A CounterDevice with a camera that renders on demand ("frames_on_demand"): counts its renders."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.capabilities = self.capabilities | {"render", "frames_on_demand"}
        self.renders = 0

    def observe(self, images=True):
        obs = super().observe()
        if images:
            self.renders += 1
            obs.images = {"cam": np.full((2, 2, 3), len(self.executed), np.uint8)}
        return obs


class FrameReader(ChunkPolicy):
    """Fails the test if a decision is shown an observation without its frame."""

    def act(self, obs, instruction):
        assert int(obs.images["cam"][0, 0, 0]) == int(obs.state[0]), "a decision read a missing frame"
        return super().act(obs, instruction)


class StepFrameReader(FrameReader):
    """Reads the frame of every step it is told about (so every frame must be rendered)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def after_step(self, obs, executed):
        self.seen.append(int(obs.images["cam"][0, 0, 0]))


def test_between_decisions_a_frames_on_demand_device_renders_only_what_a_decision_reads():
    dev, pol = FramedDevice(), FrameReader()
    r = run_episode(dev, pol, seed=1, max_steps=20)
    # the reset, then the observation each of the two later decisions reads (after steps 8 and 16);
    # the 18 other steps end in observations nobody reads (the last one ends the episode)
    assert r.steps == 20 and pol.calls == 3 and dev.renders == 3


@pytest.mark.parametrize("reader", ["recorder", "on_step", "after_step"])
def test_every_frame_is_rendered_when_something_reads_the_steps_between_decisions(reader):
    dev = FramedDevice()
    pol = StepFrameReader() if reader == "after_step" else FrameReader()
    kw = {"recorder": FakeRecorder()} if reader == "recorder" else (
        {"on_step": lambda step: int(step.next_obs.images["cam"][0, 0, 0]) != step.t + 1} if reader == "on_step" else {})
    r = run_episode(dev, pol, seed=1, max_steps=20, **kw)
    assert r.steps == 20 and dev.renders == 21
    if reader == "after_step":
        assert pol.seen == list(range(20))


def test_a_kill_reaches_the_worker_processes_as_ctrl_c():
    """`stop_as_ctrl_c` (SIGTERM's handler in `embodia` and the MT50 build): the command ends as an
    interrupt does, and its ``--jobs`` workers (spawned processes) get Ctrl-C's interrupt too, so
    each closes its devices; a plain `kill` reaches the parent alone, and without the forwarding the
    worker below would sleep on for a minute."""
    import multiprocessing as mp
    import signal
    import time
    from embodia.agent.loop.core import stop_as_ctrl_c
    # a shell without job control starts background commands with Ctrl-C ignored, and an ignored
    # signal stays ignored through exec: the child below then takes Python's own handler only if
    # this process handles it (a pool's workers install theirs: `idle_workers_ignore_ctrl_c`)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        worker = mp.get_context("spawn").Process(target=time.sleep, args=(60,))
        worker.start()
    finally:
        signal.signal(signal.SIGINT, before)
    try:
        time.sleep(3)          # up and sleeping (a spawned interpreter starts in about a second)
        with pytest.raises(KeyboardInterrupt, match="signal 15"):
            stop_as_ctrl_c(15, None)
        worker.join(20)
        assert worker.exitcode == 1        # KeyboardInterrupt in the worker, not a kill (-15) or a timeout
    finally:
        if worker.is_alive():
            worker.kill()


def test_a_kill_during_a_parallel_run_ends_the_calls_in_flight_and_starts_no_more(tmp_path):
    """`in_processes` (suites, recording, frame loading with --jobs) stopped by a `kill` while both
    workers run: the command's interrupt reaches them, each call in flight ends, and none of the
    calls still queued starts (a call already handed to a worker included), where the pool would
    otherwise run every one of them before the command could end."""
    import os
    import signal
    import subprocess
    import threading
    import time
    from embodia.agent.evaluation.workers import in_processes
    from embodia.agent.loop.core import stop_as_ctrl_c
    started, finished = tmp_path / "started", tmp_path / "finished"
    calls = [(f"echo {i} >> {started}; sleep 4; echo {i} >> {finished}",) for i in range(6)]

    def lines(p):
        return p.read_text().split() if p.exists() else []

    def stop_when_both_run():
        deadline = time.monotonic() + 120
        while len(lines(started)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)
    before = signal.signal(signal.SIGTERM, stop_as_ctrl_c)
    try:
        threading.Thread(target=stop_when_both_run, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            in_processes(subprocess.getstatusoutput, calls, 2, None, "running")
    finally:
        signal.signal(signal.SIGTERM, before)
    time.sleep(5)            # what a call left running would write by now
    assert len(lines(started)) == 2 and lines(finished) == []
