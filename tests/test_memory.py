"""memory: success memory (storage, retrieval, consistency filter, elite prior, confidence,
guidance, dedup, capacity, failure credit, persistence, namespaces). Fast and deterministic."""
import json
import tempfile
import warnings

import faiss
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embodia.memory import (
    MemoryConfig,
    MemoryFileError,
    MemoryMismatch,
    SuccessMemory,
    make_namespace,
    stable_hash,
    tau0_from_confidence,
)

faiss.omp_set_num_threads(1)

DK, H, D, HL = 4, 16, 2, 8
NS = make_namespace("pusher", "twogap")
LEFT = np.array([-0.8, 0.5], np.float32)
RIGHT = np.array([0.8, 0.5], np.float32)


def new_mem(**cfg):
    cfg.setdefault("sigma", 1.0)                # fixed similarity scale unless a test calibrates
    return SuccessMemory(MemoryConfig(**cfg), DK, H, D, HL, encoder_id="enc-v1", normalizer_hash="norm-v1")


def add_mode(mem, center, n, rng, key=np.zeros(DK), key_noise=0.05, act_noise=0.05, progress=0.0,
             hist=None, ns=NS):
    keys = key[None] + key_noise * rng.standard_normal((n, DK))
    chunks = center[None, None, :] + act_noise * rng.standard_normal((n, H, D))
    kw = {}
    if hist is not None:
        kw = dict(hist=np.broadcast_to(hist, (n, HL, D)), hist_n=np.full(n, HL))
    return mem.add_entries(ns, keys, chunks, progress=np.full(n, progress), ep_len=np.full(n, 40), **kw)


def episode(rng, T=40, base=np.zeros(DK), act=(0.5, 0.5), noise=0.02):
    keys = base[None] + np.linspace(0, 2, T)[:, None] * np.array([1, 0, 0, 0]) + \
        0.01 * rng.standard_normal((T, DK))
    acts = np.asarray(act, np.float32)[None] + noise * rng.standard_normal((T, D))
    return keys.astype(np.float32), np.clip(acts, -1, 1).astype(np.float32)


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


# ---------------------------------------------------------------------------------------------
# mode selection
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_left,n_right,seed", [(10, 10, 0), (11, 9, 1), (9, 11, 2), (3, 17, 3),
                                                 (12, 12, 4), (6, 6, 5)])
def test_bimodal_memory_never_averages(n_left, n_right, seed):
    rng = np.random.default_rng(seed)
    mem = new_mem()
    add_mode(mem, LEFT, n_left, rng)
    add_mode(mem, RIGHT, n_right, rng)
    r = mem.query(NS, 0.02 * rng.standard_normal(DK), progress=0.0)
    assert r.n_kept == n_left + n_right
    d_left, d_right = rmse(r.prior, LEFT[None]), rmse(r.prior, RIGHT[None])
    assert min(d_left, d_right) < 0.1                       # within delta of one mode
    assert abs(float(r.prior[:, 0].mean())) > 0.6           # far from the between-modes mean (x = 0)
    assert r.n_elite <= max(n_left, n_right)
    if n_left != n_right:                                   # the heavier mode wins
        assert (d_left < d_right) == (n_left > n_right)
    g = mem.guidance(r, steps=10)
    if g is not None:
        assert min(rmse(g[1], LEFT[None]), rmse(g[1], RIGHT[None])) < 0.1


@settings(max_examples=25, deadline=None, derandomize=True)
@given(n_left=st.integers(1, 12), n_right=st.integers(1, 12), sep=st.floats(0.6, 1.0),
       key_noise=st.floats(0.0, 0.5), seed=st.integers(0, 2 ** 16))
def test_prior_is_never_between_modes(n_left, n_right, sep, key_noise, seed):
    rng = np.random.default_rng(seed)
    mem = new_mem()
    left, right = np.array([-sep, 0.2], np.float32), np.array([sep, 0.2], np.float32)
    add_mode(mem, left, n_left, rng, key_noise=key_noise)
    add_mode(mem, right, n_right, rng, key_noise=key_noise)
    r = mem.query(NS, key_noise * rng.standard_normal(DK))
    if not r.empty:
        assert min(rmse(r.prior, left[None]), rmse(r.prior, right[None])) < 0.15
        assert abs(float(r.prior[:, 0].mean())) > sep - 0.15


def test_mode_selection_off_averages_and_lowers_confidence():
    rng = np.random.default_rng(0)
    on, off = new_mem(), new_mem(mode_selection=False)
    for mem in (on, off):
        r = np.random.default_rng(7)
        add_mode(mem, LEFT, 10, r)
        add_mode(mem, RIGHT, 10, r)
    q = 0.02 * rng.standard_normal(DK)
    r_on, r_off = on.query(NS, q, progress=0.0), off.query(NS, q, progress=0.0)
    assert abs(float(r_off.prior[:, 0].mean())) < 0.3       # the ablation averages the two modes
    assert r_off.n_elite == 20
    assert abs(float(r_on.prior[:, 0].mean())) > 0.6
    assert r_off.confidence < 0.2 < 0.4 < r_on.confidence    # the spread of a mixed prior is distrusted
    g_off, g_on = off.guidance(r_off), on.guidance(r_on)
    assert (g_off is None or g_off[0] <= 0.1) and g_on[0] >= 0.5    # ... so it barely steers


def test_no_consistency_ablation_keeps_inconsistent_candidates():
    rng = np.random.default_rng(1)
    for flag, expect in ((True, 5), (False, 10)):
        mem = new_mem(consistency=flag)
        add_mode(mem, RIGHT, 5, rng, progress=0.1)
        add_mode(mem, RIGHT, 5, rng, progress=0.9)
        r = mem.query(NS, np.zeros(DK), progress=0.1)
        assert r.n_kept == expect


# ---------------------------------------------------------------------------------------------
# consistency filter
# ---------------------------------------------------------------------------------------------
def test_history_filter_drops_disagreeing_candidates():
    rng = np.random.default_rng(2)
    mem = new_mem()
    h_up = np.tile([0.0, 0.6], (HL, 1)).astype(np.float32)
    h_down = np.tile([0.0, -0.6], (HL, 1)).astype(np.float32)
    add_mode(mem, RIGHT, 6, rng, hist=h_up)
    add_mode(mem, LEFT, 6, rng, hist=h_down)
    rows = mem.entries(NS)
    right_ids = set(rows["ids"][rows["chunks"][:, 0, 0] > 0].tolist())
    now = h_up + 0.05 * rng.standard_normal(h_up.shape).astype(np.float32)
    r = mem.query(NS, np.zeros(DK), hist=now)
    assert r.n_candidates == 12 and r.n_kept == 6
    assert set(r.elite_ids.tolist()) <= right_ids
    assert rmse(r.prior, RIGHT[None]) < 0.1
    # only the most recent steps that both histories hold are compared
    r3 = mem.query(NS, np.zeros(DK), hist=h_down[-3:])
    assert r3.n_kept == 6 and rmse(r3.prior, LEFT[None]) < 0.1
    # nothing agrees -> no elite, no guidance
    r0 = mem.query(NS, np.zeros(DK), hist=np.tile([0.9, 0.0], (HL, 1)))
    assert r0.empty and r0.reason == "history mismatch" and mem.guidance(r0) is None
    # no executed actions yet: the filter has no evidence and keeps everything
    assert mem.query(NS, np.zeros(DK), hist=np.zeros((0, D))).n_kept == 12
    with pytest.raises(ValueError, match="hist"):
        mem.query(NS, np.zeros(DK), hist=np.zeros((4, D + 1)))


def test_progress_filter_and_calibration_from_time_step():
    rng = np.random.default_rng(3)
    mem = new_mem()
    add_mode(mem, RIGHT, 5, rng, progress=0.1)
    add_mode(mem, LEFT, 5, rng, progress=0.8)
    r = mem.query(NS, np.zeros(DK), progress=0.12)
    assert r.n_kept == 5 and rmse(r.prior, RIGHT[None]) < 0.1
    r = mem.query(NS, np.zeros(DK), progress=0.75)
    assert r.n_kept == 5 and rmse(r.prior, LEFT[None]) < 0.1
    # p_hat from the time step: t / median success length, capped by the neighbours' progress
    mem2 = new_mem()
    for i in range(3):
        k, a = episode(np.random.default_rng(10 + i), T=40)
        mem2.add_episode(NS, k, a, success=True, episode_id=i)
    k, _ = episode(np.random.default_rng(99), T=40)
    r = mem2.query(NS, k[16], t=16)
    assert r.progress_hat == pytest.approx(0.4)
    e = mem2.entries(NS)
    prog = dict(zip(e["ids"].tolist(), e["progress"].tolist()))
    assert all(abs(prog[i] - 0.4) <= 0.15 + 1e-6 for i in r.elite_ids.tolist())
    assert mem2.query(NS, k[0], t=400).progress_hat <= 1.0


def test_tail_continuity_filter():
    rng = np.random.default_rng(4)
    mem = new_mem(mode_selection=False)
    add_mode(mem, RIGHT, 4, rng)
    add_mode(mem, LEFT, 4, rng)
    r = mem.query(NS, np.zeros(DK), prev_tail=np.tile(LEFT, (8, 1)))
    assert r.n_kept == 4 and rmse(r.prior, LEFT[None]) < 0.1


# ---------------------------------------------------------------------------------------------
# confidence and guidance
# ---------------------------------------------------------------------------------------------
def test_empty_memory_has_zero_confidence_and_no_guidance():
    mem = new_mem()
    r = mem.query(NS, np.zeros(DK), hist=np.zeros((3, D)), t=5)
    assert r.confidence == 0.0 and r.empty and r.prior is None
    assert mem.guidance(r) is None
    assert mem.record_use(NS, r) == 0
    # fixed confidence never steers from an empty elite set either
    assert new_mem(fixed_confidence=1.0).guidance(r) is None


def test_confidence_grows_with_agreeing_entries_and_drops_with_disagreement():
    rng = np.random.default_rng(5)
    confs = []
    mem = new_mem()
    for n in (1, 2, 3):
        mem = new_mem()
        add_mode(mem, RIGHT, n, np.random.default_rng(6))
        confs.append(mem.query(NS, np.zeros(DK)).confidence)
    assert confs[0] < confs[1] < confs[2]
    assert mem.guidance(mem.query(NS, np.zeros(DK))) is not None
    one = new_mem()
    add_mode(one, RIGHT, 1, np.random.default_rng(6))
    r1 = one.query(NS, np.zeros(DK))
    g1 = one.guidance(r1)                                  # one success: c <= 1/3, never the full tau_max
    assert r1.confidence <= 1 / 3 and (g1 is None or g1[0] < one.config.max_start_time)
    # disagreement: the other mode takes half the similarity mass
    mixed = new_mem()
    add_mode(mixed, RIGHT, 3, np.random.default_rng(6))
    add_mode(mixed, LEFT, 3, rng)
    c_mixed = mixed.query(NS, np.zeros(DK)).confidence
    assert c_mixed < 0.7 * confs[2]
    # farther queries are less similar -> less confident
    assert mem.query(NS, np.full(DK, 0.7)).confidence < confs[2]


def test_fixed_confidence_flag_and_tau0_formula():
    rng = np.random.default_rng(7)
    mem = new_mem(fixed_confidence=1.0)
    add_mode(mem, RIGHT, 1, rng)
    r = mem.query(NS, np.zeros(DK))
    assert r.confidence == 1.0
    tau0, prior = mem.guidance(r, steps=10)
    assert tau0 == pytest.approx(0.6) and prior.shape == (H, D)
    cfg = MemoryConfig(confidence_floor=0.3, confidence_saturation=0.6, max_start_time=0.6)
    assert tau0_from_confidence(0.29, cfg, 10) == 0.0
    assert tau0_from_confidence(0.45, cfg, 10) == pytest.approx(0.3)
    assert tau0_from_confidence(0.6, cfg, 10) == pytest.approx(0.6)
    assert tau0_from_confidence(1.0, cfg, 10) == pytest.approx(0.6)
    assert tau0_from_confidence(0.45, cfg, 4) == pytest.approx(0.25)  # snapped to the K=4 grid
    assert tau0_from_confidence(0.31, cfg, 10) == 0.0                 # snaps to 0 -> no steering
    # replay ablation: where it would steer, tau0 = 1 (the sampler returns the prior itself)
    rep = new_mem(replay=True, fixed_confidence=1.0)
    add_mode(rep, RIGHT, 1, rng)
    tau0, prior = rep.guidance(rep.query(NS, np.zeros(DK)))
    assert tau0 == 1.0 and rmse(prior, RIGHT[None]) < 0.1


def test_sigma_is_calibrated_on_query_to_memory_distances():
    mem = new_mem(sigma=None)
    pts = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]], np.float32)
    mem.add_entries(NS, pts, np.zeros((4, H, D)), progress=np.zeros(4))
    q = np.array([0, 0, 0, 3], np.float32)                  # distances 3, sqrt(10) x 3
    r = mem.query(NS, q)
    assert r.sigma == pytest.approx(np.sqrt(10.0), rel=1e-5)  # the 3rd-nearest distance
    mem.query(NS, np.zeros(DK))                               # 3rd-nearest distance 1
    mem.query(NS, np.zeros(DK))
    assert mem.stats()[NS]["sigma"] == pytest.approx(1.0)     # running median


# ---------------------------------------------------------------------------------------------
# storage rules
# ---------------------------------------------------------------------------------------------
def test_only_successes_are_stored():
    mem = new_mem()
    k, a = episode(np.random.default_rng(0))
    assert mem.add_episode(NS, k, a, success=False, episode_id=0) == 0
    assert len(mem) == 0 and NS not in mem
    with pytest.raises(TypeError):
        mem.add_episode(NS, k, a)                           # success must be stated
    assert mem.add_episode(NS, k, a, success=True, episode_id=1) == 5
    e = mem.entries(NS)
    assert e["step"].tolist() == [0, 8, 16, 24, 32]
    assert np.allclose(e["progress"], [0, 0.2, 0.4, 0.6, 0.8])
    assert np.allclose(e["chunks"][1], a[8:24])
    assert e["chunk_mask"][4].sum() == 8 and np.allclose(e["chunks"][4, 8:], a[-1])   # padded
    assert e["hist_n"].tolist() == [0, 8, 8, 8, 8] and np.allclose(e["hist"][2], a[8:16])
    assert np.all(e["hist"][0] == 0)


def test_dedup_merges_identical_episode():
    mem = new_mem()
    k, a = episode(np.random.default_rng(1))
    mem.add_episode(NS, k, a, success=True, episode_id=1)
    mem.add_episode(NS, k, a, success=True, episode_id=2)
    s = mem.stats()[NS]
    assert s["entries"] == 5 and s["dedup_merges"] == 5 and s["supports"] == 10 and s["episodes"] == 2
    assert mem.entries(NS)["n_support"].tolist() == [2] * 5
    k2, a2 = episode(np.random.default_rng(2), base=np.full(DK, 5.0))
    mem.add_episode(NS, k2, a2, success=True, episode_id=3)
    assert mem.stats()[NS]["entries"] == 10


def test_capacity_evicts_least_supported_and_oldest():
    mem = new_mem(capacity=10)
    eps = [episode(np.random.default_rng(i), base=np.full(DK, 3.0 * i)) for i in range(4)]
    for i in range(3):
        mem.add_episode(NS, *eps[i], success=True, episode_id=i)
    s = mem.stats()[NS]
    assert s["entries"] == 10 and s["evictions"] == 5
    assert sorted(set(mem.entries(NS)["episode_id"].tolist())) == [1, 2]      # the oldest went
    # support beats recency at a long half-life...
    mem = new_mem(capacity=10, half_life=200.0)
    mem.add_episode(NS, *eps[0], success=True, episode_id=0)
    mem.add_episode(NS, *eps[0], success=True, episode_id=0)                  # n_support 2
    mem.add_episode(NS, *eps[1], success=True, episode_id=1)
    mem.add_episode(NS, *eps[2], success=True, episode_id=2)
    assert sorted(set(mem.entries(NS)["episode_id"].tolist())) == [0, 2]
    assert mem.stats()[NS]["evictions"] == 5
    # ...and ageing beats support at a short one
    mem = new_mem(capacity=10, half_life=0.5)
    mem.add_episode(NS, *eps[0], success=True, episode_id=0)
    mem.add_episode(NS, *eps[0], success=True, episode_id=0)
    mem.add_episode(NS, *eps[1], success=True, episode_id=1)
    mem.add_episode(NS, *eps[2], success=True, episode_id=2)
    assert sorted(set(mem.entries(NS)["episode_id"].tolist())) == [1, 2]
    # the evicted entries are gone from the index too
    r = mem.query(NS, eps[0][0][0])
    assert set(r.elite_ids.tolist()) <= set(mem.entries(NS)["ids"].tolist())


# ---------------------------------------------------------------------------------------------
# failure credit
# ---------------------------------------------------------------------------------------------
def steer(mem, keys, t):
    r = mem.query(NS, keys[t], t=t)
    if mem.guidance(r) is not None:
        mem.record_use(NS, r)
    return r


def test_entries_failing_three_times_are_deleted():
    mem = new_mem(episode_credit=False)        # the per-entry rule alone (spec)
    k, a = episode(np.random.default_rng(0))
    for i in range(3):
        mem.add_episode(NS, k, a, success=True, episode_id=i)              # n_support 3 each
    used = None
    for i in range(3):
        r = steer(mem, k, 0)
        assert not r.empty and mem.guidance(r) is not None
        used = set(r.elite_ids[r.weights >= 0.1].tolist())
        out = mem.end_episode(False)
        assert out["credited"] == len(used)
        if i < 2:
            assert out["deleted"] == 0
    assert out["deleted"] == len(used) and mem.stats()[NS]["deleted_by_credit"] == len(used)
    assert not used & set(mem.entries(NS)["ids"].tolist())
    assert mem.stats()[NS]["clock"] == 6                     # 3 successes added + 3 failures


def test_poisoned_episode_is_removed_and_good_entries_stay():
    good_base, bad_base = np.zeros(DK), np.full(DK, 6.0)
    kg, ag = episode(np.random.default_rng(1), base=good_base, act=(0.5, 0.5))
    kb, ab = episode(np.random.default_rng(2), base=bad_base, act=(-0.5, -0.9))  # falsely "successful"
    mem = new_mem(episode_credit=False)        # the per-entry rule alone (spec)
    for i in range(3):
        mem.add_episode(NS, kg, ag, success=True, episode_id=i)
    for i in range(3):
        mem.add_episode(NS, kb, ab, success=True, episode_id=100 + i)
    bad_ids = set(mem.entries(NS)["ids"][mem.entries(NS)["episode_id"] >= 100].tolist())
    for round_ in range(4):
        for t in (0, 8, 16):                                  # a poisoned episode: steered, fails
            steer(mem, kb, t)
        mem.end_episode(False)
        for t in (0, 8, 16):                                  # a good episode: steered, succeeds
            steer(mem, kg, t)
        mem.end_episode(True)
    e = mem.entries(NS)
    left_bad = bad_ids & set(e["ids"].tolist())
    assert {0, 8, 16}.isdisjoint(set(e["step"][np.isin(e["ids"], list(bad_ids))].tolist()))
    assert len(left_bad) == len(bad_ids) - 3                  # the three that steered are gone
    good = e["episode_id"] < 100
    assert good.sum() == 5 and e["n_used_fail"][good].sum() == 0 and e["n_used"][good].max() == 4
    # a mostly-successful entry survives three failures (3 / 7 <= 0.5)
    mem2 = new_mem(episode_credit=False)
    for i in range(3):
        mem2.add_episode(NS, kg, ag, success=True, episode_id=i)
    for outcome in [True] * 4 + [False] * 3:
        steer(mem2, kg, 0)
        mem2.end_episode(outcome)
    e = mem2.entries(NS)
    assert len(e["ids"]) == 5 and e["n_used"][0] == 7 and e["n_used_fail"][0] == 3


def test_low_confidence_use_is_not_credited():
    mem = new_mem()
    k, a = episode(np.random.default_rng(3))
    mem.add_episode(NS, k, a, success=True, episode_id=0)     # one success, queried from 2 sigma away
    r = mem.query(NS, k[0] + np.array([0, 2.0, 0, 0]), t=0)
    assert not r.empty and mem.guidance(r) is None
    assert mem.record_use(NS, r) == 0
    assert mem.end_episode(False) == {"credited": 0, "deleted": 0}


# ---------------------------------------------------------------------------------------------
# persistence
# ---------------------------------------------------------------------------------------------
def filled(**cfg):
    mem = new_mem(sigma=None, **cfg)
    for i in range(3):
        k, a = episode(np.random.default_rng(20 + i))
        mem.add_episode(NS, k, a, success=True, episode_id=i)
    rng = np.random.default_rng(0)
    add_mode(mem, LEFT, 4, rng, ns=make_namespace("arm3", "reach"), progress=0.0)
    return mem


def same_retrieval(r1, r2):
    assert r1.elite_ids.tolist() == r2.elite_ids.tolist()
    assert np.array_equal(r1.prior, r2.prior) and np.array_equal(r1.weights, r2.weights)
    assert r1.confidence == r2.confidence and r1.sigma == r2.sigma


def test_round_trip_gives_identical_queries(tmp_path):
    mem = filled()
    k, _ = episode(np.random.default_rng(50))
    mem.query(NS, k[8], t=8)
    mem.save(tmp_path / "m")
    back = SuccessMemory.load(tmp_path / "m", encoder_id="enc-v1", normalizer_hash="norm-v1")
    assert back.stats() == mem.stats()
    for t in (0, 8, 24):
        same_retrieval(mem.query(NS, k[t], hist=np.zeros((min(t, 8), D)), t=t),
                       back.query(NS, k[t], hist=np.zeros((min(t, 8), D)), t=t))
    for name in mem.namespaces():
        a, b = mem.entries(name), back.entries(name)
        assert a.keys() == b.keys() and all(np.array_equal(a[c], b[c]) for c in a)
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert meta["schema_version"] == 1 and meta["encoder_id"] == "enc-v1"
    assert meta["config"]["mode_radius"] == 0.5
    # saving again replaces the generation: exactly one entries file per namespace remains
    mem.save(tmp_path / "m")
    files = sorted(p.name for p in (tmp_path / "m").rglob("*.npz"))
    assert len(files) == 2
    assert not list((tmp_path / "m").rglob("*.tmp-*"))


def test_interrupted_save_leaves_the_previous_memory(tmp_path):
    p = tmp_path / "m"
    mem = filled()
    mem.save(p)
    d = sorted(p.rglob("entries-*.npz"))[0].parent
    (d / "entries-ffffffffffffffff.npz").write_bytes(b"half-written new generation")
    (d / ".entries-1.npz.tmp-123").write_bytes(b"junk")
    back = SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1")
    assert back.stats() == mem.stats()
    back.save(p)                                                    # the next commit cleans up
    assert not (d / "entries-ffffffffffffffff.npz").exists()
    assert not (d / ".entries-1.npz.tmp-123").exists()


def test_ivf_namespace_round_trip_uses_index_cache(tmp_path):
    mem = new_mem(ivf_threshold=200, capacity=None)
    rng = np.random.default_rng(0)
    keys = rng.standard_normal((400, DK)).astype(np.float32)
    mem.add_entries(NS, keys, np.tile(RIGHT, (400, H, 1)), progress=np.zeros(400))
    assert mem.stats()[NS]["index"] == "ivf"
    r1 = mem.query(NS, keys[3])
    assert 3 in r1.elite_ids.tolist() or r1.n_retrieved > 0
    mem.save(tmp_path / "m")
    assert list((tmp_path / "m").rglob("index-*.faiss"))
    back = SuccessMemory.load(tmp_path / "m", encoder_id="enc-v1", normalizer_hash="norm-v1")
    same_retrieval(r1, back.query(NS, keys[3]))
    # removal works on IVF (failure credit / eviction)
    back.config.fixed_confidence = 1.0
    for _ in range(3):
        back.record_use(NS, back.query(NS, keys[3]))
        back.end_episode(False)
    assert back.stats()[NS]["deleted_by_credit"] > 0


def test_truncated_and_corrupted_files_are_named(tmp_path):
    p = tmp_path / "m"
    filled().save(p)
    npz = sorted(p.rglob("entries-*.npz"))[0]
    blob = npz.read_bytes()
    npz.write_bytes(blob[: len(blob) // 2])                         # truncated
    with pytest.raises(MemoryFileError) as ei:
        SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1")
    assert npz.name in str(ei.value) and "truncated" in str(ei.value)
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0xFF                                  # same size, one byte flipped
    npz.write_bytes(bytes(flipped))
    with pytest.raises(MemoryFileError) as ei:
        SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1")
    assert npz.name in str(ei.value) and ei.value.path == str(npz)
    with pytest.warns(RuntimeWarning, match=npz.name):
        empty = SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1", on_error="empty")
    assert len(empty) == 0 and empty.key_dim == DK and empty.horizon == H
    npz.unlink()                                                     # missing
    with pytest.raises(MemoryFileError, match="missing"):
        SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1")


def test_corrupted_meta_json_is_named(tmp_path):
    p = tmp_path / "m"
    filled().save(p)
    meta = p / "meta.json"
    meta.write_text(meta.read_text()[:100])
    with pytest.raises(MemoryFileError) as ei:
        SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1")
    assert "meta.json" in str(ei.value)
    with pytest.raises(MemoryFileError):                             # dims unknown: cannot start empty
        SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1", on_error="empty")
    # the folder still holds entries: a broken meta.json is never an empty memory (issue 22)
    with pytest.raises(MemoryFileError, match="refusing to treat it as empty"):
        SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1", on_error="empty",
                           key_dim=DK, horizon=H, action_dim=D)
    # a fresh directory: missing_ok gives an empty memory without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = SuccessMemory.load(tmp_path / "new", encoder_id="e", normalizer_hash="n", missing_ok=True,
                               key_dim=DK, horizon=H, action_dim=D)
    assert len(m) == 0
    with pytest.raises(MemoryFileError, match="missing"):
        SuccessMemory.load(tmp_path / "new", encoder_id="e", normalizer_hash="n")


def test_encoder_or_normalizer_mismatch_is_refused(tmp_path):
    p = tmp_path / "m"
    filled().save(p)
    with pytest.raises(MemoryMismatch, match="encoder"):
        SuccessMemory.load(p, encoder_id="enc-v2", normalizer_hash="norm-v1")
    with pytest.raises(MemoryMismatch, match="normalizer"):
        SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v2", on_error="empty")
    with pytest.raises(MemoryMismatch, match="key_dim"):
        SuccessMemory.load(p, encoder_id="enc-v1", normalizer_hash="norm-v1", key_dim=DK + 1)
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})


def test_no_pickle_in_saved_files(tmp_path):
    p = tmp_path / "m"
    filled().save(p)
    for f in p.rglob("entries-*.npz"):
        with np.load(f, allow_pickle=False) as z:
            assert all(z[k].dtype != object for k in z.files)


# ---------------------------------------------------------------------------------------------
# namespaces
# ---------------------------------------------------------------------------------------------
def test_namespaces_keep_embodiments_apart():
    mem = SuccessMemory(MemoryConfig(sigma=1.0), DK, H, 3, HL, encoder_id="e", normalizer_hash="n")
    ns2, ns3 = make_namespace("pusher", "twogap"), make_namespace("sawyer", "reach")
    rng = np.random.default_rng(0)
    keys = 0.01 * rng.standard_normal((5, DK))
    mem.add_entries(ns2, keys, np.tile([0.5, 0.5], (5, H, 1)), progress=np.zeros(5))
    mem.add_entries(ns3, keys, np.tile([-0.5, 0.1, 0.9], (5, H, 1)), progress=np.zeros(5))
    r2, r3 = mem.query(ns2, np.zeros(DK)), mem.query(ns3, np.zeros(DK))
    assert r2.prior.shape == (H, 2) and r3.prior.shape == (H, 3)
    assert np.allclose(r2.prior, [0.5, 0.5]) and np.allclose(r3.prior, [-0.5, 0.1, 0.9])
    assert mem.query(make_namespace("pusher", "other"), np.zeros(DK)).empty
    with pytest.raises(ValueError, match="one namespace per embodiment"):
        mem.add_entries(ns2, keys, np.zeros((5, H, 3)), progress=np.zeros(5))
    with pytest.raises(ValueError):
        mem.add_entries("x/y", keys, np.zeros((5, H, 4)), progress=np.zeros(5))   # > action_dim
    assert mem.stats()[ns2]["entries"] == 5 and mem.stats()[ns3]["entries"] == 5


def test_cosine_metric():
    mem = new_mem(metric="cosine", sigma=None)
    rng = np.random.default_rng(0)
    base = np.array([1.0, 0.2, 0.0, 0.0])
    add_mode(mem, RIGHT, 5, rng, key=base, key_noise=0.01)
    r = mem.query(NS, 3.0 * base)                                   # magnitude is ignored
    assert r.n_elite == 5 and r.similarities.min() > 0.99 and r.sigma is None
    assert mem.query(NS, np.array([-1.0, 0, 0, 0])).reason == "no candidate above min_similarity"


def test_episode_credit_removes_a_whole_false_success_and_keeps_good_sources():
    """Per entry the evidence is thin (each segment steers once or twice); pooled over the source
    episode, a false success that steers failures loses every segment, including those that never
    steered, while a real success that steered a minority of failures stays whole."""
    kg, ag = episode(np.random.default_rng(1), base=np.zeros(DK), act=(0.5, 0.5))
    kb, ab = episode(np.random.default_rng(2), base=np.full(DK, 6.0), act=(-0.5, -0.9))
    mem = new_mem()
    mem.add_episode(NS, kg, ag, success=True, episode_id=1)
    mem.add_episode(NS, kb, ab, success=True, episode_id=2)           # the false label
    n_bad = int((mem.entries(NS)["episode_id"] == 2).sum())
    n_good = int((mem.entries(NS)["episode_id"] == 1).sum())
    assert n_bad > 3
    outcomes = [(kb, 0, False), (kg, 0, True), (kg, 8, False), (kb, 8, False), (kg, 16, True), (kg, 24, True)]
    deleted = []
    for keys, t, ok in outcomes:
        r = steer(mem, keys, t)
        assert mem.guidance(r) is not None
        deleted.append(mem.end_episode(ok)["deleted"])
    e = mem.entries(NS)
    assert deleted == [0, 0, 0, n_bad, 0, 0]          # gone at its second failure, every segment
    assert not (e["episode_id"] == 2).any()
    assert (e["episode_id"] == 1).sum() == n_good
    assert mem.stats()[NS]["episodes_deleted_by_credit"] == 1
    # the good source failed once in four: kept, and its record survives a save/load round trip
    rec = mem._ns[NS].source_credit[1]
    assert rec[2] == 1 and rec[1] < rec[0]
    with tempfile.TemporaryDirectory() as d:
        mem.save(d)
        back = SuccessMemory.load(d, encoder_id="enc-v1", normalizer_hash="norm-v1")
        assert back._ns[NS].source_credit == mem._ns[NS].source_credit
        assert back.stats()[NS]["episodes_deleted_by_credit"] == 1



@pytest.mark.parametrize("cascade", [0.2, 0.0])
def test_a_false_success_that_steered_another_false_success_goes_with_it(cascade):
    """A faulty detector labels a failure steered by a false success as one more success: the first
    false source is then credited with a success. When the second is judged false, the cascade moves
    that credit to the failure side and the first goes too; without it the first stays."""
    kg, ag = episode(np.random.default_rng(1), base=np.zeros(DK), act=(0.5, 0.5))
    kb, ab = episode(np.random.default_rng(2), base=np.full(DK, 6.0), act=(-0.5, -0.9))
    kb3, ab3 = episode(np.random.default_rng(3), base=np.full(DK, 6.0), act=(-0.4, -0.8))   # not merged
    mem = new_mem(credit_cascade=cascade)
    mem.add_episode(NS, kg, ag, success=True, episode_id=1)           # a real success
    mem.add_episode(NS, kb, ab, success=True, episode_id=2)           # a false one
    for t in (0, 8, 16, 24):                                           # it steers episode 3 ...
        assert mem.guidance(steer(mem, kb, t)) is not None
    mem.end_episode(True)                                              # ... falsely labelled too
    mem.add_episode(NS, kb3, ab3, success=True, episode_id=3)
    assert mem._ns[NS].parents == ({3: {2: pytest.approx(mem._ns[NS].source_credit[2][0])}} if cascade else {})
    with tempfile.TemporaryDirectory() as d:                           # the chain survives a restart
        mem.save(d)
        back = SuccessMemory.load(d, encoder_id="enc-v1", normalizer_hash="norm-v1")
        assert back._ns[NS].parents == mem._ns[NS].parents
    count = {ep: int((mem.entries(NS)["episode_id"] == ep).sum()) for ep in (1, 2, 3)}
    deleted = []
    for _ in range(2):                                                 # both steer two seen failures
        steer(mem, kb, 0)
        deleted.append(mem.end_episode(False)["deleted"])
    left = set(mem.entries(NS)["episode_id"].tolist())
    if cascade:
        assert deleted == [0, count[2] + count[3]] and left == {1}
    else:       # source 2's record is mostly the false success it "steered": it stays
        assert deleted == [0, count[3]] and left == {1, 2}
    assert (mem.entries(NS)["episode_id"] == 1).sum() == count[1]


def two_apart(mem):
    """Two stored successes far apart in key space, ids 0 and 1: their (keys, actions)."""
    ka, aa = episode(np.random.default_rng(0))
    kb, ab = episode(np.random.default_rng(1), base=np.full(DK, 6.0), act=(-0.5, 0.5))
    mem.add_episode(NS, ka, aa, success=True, episode_id=0)
    mem.add_episode(NS, kb, ab, success=True, episode_id=1)
    return (ka, aa), (kb, ab)


def test_lent_episodes_credit_only_the_entries_that_steered_them():
    """Two episodes at once over one memory (a server's connections, a fleet's workers): a failure
    of one credits the entries it used, never those the other used, nor the memory's own episode."""
    mem = new_mem(episode_credit=False, fail_delete_min=1, fail_delete_ratio=0.0)
    (ka, aa), (kb, ab) = two_apart(mem)
    mine, other = {}, {}
    with mem.lend_episode(mine):
        used_a = set(steer(mem, ka, 0).elite_ids.tolist())
    with mem.lend_episode(other):
        used_b = set(steer(mem, kb, 0).elite_ids.tolist())
    assert used_a and used_b and not used_a & used_b
    assert mem.end_episode(False)["credited"] == 0              # the memory's own episode used nothing
    with mem.lend_episode(mine):
        assert mem.end_episode(False)["deleted"] >= 1
    left = set(mem.entries(NS)["ids"].tolist())
    assert not used_a & left and used_b <= left
    with mem.lend_episode(other):
        assert mem.end_episode(True)["deleted"] == 0
    assert used_b <= set(mem.entries(NS)["ids"].tolist())
    assert not mine["ids"] and not other["ids"]                  # each closed episode starts afresh


def test_lent_successes_keep_their_own_parents_when_stored_out_of_order():
    """A fleet's host sees worker A report a success, then worker B, then B's episode stored before
    A's: each stored episode records the sources that steered it (credit_cascade), not the other's."""
    mem = new_mem()
    (ka, aa), (kb, ab) = two_apart(mem)
    a, b = {}, {}
    with mem.lend_episode(a):
        steer(mem, ka, 0)
        mem.end_episode(True)
    with mem.lend_episode(b):
        steer(mem, kb, 0)
        mem.end_episode(True)
        mem.add_episode(NS, kb, ab * 0.5, success=True, episode_id=3)
    with mem.lend_episode(a):
        mem.add_episode(NS, ka, aa * 0.5, success=True, episode_id=2)
    assert set(mem._ns[NS].parents) == {2, 3}
    assert set(mem._ns[NS].parents[2]) == {0} and set(mem._ns[NS].parents[3]) == {1}


def test_a_config_saved_under_the_symbol_names_loads_under_the_new_names():
    """Memories saved before the config names said what they mean carry T_s, delta_a, ... in meta.json."""
    cfg = MemoryConfig.from_dict({"T_s": 0.2, "delta_a": 0.7, "tau_max": 0.5, "unknown_later_field": 1})
    assert (cfg.elite_temperature, cfg.mode_radius, cfg.max_start_time) == (0.2, 0.7, 0.5)
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg and "T_s" not in cfg.to_dict()
