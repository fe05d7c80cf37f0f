"""Every threshold of the success memory in one dataclass, with the reason for each default.

All action quantities (chunks, histories, RMSE thresholds, spreads) are in the embodiment's
NORMALIZED action units (per-channel quantiles q01/q99 -> [-1, 1]); key distances are in the units
of the keys the caller passes (standardized state for ``metric="l2"``).

The algorithm and what each field means are in ARCHITECTURE.md section 5 (the field names say
what they mean; the symbol used there follows in each docstring). "spec" below is the design's
starting value, listed in that section's table; where a default differs, the docstring says why:
mostly what a quick experiment on twogap-push showed ("findings", summarised in
ARCHITECTURE.md section 5.9).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

__all__ = ["MemoryConfig", "known_fields"]

# field names before they said what they mean (memories saved then carry them in meta.json)
LEGACY_NAMES = {"T_s": "elite_temperature", "delta_h": "history_tolerance", "delta_p": "progress_tolerance",
                "delta_c": "continuity_tolerance", "delta_a": "mode_radius", "sigma_a": "chunk_kernel_width",
                "n_min": "min_support", "c_min": "confidence_floor", "c_sat": "confidence_saturation",
                "tau_max": "max_start_time", "s_min": "min_similarity", "s_sat": "similarity_saturation",
                "c_replace": "replace_confidence", "beta": "efficiency_exponent"}


def known_fields(cls, d: dict) -> dict:
    """The entries of ``d`` that are fields of the dataclass ``cls``, legacy names translated."""
    names = {f.name for f in dataclasses.fields(cls)}
    out = {LEGACY_NAMES.get(k, k): v for k, v in d.items()}
    return {k: v for k, v in out.items() if k in names}


@dataclass
class MemoryConfig:
    # ---- retrieval (ARCHITECTURE.md 5.3) -------------------------------------------------------
    k: int = 32
    """Neighbours fetched from FAISS per query (spec)."""
    metric: str = "l2"
    """``"l2"``: IndexFlatL2 on standardized low-dimensional keys (CPU state keys), similarity
    ``exp(-d^2 / (2 sigma^2))``. ``"cosine"``: keys are L2-normalised on insert and query and the
    similarity is the inner product (runtime keys built from pooled VLM features). L2 is the default
    because the CPU-eval key is a standardized state, and cosine ignores its magnitude (ARCHITECTURE.md 5.3)."""
    sigma: Optional[float] = None
    """Fixed similarity scale for ``metric="l2"``; ``None`` calibrates it (next three fields)."""
    sigma_rank: int = 3
    """Calibration: each query contributes its distance to the ``sigma_rank``-th nearest stored key
    and sigma is the running median of those. memory-findings: calibrating on the distances AMONG
    stored keys made sigma too small (start states cluster) and similarities collapsed, so sigma is
    calibrated on query-to-memory distances. Rank 3 (= min_support) rather than 1: exact repeats would
    drive a nearest-neighbour median to 0; the min_support-th neighbour is the distance at which an elite
    set can form, and dedup keeps stored keys distinct."""
    sigma_window: int = 256
    """Number of recent queries (per namespace) in the running median; old queries from when the
    memory was small and far away drop out."""
    sigma_min: float = 1e-3
    """Floor on the calibrated sigma (key units)."""
    min_similarity: Optional[float] = None
    """(s_min) Candidates with similarity below min_similarity are dropped. ``None`` -> 0.05 for ``"l2"`` (i.e.
    d <= 2.45 sigma; the kernel already scales by sigma) and 0.8 for ``"cosine"`` (spec's fixed
    value; the spec's adaptive 5th-percentile rule is not implemented)."""

    # ---- trajectory-level consistency filter (ARCHITECTURE.md 5.4) -----------------------------------------
    history_tolerance: float = 0.25
    """(delta_h) History filter: max decayed RMSE between a candidate's recorded preceding actions and the
    actions executed just now (spec)."""
    hist_decay: float = 0.7
    """Weight 0.7**j for the action j steps back (nearest-sequence style, spec)."""
    progress_tolerance: float = 0.15
    """(delta_p) Progress filter: max |progress - p_hat| (spec)."""
    continuity_tolerance: float = 0.3
    """(delta_c) Continuity with the still-unexecuted tail of the current chunk, if the caller passes one."""
    mode_radius: float = 0.5
    """(delta_a) Mode selection: elites are the kept chunks within mode_radius chunk-RMSE of the densest chunk.
    memory-findings: the spec's 0.3 is tighter than the within-mode spread of 16-step chunks
    (within-mode RMSE 0.36, between modes 0.90 at action noise 0.05), so it split one mode; 0.5."""
    chunk_kernel_width: float = 0.3
    """(sigma_a) Chunk-space kernel width (findings: 0.3; spec: 0.2) for the mode density and the agreement
    penalty exp(-0.5 (spread / chunk_kernel_width)^2), spread = RMS deviation of the elite chunks from the
    prior: a within-mode spread of 0.25 costs a factor 0.71, an averaged two-mode prior (0.8)
    0.03."""
    min_support: int = 3
    """(n_min) Count term of the confidence: c_n = min(1, sum of the elites' n_support / min_support) (spec:
    |E| / min_support; a deduplicated entry counts as the n_support successes it merged, and it weighs
    n_support times in the mode density, the agreement share and the prior weights, exactly as
    if the duplicates had been kept)."""
    p_knn_k: int = 8
    """Progress calibration: once >= p_knn_k neighbours are retrieved, p_hat = min(p_time,
    median(progress of the top p_knn_k) + p_knn_margin) (ARCHITECTURE.md 5.2)."""
    p_knn_margin: float = 0.1

    # ---- elite prior and confidence (ARCHITECTURE.md 5.5) ---------------------------------------------------
    elite_temperature: float = 0.1
    """(T_s) Softmax temperature on similarity for the elite weights. The spec's 0.05 was set for cosine
    similarities (0.8..1); the L2 kernel spreads similarities over (0, 1], so 0.05 would make the
    prior the single nearest chunk. 0.1 keeps several elites in play."""
    efficiency_exponent: float = 1.0
    """(beta) Efficiency exponent: weight *= (T_min / T_episode) ** efficiency_exponent (shorter successes preferred)."""

    # ---- confidence-adaptive guidance (ARCHITECTURE.md 5.6) --------------------------------------------------
    max_start_time: float = 0.6
    """(tau_max) Largest start time of the flow sampler. Findings: 0.4 and 0.6 worked equally, 0.8 was worse
    (too little policy flow left to repair the prior)."""
    confidence_floor: float = 0.1
    """(c_min) Confidence floor: below it ``guidance`` returns None and the policy samples unchanged (spec:
    0.3). Lowered with confidence_saturation below; see there."""
    confidence_saturation: float = 0.4
    """(c_sat) g(c) = clip((c - confidence_floor) / (confidence_saturation - confidence_floor), 0, 1); the spec's ramp is confidence_floor 0.3 to confidence_saturation 1.0.
    memory-findings: a ramp up to 1.0 rarely reached tau0 >= 0.4, and saturating at 0.6 recovered
    most of the gain. On embodia-tiny under blocked-left (replanning after every action) even
    0.3..0.6 steered too little: at an episode's first decision the elites start from other puck
    positions, their 16-step chunks differ (agreement 0.3-0.4) and the confidence sat at 0.2-0.4,
    i.e. tau0 0-0.2, while the first decisions pick the gap. On development streams (seeds
    30000-30199, 2 streams x 100 episodes, second halves) 0.3..0.6 made 76/100 and the
    fixed-confidence ablation 85/100; 0.1..0.4 steers those first decisions at tau0 0.3-0.6 and
    keeps a floor (a lone far elite, confidence < 0.1, still leaves the policy alone). The
    figures on fresh seeds are in docs/benchmarks/sim-memory.md."""

    # ---- upkeep (ARCHITECTURE.md 5.7) ----------------------------------------------------------------------
    stride: Optional[int] = None
    """Segment stride when cutting an episode; ``None`` -> H_exec = horizon // 2 (spec: 8 of 16)."""
    dedup: bool = True
    dedup_key_rms: float = 0.02
    """L2 keys: merge when the key distance / sqrt(key_dim) (RMS per key dimension, standardized
    units) is <= this AND the chunk RMSE <= dedup_chunk_rmse."""
    dedup_cos: float = 0.995
    """Cosine keys: merge when the cosine similarity is >= this (spec) and the chunks match."""
    dedup_chunk_rmse: float = 0.05
    capacity: Optional[int] = 20_000
    """Entries per namespace (spec N_max); ``None`` = unbounded."""
    half_life: float = 200.0
    """Ageing, in episodes of the namespace: eviction drops the lowest
    n_support * 0.5 ** (age / half_life) - fail_penalty * n_used_fail (spec)."""
    fail_penalty: float = 2.0
    credit_min_weight: float = 0.1
    """Failure credit: only elites with weight >= this in a used prior are credited (spec)."""
    fail_delete_min: int = 3
    fail_delete_ratio: float = 0.5
    """Delete an entry when n_used_fail >= fail_delete_min and n_used_fail / n_used > ratio (spec)."""
    episode_credit: bool = True
    """Failure credit pooled over each SOURCE episode as well (extension): a success label belongs
    to an episode, so a false one poisons every segment cut from it, and the evidence against it is
    spread over ~100 entries that are each used a handful of times: per entry it never reaches
    fail_delete_min. Per source episode, the elite weight its entries carried in steered decisions
    is summed over the target episodes that succeeded (w_succ) and failed (w_fail); all its entries
    are deleted once it steered >= episode_fail_min failed episodes and w_fail / (w_succ + w_fail)
    > episode_fail_ratio. `benchmarks/credit_probe.py` (blocked-left, 100 episodes, 10 falsely
    labelled): false successes that never passed a gap carry 0.995-1.0 of their weight in failures;
    real successes 0.19 on average (but up to 1.0 for a few: those get deleted too); near-misses
    that passed the right gap but stopped short of the goal 0.08-0.95.
    docs/benchmarks/sim-memory.md ("Failure credit under false success labels") has what the rule
    buys and costs: with 10% of episodes falsely labelled by a detector that is fixed after
    deployment, it removes 16 of 18 stuck false successes (with credit_cascade) and success
    recovers to the clean-label level; a detector that stays wrong hides most failures from it.
    With clean labels it deletes ~9% of real sources."""
    episode_fail_min: int = 2
    episode_fail_ratio: float = 0.5
    credit_cascade: float = 0.2
    """When episode credit deletes a source episode, its success label is judged false: the sources
    that carried at least this share of the steering weight in THAT episode (recorded when it was
    stored) get the weight they earned there moved from their success side to their failure side,
    and are judged by the same rule, and so on. A false success steers failures that the same faulty
    detector often reports as successes again, each stored as one more false source steered by the
    first; without the cascade that chain is credited as successes. 0 turns it off."""

    # ---- the noise of successes (opt-in) --------------------------------------------------------
    recall_seed: bool = False
    """Episode level: a policy with a noise seed (a VLA's flow sampler) starts each episode of a
    namespace from the seed of a stored success there, in place of the episode's own, so the
    sampler draws the noise that worked before. The seed recalled is the one with the best record
    (successes + 1) / (episodes + 2) among the seeds that have succeeded at least as often as they
    have failed (ties: the latest success); with none, the episode's own seed. Measured on MT50
    under the protocol with the offsets key: +0.027 over the policy alone (paired 95% [+0.014,
    +0.039], six streams), +0.022 over the offsets key alone (docs/benchmarks/metaworld.md, "Seed recall stacked
    on the offsets key"). Off by default: it was measured on one benchmark, and it makes a steered
    episode differ from an unsteered one from its first decision."""

    # ---- index -------------------------------------------------------------------------------
    ivf_threshold: int = 200_000
    """Exact IndexFlat below this many entries in a namespace (0.3-1 ms per query up to ~100k at
    d_k 32 on one thread); above it an IndexIVFFlat (build is minutes faster than HNSW at 1M on one
    core, and it supports removals, which eviction and failure credit need)."""
    ivf_nlist: Optional[int] = None
    """IVF lists; ``None`` -> min(1024, 2 * sqrt(N)) at build time (retrained when N doubles)."""
    ivf_nprobe: int = 32

    # ---- ablations -----------------------------------------------------------------------------
    consistency: bool = True
    """False: skip the history, progress and tail filters (only min_similarity remains)."""
    mode_selection: bool = True
    """False: the elite set is every kept candidate, so the prior may average two modes. With
    consistency=False too this is the spec's "mean over all retrieved" ablation."""
    fixed_confidence: Optional[float] = None
    """Use this confidence whenever the elite set is non-empty (0 when it is empty). 1.0 gives
    tau0 = max_start_time whenever any elite exists: the findings' best arm ("mem-fixed")."""
    replay: bool = False
    """Direct-replay ablation: ``guidance`` returns tau0 = 1.0 with the prior wherever it would
    steer, i.e. the caller executes the prior (action_heads.sample with tau0=1 returns x0 = prior
    untouched, 0 network evaluations). Isolates the value of the policy's refinement."""
    select: int = 0
    """Retrieve-then-select (the spec's ``select-N`` arm, a BID-like competitor to steering): where
    the memory would steer, the policy samples this many chunks from its own noise instead and the
    one nearest the prior (L2, normalized units) is executed; every candidate is the policy's own,
    the memory only chooses. 0: steer."""
    recall_noise: bool = False
    """Retrieve the noise, not the chunk (development arm ``noise-recall``): where the memory would
    steer, the policy samples its whole flow, under the current observation, from the noise that
    produced the best-weighted elite's chunk in its successful episode, in place of its own draw; no
    prior is injected. Seed recall's decision-level, state-matched form: the noise that worked at
    this state, not at this decision's index. The noises live with the steering policy
    (`SteeredPolicy`), not in the memory's files: a reopened memory has none and steers nothing
    this way."""

    def __post_init__(self):
        if self.metric not in ("l2", "cosine"):
            raise ValueError(f"metric must be 'l2' or 'cosine', not {self.metric!r}")
        if self.k < 1 or self.min_support < 1 or self.sigma_rank < 1 or self.p_knn_k < 1:
            raise ValueError("k, min_support, sigma_rank and p_knn_k must be >= 1")
        if not 0.0 <= self.max_start_time <= 1.0:
            raise ValueError("max_start_time must lie in [0, 1]")
        if not 0.0 <= self.confidence_floor < self.confidence_saturation <= 1.0:
            raise ValueError("need 0 <= confidence_floor < confidence_saturation <= 1")
        if self.fixed_confidence is not None and not 0.0 <= self.fixed_confidence <= 1.0:
            raise ValueError("fixed_confidence must lie in [0, 1]")
        if self.sigma is not None and self.sigma <= 0:
            raise ValueError("sigma must be > 0")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError("capacity must be >= 1 or None")
        for name in ("history_tolerance", "progress_tolerance", "continuity_tolerance", "mode_radius", "chunk_kernel_width", "elite_temperature", "half_life",
                     "sigma_min"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.select < 0 or self.select == 1:
            raise ValueError(f"select must be 0 (steer) or the number of chunks to choose from (>= 2), not {self.select}")
        if self.select and self.replay:
            raise ValueError("select and replay are two different uses of the prior: choose one")
        if self.recall_noise and (self.select or self.replay):
            raise ValueError("recall_noise replaces the prior by a stored noise: it combines with neither select nor replay")
        if self.stride is not None and self.stride < 1:
            raise ValueError("stride must be >= 1")

    @property
    def min_similarity_value(self) -> float:
        if self.min_similarity is not None:
            return float(self.min_similarity)
        return 0.05 if self.metric == "l2" else 0.8

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MemoryConfig":
        """Unknown keys (from a newer version) are ignored; missing keys take the defaults; the
        symbol names that memories saved before the rename carry are read as the new names."""
        return cls(**known_fields(cls, d))

    def replace(self, **kw) -> "MemoryConfig":
        return dataclasses.replace(self, **kw)
