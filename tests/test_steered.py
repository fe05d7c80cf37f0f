"""Retrieve-then-steer wired into the VLA policy and the loop; memory evaluation from the CLI."""
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from embodia.agent.cli.app import app
from embodia.agent.loop.episode import run_episode
from embodia.agent.training.train import TrainConfig, train
from embodia.devices import open_device
from embodia.memory import MemoryConfig
from embodia.policies import Policy
from embodia.policies.base import as_policy
from embodia.policies.robot.steered import SteeredPolicy, memory_for
from embodia.policies.robot.vla import VLAPolicy


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from embodia.agent.recording.writer import DatasetWriter
    root = tmp_path_factory.mktemp("steer")
    with open_device("sim:twogap-push") as dev:
        w = DatasetWriter(root / "demos", dev.embodiment)
        for s in range(3):
            run_episode(dev, dev.expert(), seed=200 + s, recorder=w, max_steps=40)
        w.close()
    train(TrainConfig(data=[str(root / "demos")], out=str(root / "ck"), steps=16, batch_size=16, save_every=16,
                      threads=1, only_success=False, freeze_backbone_after=8, frozen_batch_size=16, hidden=32, heads=2,
                      head=dict(dim=32, depth=2, heads=2)), progress=False, log=lambda *_: None)
    return root / "ck"


class Recorder:
    """Wraps a policy and keeps every executed action (the loop calls observe on the outer policy)."""

    def __init__(self, policy):
        self.policy, self.executed = policy, []

    def reset(self, seed=None):
        self.policy.reset(seed)

    def act(self, obs, instruction):
        return self.policy.act(obs, instruction)

    def after_step(self, obs, action):
        self.executed.append(np.array(action))
        if hasattr(self.policy, "observe"):
            self.policy.after_step(obs, action)


def expert_episode(dev, seed):
    """Keys and normalized actions of one successful expert episode (to seed a memory by hand)."""
    states, actions = [], []
    r = run_episode(dev, dev.expert(), seed=seed,
                    on_step=lambda step: states.append(step.obs.state) or actions.append(step.action) and False)
    assert r.success
    return np.stack(states), np.stack(actions)


def test_empty_memory_is_bit_identical_to_no_memory(ckpt):
    with open_device("sim:twogap-push") as dev:
        base = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        plain = Recorder(base)
        run_episode(dev, plain, seed=3, max_steps=40)
        steered = SteeredPolicy(base, memory_for(base), namespace="planar_pusher/twogap-push", learn=False)
        wrapped = Recorder(steered)
        run_episode(dev, wrapped, seed=3, max_steps=40)
        assert steered.steered == 0 and steered.decisions == 40 // dev.embodiment.exec_horizon
        assert all(np.array_equal(a, b) for a, b in zip(plain.executed, wrapped.executed))
        assert len(plain.executed) == len(wrapped.executed) == 40


def test_a_confident_memory_steers_the_decoder_toward_its_prior(ckpt):
    with open_device("sim:twogap-push") as dev:
        base = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        mem = memory_for(base, MemoryConfig(fixed_confidence=1.0))
        steered = SteeredPolicy(base, mem, namespace="ns", learn=False)
        for seed in (10, 11, 12):
            steered.remember(*expert_episode(dev, seed))
        anorm = base.norms["planar_pusher"]["action"]
        obs = dev.reset(10)
        steered.reset(0)
        chunk = steered.act(obs, dev.instruction)
        base.reset(0)
        free = base.act(obs, dev.instruction)
        r = mem.query("ns", steered.key(obs.state), np.zeros((0, 2), np.float32), t=0)
        prior = anorm.unnormalize(r.prior)
        assert steered.steered == 1 and steered.tau0s == [pytest.approx(0.6)]
        assert np.abs(chunk - prior).mean() < np.abs(free - prior).mean()


def test_a_steered_checkpoint_that_ensembles_still_returns_one_blended_action(ckpt):
    """Temporal ensembling holds for steered decisions too: a steered step returns one action, the
    blend of the steered chunk with the earlier chunks' predictions for that step, and the wrapper
    declares the checkpoint's ``ensemble`` (so the asynchronous loop can refuse it)."""
    with open_device("sim:twogap-push") as dev:
        base = VLAPolicy.from_pretrained(ckpt, ensemble=0.1).bind(dev.embodiment)
        mem = memory_for(base, MemoryConfig(fixed_confidence=1.0))
        steered = SteeredPolicy(base, mem, namespace="ns", learn=False)
        assert steered.ensemble == 0.1 and as_policy(steered).ensemble == 0.1
        demos = [expert_episode(dev, seed) for seed in (10, 11, 12)]
        for demo in demos:
            steered.remember(*demo)
        obs = dev.reset(10)
        steered.reset(0)
        first, second = steered.act(obs, dev.instruction), steered.act(obs, dev.instruction)
        assert steered.steered == 2 and first.shape == second.shape == (1, 2)
        # the same two steered chunks without ensembling, from the same noise
        plain = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        ref = SteeredPolicy(plain, memory_for(plain, MemoryConfig(fixed_confidence=1.0)), namespace="ns", learn=False)
        for demo in demos:
            ref.remember(*demo)
        ref.reset(0)
        c0, c1 = ref.act(obs, dev.instruction), ref.act(obs, dev.instruction)
        assert c0.shape == (16, 2) and np.allclose(first[0], c0[0], atol=1e-6)
        w = np.exp(-0.1 * np.array([1, 0]))
        assert np.allclose(second[0], (w[0] * c0[1] + w[1] * c1[0]) / w.sum(), atol=1e-6)


def test_select_executes_the_policys_own_chunk_nearest_the_prior(ckpt):
    """`select=N` (retrieve-then-select): where the memory would steer, the executed chunk is one of
    N chunks the policy samples from its own noise, the one nearest the prior; without a confident
    memory the policy's plain chunk runs. A bad setting is refused with its name."""
    with open_device("sim:twogap-push") as dev:
        base = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        anorm = base.norms["planar_pusher"]["action"]
        obs = dev.reset(10)
        base.reset(0)
        cands = base.predict_candidates(obs, dev.instruction, 6)
        assert cands.shape == (6, base.cfg.horizon, 2) and len({c.tobytes() for c in cands}) == 6
        mem = memory_for(base, MemoryConfig(fixed_confidence=1.0, select=6))
        steered = SteeredPolicy(base, mem, namespace="ns", learn=False)
        base.reset(0)
        steered.reset(0)
        assert np.array_equal(steered.act(obs, dev.instruction), base.reset(0) or base.act(obs, dev.instruction))
        for seed in (10, 11, 12):
            steered.remember(*expert_episode(dev, seed))
        seen = []
        real = base.predict_candidates
        base.predict_candidates = lambda *a: seen.append(real(*a)) or seen[-1]
        picked = []
        for seed in range(4):
            obs = dev.reset(10 + seed)
            steered.reset(seed)
            chunk = steered.act(obs, dev.instruction)
            prior = mem.query("ns", steered.key(obs.state), np.zeros((0, 2), np.float32), t=0).prior
            dist = [np.square(anorm.normalize(c) - prior).sum() for c in seen[-1]]
            i = next(i for i, c in enumerate(seen[-1]) if np.array_equal(c, chunk))
            assert dist[i] == min(dist)
            picked.append(i)
        assert len(seen) == 4 and len(set(picked)) > 1      # it chose, each time (and not "the first")
    for bad in (1, -2):
        with pytest.raises(ValueError, match="select"):
            MemoryConfig(select=bad)
    with pytest.raises(ValueError, match="select and replay"):
        MemoryConfig(select=8, replay=True)


def test_noise_recall_samples_from_the_noise_that_began_a_stored_success(ckpt):
    """`recall_noise`: with nothing stored the policy runs bit-identically; after a success, a
    decision at a state that success passed runs the policy's whole flow from the noise that began
    that success's chunk there: the same observation and noise give the same chunk, whatever the
    episode's own seed. The bank is the steering policy's, so a fresh one recalls nothing."""
    with open_device("sim:twogap-push") as dev:
        base = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        plain = Recorder(base)
        run_episode(dev, plain, seed=3, max_steps=24)
        steered = SteeredPolicy(base, memory_for(base, MemoryConfig(recall_noise=True, fixed_confidence=1.0)),
                                namespace="ns")
        wrapped = Recorder(steered)
        run_episode(dev, wrapped, seed=3, max_steps=24)
        assert steered.steered == 0 and all(np.array_equal(a, b) for a, b in zip(plain.executed, wrapped.executed))
        # one episode from seed 3, reported a success: its decisions' noises go to the bank
        obs = dev.reset(5)
        steered.reset(3)
        first = steered.act(obs, dev.instruction)
        steered.after_step(obs, first[0])
        steered.end_episode(True)
        assert set(steered.noise_bank) == {(steered.episodes, 0)} and len(steered.memory) == 1
        # the same start from another seed: the recalled noise gives back the stored success's chunk
        steered.reset(99)
        again = steered.act(dev.reset(5), dev.instruction)
        base.reset(99)
        own = base.act(dev.reset(5), dev.instruction)
        assert steered.steered == 1 and np.array_equal(again, first) and not np.array_equal(own, first)
        fresh = SteeredPolicy(base, steered.memory, namespace="ns", learn=False)
        fresh.reset(99)
        assert np.array_equal(fresh.act(dev.reset(5), dev.instruction), own) and fresh.steered == 0
    with pytest.raises(ValueError, match="recall_noise"):
        MemoryConfig(recall_noise=True, replay=True)


def test_the_noise_bank_drops_the_noises_of_evicted_and_deleted_entries(ckpt):
    """The bank keeps a noise only while the entry it began is stored: a capacity eviction and a
    deletion by failure credit take the entry's noise along (the bank never outgrows the memory)."""
    with open_device("sim:twogap-push") as dev:
        base = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        cfg = MemoryConfig(recall_noise=True, fixed_confidence=1.0, capacity=1, dedup=False, fail_delete_min=1,
                           fail_delete_ratio=0.0)
        steered = SteeredPolicy(base, memory_for(base, cfg), namespace="ns")

        def one_step(seed, success):
            obs = dev.reset(seed)
            steered.reset(seed)
            steered.after_step(obs, steered.act(obs, dev.instruction)[0])
            steered.end_episode(success)
        one_step(5, True)
        first = set(steered.noise_bank)
        assert first == {(steered.episodes, 0)} == steered.memory.stored_origins("ns")
        one_step(6, True)           # capacity 1: the first success's entry is evicted, and its noise
        assert set(steered.noise_bank) == {(steered.episodes, 0)} == steered.memory.stored_origins("ns")
        assert not first & set(steered.noise_bank)
        one_step(6, False)          # steered by that entry and failed: credit deletes it, and its noise
        assert steered.steered == 1 and len(steered.memory) == 0 and steered.noise_bank == {}


def test_the_loop_stores_verified_successes_and_not_failures(ckpt):
    with open_device("sim:twogap-push") as dev:
        base = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        steered = SteeredPolicy(base, memory_for(base), namespace="ns")
        r = run_episode(dev, steered, seed=1, max_steps=30)     # an untrained policy fails
        assert r.success is False and len(steered.memory) == 0
        steered.reset(2)
        states, actions = expert_episode(dev, 2)
        for s, a in zip(states, actions):       # as the loop would report an expert-driven success
            steered.after_step(type("O", (), {"state": s})(), a)
        steered.end_episode(True)
        assert len(steered.memory) == int(np.ceil(len(actions) / dev.embodiment.exec_horizon))


def test_noisy_labels_count_the_poisoned_entries_and_credit_removes_them(ckpt):
    from embodia.agent.evaluation.memory_eval import NoisyLabels
    with open_device("sim:twogap-push") as dev:
        base = VLAPolicy.from_pretrained(ckpt).bind(dev.embodiment)
        cfg = MemoryConfig(fixed_confidence=1.0, credit_min_weight=0.0)     # credit every elite
        steered = SteeredPolicy(base, memory_for(base, cfg), namespace="ns")
        steered.remember(*expert_episode(dev, 5))                    # one genuine success
        clean = len(steered.memory)
        noisy = NoisyLabels(steered, rate=0.5)                       # half the episodes falsely labelled
        noisy.reset(6)
        states, actions = expert_episode(dev, 6)
        for s, a in zip(states[:30], -actions[:30]):                 # a "failed" episode: wrong way
            steered.after_step(type("O", (), {"state": s})(), a)
        noisy.end_episode(False)
        rep = noisy.poison_report()
        n = len(steered.memory) - clean
        assert rep == {"false_positives": 1, "episodes": 1, "entries_stored": n, "entries_left": n,
                       "entries_left_that_steered": 0,
                       "false_successes": [{"id": noisy.poisoned_ids[0], "stored": n, "left": n}]}
        assert rep["entries_stored"] > 0
        noisy.reset(7)
        noisy.end_episode(True)                                      # a true success is not a false positive
        assert noisy.false_positives == 1 and noisy.poison_report()["entries_left"] == rep["entries_left"]
        mem, poisoned = steered.memory, noisy.poisoned_ids[0]
        e = mem.entries("ns")
        for _ in range(3):                                           # the poisoned entries steer 3 failures
            r = mem.query("ns", e["keys"][e["episode_id"] == poisoned][0], None)
            assert mem.record_use("ns", r) > 0
            mem.end_episode(False, namespace="ns")
        # pooled over its source episode, the false success loses every segment, not just those
        # that steered (failure credit per entry alone would leave most of them)
        assert noisy.poison_report()["entries_left"] == 0


class _Recorder:
    """A stand-in steered policy: remembers the labels it was given."""
    def __init__(self):
        self.labels, self.episodes, self.memory, self.namespace = [], 0, None, "ns"

    def end_episode(self, success):
        self.episodes += 1
        self.labels.append(success)


class _Gap:
    def __init__(self):
        self.gap = None

    def info(self):
        return {"gap": self.gap, "puck_goal_dist": 0.3}


@pytest.mark.parametrize("schedule,which,expect", [
    # spread: a false label whenever fewer than 10% of the episodes so far carry one
    ("spread", "any", [True, False, False, False, False, False, False, False, False, False,
                       True, False, False, False, False, False, False, False, False, False]),
    # burst: the first failures until 10% of the stream's 20 episodes (2) carry one, then never
    ("burst", "any", [True, True] + [False] * 18),
    # stuck: only failures that never got through a gap (every third one here) are mislabelled
    ("burst", "stuck", [False, False, True, False, False, True] + [False] * 14),
])
def test_faulty_detectors_flip_the_failures_their_schedule_says(monkeypatch, schedule, which, expect):
    from embodia.agent.evaluation.memory_eval import NoisyLabels
    pol, dev = _Recorder(), _Gap()
    noisy = NoisyLabels(pol, 0.1, schedule, which)
    noisy.stream_length, noisy.device = 20, dev
    monkeypatch.setattr(NoisyLabels, "_poisoned_in_memory", lambda self, ids, used_only=False: 0)
    for i in range(20):                                  # every episode fails
        dev.gap = None if i % 3 == 2 else "right"
        noisy.end_episode(False)
    assert pol.labels == expect
    assert noisy.false_positives == sum(expect)
    assert [p["id"] for p in noisy.poisoned] == [i + 1 for i, x in enumerate(expect) if x]
    with pytest.raises(ValueError, match="stream_length"):
        late = NoisyLabels(_Recorder(), 0.1, "burst")
        late.end_episode(False)


def test_cli_memory_streams_report_and_plot(ckpt, tmp_path):
    out, png = tmp_path / "mem.json", tmp_path / "curve.png"
    res = CliRunner().invoke(app, ["eval", "--policy", str(ckpt), "--memory", "online", "--streams", "2",
                                   "--episodes", "2", "--ablations", "replay,noisy-burst,noisy-burst-no-credit",
                                   "--json", str(out), "--plot", str(png), "--shift", "blocked-left"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert set(rep["arms"]) == {"off", "online", "replay", "noisy-burst", "noisy-burst-no-credit"}
    # false labels are compared with clean labels and with the same labels without credit
    assert {"noisy-burst - online", "noisy-burst - noisy-burst-no-credit"} <= set(rep["comparisons"])
    burst = rep["arms"]["noisy-burst"]
    failed = [round(2 * (1 - r)) for r in burst["per_stream"]]      # the burst mislabels 1 of 2 (10%, rounded up)
    assert burst["poison"]["false_positives"] == sum(min(1, f) for f in failed)
    assert burst["poison"]["false_positives"] >= 1                     # the tiny policy fails some here
    assert "false successes; failure credit removed" in res.output
    assert rep["arms"]["off"]["episodes"] == 4 and len(rep["arms"]["online"]["per_stream"]) == 2
    cmp = rep["comparisons"]["online - off"]["second_half"]
    assert len(cmp["newcombe95"]) == 2 and len(cmp["per_stream_diff"]) == 2
    assert png.stat().st_size > 1000
    bad = CliRunner().invoke(app, ["eval", "--policy", "expert", "--memory", "online", "--episodes", "1"])
    assert bad.exit_code == 2 and "a flow policy the memory can steer" in bad.output


def test_corrupt_memory_file_is_refused_with_its_name(ckpt, tmp_path):
    path = tmp_path / "mem"
    res = CliRunner().invoke(app, ["eval", "--policy", str(ckpt), "--memory", str(path), "--episodes", "1"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert path.exists()
    victims = sorted(p for p in path.rglob("*") if p.is_file())
    assert victims
    victims[0].write_bytes(b"garbage")
    res = CliRunner().invoke(app, ["eval", "--policy", str(ckpt), "--memory", str(path), "--episodes", "1"])
    assert res.exit_code == 2 and str(path) in res.output.replace("\n", "")


def test_memory_ingest_stats_and_prune_from_the_cli(ckpt, tmp_path):
    from embodia.agent.recording.writer import DatasetWriter
    ds = tmp_path / "ds"
    with open_device("sim:twogap-push") as dev:
        w = DatasetWriter(ds, dev.embodiment)
        for s in range(2):
            run_episode(dev, dev.expert(), seed=s, recorder=w, episode_meta={"device": "sim:twogap-push"})
        w.close()
    mem = tmp_path / "mem"
    run = CliRunner().invoke
    res = run(app, ["memory", "ingest", str(mem), "--data", str(ds), "--policy", str(ckpt)], catch_exceptions=False)
    assert res.exit_code == 0 and "ingested 2 successful episodes" in res.output, res.output
    res = run(app, ["memory", "stats", str(mem)], catch_exceptions=False)
    assert res.exit_code == 0 and "planar_pusher/twogap-push" in res.output
    res = run(app, ["memory", "prune", str(mem)], catch_exceptions=False)
    assert res.exit_code == 0 and "deleted 0 entries" in res.output
    res = run(app, ["memory", "prune", str(mem), "--drop", "--namespace", "nope"])
    assert res.exit_code == 2 and "planar_pusher/twogap-push" in res.output


@pytest.mark.slow
def test_parallel_streams_match_the_serial_run_and_resume_from_cache(tmp_path):
    """Streams farmed out to worker processes give exactly the serial outcomes (a stream depends
    only on its arm, index and seeds), and a rerun reads finished streams back from the cache."""
    from embodia.agent.evaluation.memory_eval import arm_factory, build_report, evaluate_memory, run_streams_parallel
    from embodia.agent.loop.factory import make_policy
    from embodia.memory import make_namespace
    kw = dict(arms=["off", "online"], streams=2, episodes=3, seed=0)
    with open_device("sim:twogap-push", shift="blocked-left") as dev:
        ns = make_namespace(dev.embodiment.name, "twogap-push")
        serial = evaluate_memory(dev, arm_factory(make_policy("embodia-tiny", dev, threads=1), ns), **kw)
    seen = []
    runs = run_streams_parallel("sim:twogap-push", "embodia-tiny", shift="blocked-left", jobs=2,
                                cache_dir=tmp_path, on_stream=lambda a, s, r, cached: seen.append(cached), **kw)
    par = build_report(runs, **kw)
    for arm in kw["arms"]:
        assert par["arms"][arm]["per_stream"] == serial["arms"][arm]["per_stream"]
        assert par["arms"][arm]["steered_decisions_per_episode"] == serial["arms"][arm]["steered_decisions_per_episode"]
    assert serial["arms"]["online"]["steered_decisions_per_episode"] > 0      # the memory did steer
    assert seen == [False] * 4
    again = run_streams_parallel("sim:twogap-push", "embodia-tiny", shift="blocked-left", jobs=2,
                                 cache_dir=tmp_path, on_stream=lambda a, s, r, cached: seen.append(cached), **kw)
    assert again == runs and seen[4:] == [True] * 4


@pytest.mark.slow
def test_cells_sharing_one_pool_give_each_cell_its_own_outcomes(tmp_path):
    """Three cells (two shifts, one clean) in one pool of two workers, which then move from cell to
    cell: every stream comes out as when the cells run one by one in this process."""
    from embodia.agent.evaluation.memory_eval import run_cells_parallel
    cells = [dict(device_uri="sim:twogap-push", policy_spec="embodia-tiny", shift=shift, arms=["online"],
                  streams=1, episodes=2, seed=0) for shift in ("blocked-left", None, "heavy")]
    seen = []
    shared = run_cells_parallel(cells, jobs=2, cache_dir=tmp_path, on_stream=lambda i, a, s, r, cached: seen.append(i))
    one_by_one = run_cells_parallel(cells, jobs=1)
    assert shared == one_by_one and sorted(seen) == [0, 1, 2]
    assert shared[0] != shared[1]          # each worker ran the cell it was given (blocked-left is not clean)
    assert run_cells_parallel(cells, jobs=2, cache_dir=tmp_path) == shared        # all read back

def test_a_drifting_stream_moves_to_the_other_device_at_its_episode(monkeypatch):
    """`run_stream(drift=(k, other))`: episodes 0..k-1 on the device, k.. on the other one, with the
    stream's seeds; the policy (and its memory) is the same object throughout."""
    import embodia.agent.evaluation.memory_eval as me
    seen = []

    class R:
        interrupted, success, steps, info = False, True, 3, {}

    def fake_run_episode(device, policy, seed):
        seen.append((device, seed, id(policy)))
        return R()
    monkeypatch.setattr(me, "run_episode", fake_run_episode)
    pol = Policy()          # a stand-in: the fake loop never asks it anything
    out = me.run_stream("before", lambda arm, s: pol, "online", 1, episodes=4, seed=100, drift=(2, "after"))
    assert [d for d, _, _ in seen] == ["before", "before", "after", "after"]
    assert [s for _, s, _ in seen] == [104, 105, 106, 107] and {p for _, _, p in seen} == {id(pol)}
    assert out["outcomes"] == [True] * 4


def test_a_checkpoint_carries_the_memory_settings_it_was_tuned_with(ckpt, tmp_path):
    import shutil

    from embodia.agent.loop.factory import with_memory
    from embodia.policies.robot.vla import CheckpointError
    tuned = tmp_path / "tuned"
    shutil.copytree(ckpt, tuned)
    (tuned / "memory.json").write_text(json.dumps({"sigma": 0.25, "replay": True}))
    with open_device("sim:twogap-push") as dev:
        plain = VLAPolicy.from_pretrained(ckpt, threads=1).bind(dev.embodiment)
        pol = VLAPolicy.from_pretrained(tuned, threads=1).bind(dev.embodiment)
        assert memory_for(plain).config == MemoryConfig()
        assert memory_for(pol).config == MemoryConfig(sigma=0.25, replay=True)
        assert memory_for(pol, MemoryConfig(k=4)).config == MemoryConfig(k=4)   # an explicit config wins
        # a fresh memory on disk starts with them; one made earlier keeps the settings it was saved with
        fresh = with_memory(pol, str(tmp_path / "m1"), "sim:twogap-push", dev)
        assert fresh.memory.config.sigma == 0.25 and fresh.memory.config.replay
        old = with_memory(plain, str(tmp_path / "m2"), "sim:twogap-push", dev)
        old.memory.save(tmp_path / "m2")
        again = with_memory(pol, str(tmp_path / "m2"), "sim:twogap-push", dev)
        assert again.memory.config == MemoryConfig()
    for bad, says in (({"sigmaa": 1.0}, "unknown memory settings ['sigmaa']"), ({"k": 0}, "memory.json"),
                      ([1, 2], "JSON object")):
        (tuned / "memory.json").write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=re.escape(says)):
            VLAPolicy.from_pretrained(tuned)


def test_a_checkpoint_can_ask_for_the_offsets_key_which_ignores_where_the_scene_sits(ckpt, tmp_path):
    import shutil

    from embodia.agent.loop.factory import PolicyError, with_memory
    from embodia.policies.robot.steered import KEY_ENCODER, OFFSETS_ENCODER, OffsetKey
    from embodia.policies.robot.vla import CheckpointError
    tuned = tmp_path / "tuned"
    shutil.copytree(ckpt, tuned)
    (tuned / "memory.json").write_text(json.dumps({"key": "offsets", "sigma": 1.0}))
    with open_device("sim:twogap-push") as dev:
        emb = dev.embodiment
        pol = VLAPolicy.from_pretrained(tuned, threads=1).bind(emb)
        plain = VLAPolicy.from_pretrained(ckpt, threads=1).bind(emb)
        mem = memory_for(pol)
        assert mem.encoder_id == OFFSETS_ENCODER and mem.config == MemoryConfig(sigma=1.0)
        # pusher, puck and goal: 3 offsets of 2 + 3 motions (none recorded: zeros) + the 4 velocity channels
        assert mem.key_dim == OffsetKey(emb, None).dim == 6 + 6 + 4
        steered = SteeredPolicy(pol, mem, namespace="ns")
        state = np.asarray(dev.reset(3).state, np.float64)
        moved = state.copy()
        for name in ("pusher", "puck", "goal"):          # the whole scene 7 cm to the side
            moved[[c.name for c in emb.state].index(f"{name}_x")] += 0.07
        assert np.array_equal(steered.key(state), steered.key(moved))
        by_state = SteeredPolicy(plain, memory_for(plain), namespace="ns")
        assert by_state.memory.encoder_id == KEY_ENCODER and not np.array_equal(by_state.key(state),
                                                                                by_state.key(moved))
        # a memory file remembers its key: the other key is refused, not mixed in
        first = with_memory(pol, str(tmp_path / "m"), "sim:twogap-push", dev)
        first.memory.save(tmp_path / "m")
        assert with_memory(pol, str(tmp_path / "m"), "sim:twogap-push", dev).memory.encoder_id == OFFSETS_ENCODER
        with pytest.raises(PolicyError, match="key encoder"):
            with_memory(plain, str(tmp_path / "m"), "sim:twogap-push", dev)
    (tuned / "memory.json").write_text(json.dumps({"key": "pixels"}))
    with pytest.raises(CheckpointError, match="key must be"):
        VLAPolicy.from_pretrained(tuned)


def test_a_reopened_memory_numbers_new_episodes_after_its_own(ckpt, tmp_path):
    with open_device("sim:twogap-push") as dev:
        pol = VLAPolicy.from_pretrained(ckpt, threads=1).bind(dev.embodiment)
        emb = dev.embodiment
        states = np.zeros((12, emb.state_dim), np.float32)
        actions = np.zeros((12, emb.action_dim), np.float32)
        first = SteeredPolicy(pol, memory_for(pol), namespace="ns")
        assert first.episodes == 0
        for i in range(2):
            first.set_executed(list(states + 3 * i), list(actions - 0.5 * i))
            first.end_episode(True)
        first.memory.save(tmp_path / "m")
        from embodia.memory import SuccessMemory
        from embodia.policies.robot.steered import KEY_ENCODER, normalizer_hash
        again = SteeredPolicy(pol, SuccessMemory.load(tmp_path / "m", encoder_id=KEY_ENCODER,
                                                      normalizer_hash=normalizer_hash(pol)), namespace="ns")
        assert again.episodes == 2       # the old process stored episodes 1 and 2
        again.set_executed(list(states + 1), list(actions + 0.5))
        again.end_episode(True)
        assert sorted(set(again.memory.entries("ns")["episode_id"].tolist())) == [1, 2, 3]


def test_a_memory_that_recalls_seeds_starts_episodes_from_the_noise_of_a_success(ckpt, tmp_path):
    import shutil

    import torch

    from embodia.memory import MemoryFileError, SuccessMemory
    from embodia.memory.persist import meta_checksum
    from embodia.policies.robot.steered import KEY_ENCODER, normalizer_hash
    tuned = tmp_path / "tuned"
    shutil.copytree(ckpt, tuned)
    (tuned / "memory.json").write_text(json.dumps({"recall_seed": True}))

    def drawn_from(pol, seed):    # the policy's noise generator is where `seed` starts it
        return torch.equal(pol.generator.get_state(), torch.Generator().manual_seed(seed).get_state())

    with open_device("sim:twogap-push") as dev:
        emb = dev.embodiment
        pol = VLAPolicy.from_pretrained(tuned, threads=1).bind(emb)
        mem = memory_for(pol)
        assert mem.config == MemoryConfig(recall_seed=True)
        steered = SteeredPolicy(pol, mem, namespace="ns")
        states = np.zeros((12, emb.state_dim), np.float32)
        actions = np.zeros((12, emb.action_dim), np.float32)

        def episode(seed, success):
            steered.reset(seed)
            noise = steered.noise_seed
            steered.set_executed(list(states), list(actions))
            steered.end_episode(success)
            return noise
        assert episode(5, False) == 5 and mem.seeds == {}          # a failure with its own seed: forgotten
        assert episode(6, True) == 6 and mem.seeds == {"ns": {6: [1, 1, 1]}}
        steered.reset(7)
        assert steered.noise_seed == 6 and steered.recalled_seed and drawn_from(pol, 6)
        steered.namespace = "other"                                 # another task keeps its own seeds
        steered.reset(7)
        assert steered.noise_seed == 7 and not steered.recalled_seed and drawn_from(pol, 7)
        steered.namespace = "ns"
        r = run_episode(dev, steered, seed=8, max_steps=8)          # through the loop
        assert steered.noise_seed == 6 and r.success is False and mem.seeds["ns"][6] == [1, 2, 1]
        assert episode(9, False) == 6 and mem.recall_seed("ns") is None   # 1 success in 3: not recalled
        assert episode(10, True) == 10 and mem.recall_seed("ns") == 10
        assert (mem.stats()["ns"]["noise_seeds"], mem.stats()["ns"]["recalled_seed"]) == (2, 10)
        mem.save(tmp_path / "m")
        again = SuccessMemory.load(tmp_path / "m", encoder_id=KEY_ENCODER, normalizer_hash=normalizer_hash(pol))
        assert again.seeds == mem.seeds and again.config.recall_seed
        # off (the default): the episode's own seed, and nothing about seeds is kept
        plain = VLAPolicy.from_pretrained(ckpt, threads=1).bind(emb)
        off = SteeredPolicy(plain, memory_for(plain), namespace="ns")
        off.reset(6)
        off.set_executed(list(states), list(actions))
        off.end_episode(True)
        off.reset(7)
        assert off.noise_seed == 7 and drawn_from(plain, 7) and off.memory.seeds == {}
    meta_path = tmp_path / "m" / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["seeds"] == {"ns": [[6, 1, 3, 1], [10, 1, 1, 2]]}
    meta["seeds"]["ns"][0] = [6, 4, 3, 1]                           # more successes than episodes
    meta["meta_sha256"] = meta_checksum(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(MemoryFileError, match=r"seeds\['ns'\]\[0\].successes = 4: expected a whole number 0..3"):
        SuccessMemory.load(tmp_path / "m", encoder_id=KEY_ENCODER, normalizer_hash=normalizer_hash(pol))


def test_each_memory_arm_differs_from_the_checkpoints_settings_in_what_it_names():
    from embodia.agent.evaluation.memory_eval import ARMS, arm_factory
    from embodia.agent.loop.factory import make_policy
    with open_device("sim:twogap-push") as dev:
        pol = make_policy("embodia-tiny", dev, threads=1)
        make = arm_factory(pol, "ns")
        assert make("off") is pol
        configs = {arm: make(arm).memory.config for arm in ("online", "seed-recall", "seed-recall-only", "replay")}
    assert configs["online"] == MemoryConfig(**pol.memory_settings)
    # seed recall with the steering on, and without it (a confidence held at 0 never steers)
    assert configs["seed-recall"] == MemoryConfig(recall_seed=True)
    assert configs["seed-recall-only"] == MemoryConfig(recall_seed=True, fixed_confidence=0.0)
    assert configs["replay"] == MemoryConfig(replay=True)
    with pytest.raises(ValueError, match="unknown arm 'seed'; known: off, online"):
        make("seed")
    assert {"seed-recall", "seed-recall-only"} <= set(ARMS)


def test_a_workdir_moved_elsewhere_reads_its_streams_back(tmp_path):
    """A stream's file names the workdir's own policy copy by its place in the workdir, not by its
    absolute path: the folder copied elsewhere reads every stream back (no worker starts: none is
    left to run), and a file kept under the old absolute-path name is read back and renamed."""
    import shutil
    from embodia.agent.evaluation.memory_eval import run_cells_parallel

    def cells(w):
        return [dict(device_uri="sim:twogap-push", policy_spec=str(w / "policy"), arms=["off", "online"],
                     streams=1, episodes=2, seed=0)]
    w = tmp_path / "w"
    (w / "policy").mkdir(parents=True)
    (w / "streams").mkdir()
    kept = {"off": {"outcomes": [True, False]}, "online": {"outcomes": [True, True]}}
    old_tag = f"sim:twogap-push|None|None|{w / 'policy'}|seed0|ep2".replace("/", "_")
    for arm, res in kept.items():      # as an earlier version named them: the policy's absolute path
        (w / "streams" / f"{old_tag}|{arm}|0.json".replace("|", "__").replace(":", "-")).write_text(json.dumps(res))
    got = run_cells_parallel(cells(w), jobs=2, cache_dir=w / "streams")
    assert got == [{("off", 0): kept["off"], ("online", 0): kept["online"]}]
    names = sorted(p.name for p in (w / "streams").iterdir())
    assert len(names) == 2 and all("workdir-policy" in n and str(tmp_path).replace("/", "_") not in n for n in names)
    shutil.copytree(w, tmp_path / "moved")
    shutil.rmtree(w)
    seen = []
    again = run_cells_parallel(cells(tmp_path / "moved"), jobs=2, cache_dir=tmp_path / "moved" / "streams",
                               on_stream=lambda i, a, s, r, cached: seen.append(cached))
    assert again == got and seen == [True, True]
