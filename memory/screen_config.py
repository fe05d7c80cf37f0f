"""Every threshold of the screen memory in one dataclass, with the reason for each default
(ARCHITECTURE.md section 5.10)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from embodia.memory.config import known_fields


# ------------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------------
@dataclass
class ScreenMemoryConfig:
    """Every threshold of the screen memory, with the reason for its default.

    Similarities are cosines of L2-normalised hashed keys. Measured on gui-sim (settings target,
    layout shift, expert episodes of 60 seeds, page name given, slots abstracted): the same page of
    two instances of one template has cosine 0.65-1.0 (5th percentiles: home 0.84, Settings main
    page 0.88, a category page 0.78, the Messages list 0.67), another page of the same task
    0.31-0.66.
    """

    # ---- key --------------------------------------------------------------------------------
    dim: int = 2048
    """Hashed feature dimensions. A screen has 100-250 distinct tokens; at 2048 a token shares its
    bucket with another one ~10% of the time and signed hashing makes those collisions cancel on
    average. 8 KB per entry."""
    hash_seed: int = 0
    """Salt of the token hash (part of the featurizer id: a memory is only read with its own)."""
    w_instruction: float = 0.5
    """Weight of the instruction block. Within a namespace every entry shares the template, so this
    block only lifts all similarities by the same amount; kept below the screen's weight so that
    the screen decides which step of the task we are at."""
    w_screen: float = 1.0
    """Weight of the visible-elements block (roles, ids, texts, checked/focused states)."""
    w_page: float = 0.5
    """Weight of the page/activity name when the caller knows it (an activity on Android, a window
    title on a desktop): a cheap, reliable separator of screens whose element sets look alike."""

    # ---- retrieval and consistency ---------------------------------------------------------
    k: int = 32
    """Neighbours fetched per query (spec). A vote needs a few; more only adds far ones."""
    min_similarity: float = 0.7
    """Similarity floor: neighbours below it never vote. Above every other-page pair measured
    (max 0.66), below the 5th percentile of same-page pairs except the Messages list (0.67; its
    rows are the instance's conversations)."""
    similarity_saturation: float = 0.85
    """Similarity at which the similarity term of the confidence saturates (c_sim = (s - min_similarity) /
    (similarity_saturation - min_similarity), clipped): another instance of the same page never looks identical (other rows,
    other order, other states; median same-page cosine 0.80-0.92), so demanding s -> 1 would mean
    replay of identical screens only."""
    spread_saturation: bool = True
    """Saturate c_sim at the median cosine among the winner's own stored keys when that is lower
    than ``similarity_saturation``: how alike two instances of a step look depends on the task, not
    on the memory. On MiniWoB++ every instance draws new filler text, distractor buttons and option
    labels, so two instances of click-button's only screen have cosine 0.73-0.86 (median 0.79):
    with the fixed 0.85 the right action won 78-100% of the vote from >= 3 successes and still
    stayed under the replace threshold (c_sim 0.26-0.85; no decision replaced on 9 of the 12 tasks
    of the first run, docs/benchmarks/miniwob.md). gui-sim's same-page pairs (median 0.80-0.92) mostly saturate
    as before (benchmarks/gui_memory.py: the same outcomes to within one episode)."""
    spread_margin: float = 0.05
    """The adaptive saturation never goes below min_similarity + this: a winner whose stored
    instances barely clear the floor still needs its query above the floor by a margin to count fully."""
    elite_temperature: float = 0.05
    """Softmax temperature over similarity in the vote weights (spec value for cosine keys): a
    neighbour 0.05 closer counts e times more."""
    history: str = "prefer"
    """Use of the previous action's canonical form: ``"strict"`` keeps only candidates whose
    previous action matches the one just executed; ``"prefer"`` lets the others vote with weight
    x ``history_miss``; ``"off"`` ignores it. "prefer" because on gui-sim a history mismatch was
    mostly instance content the screen already shows: the category row tapped before a category
    page ("Network" vs "Display") is no slot, so strict matching split 5 agreeing successes into
    1 + 4 and the count term kept the memory silent on exactly the screens it knew (40-episode
    probe: a history factor of 0.8 on the confidence blocked every category-page replacement). A
    weak policy's detours (a wrong tap, then Back) also leave histories no success has; the
    screen key carries the state (checked switches, field contents) that history stands in for."""
    field_state: str = "strict"
    """Use of the screen's form state (`screen_refs.field_state`: each field that holds
    something, and whether that is a slot value or other content, and whether each slot-named
    element is checked): ``"strict"`` keeps only candidates stored on a screen in the same state;
    ``"off"`` ignores it. A form's next step depends on what is filled and chosen already, and one
    token per field in the key moves the cosine by a few hundredths only: on MiniWoB's choose-list
    the list before and after choosing the target differs in the list's value alone, and the
    trained head's memory replayed "click Submit" on the unchosen list (9/16 with memory vs 13/16
    without, docs/benchmarks/miniwob.md). gui-sim's elements carry no value and only the slot's own switch
    counts, so there it only tells "turn on" (switch off) from a switch already on."""
    history_miss: float = 0.25
    """Vote weight of a candidate whose previous action differs (``history="prefer"``): a matching
    candidate outweighs four mismatching ones, so where history does separate two actions on one
    screen, the matching action wins the vote."""
    values: str = "backoff"
    """Use of the instance's slot values: ``"backoff"`` votes among the candidates stored with the
    same slot values as the query when they hold >= ``min_support`` support, else among all (the abstract
    vote); ``"off"`` always votes among all. Slots are abstracted so that one success teaches every
    value where the route is the same ("type {text}"); but some routes depend on the value itself,
    not on the screen: which category of a Settings app holds "Ad tracking" is written on no screen
    before it is opened, so the abstract vote there splits between categories and says nothing.
    Measured (benchmarks/gui_memory.py: embodia-tiny's GUI head, which looks through categories in
    screen order, on held-out settings under a layout shift and a 7-step budget, 5 x 100 paired
    episodes): second-half success 0.66 without memory, 0.84 with backoff, 0.66 with "off" (the
    abstract memory only ever repeats what the head already does right)."""

    progress_tolerance: float = 0.3
    """Progress filter: keep |progress - p_hat| <= progress_tolerance once the namespace holds successes.
    GUI tasks are 1-6 steps long, so progress moves in steps of 0.17-0.5; 0.3 separates the start of
    a task from its end without splitting neighbouring steps."""
    p_knn_k: int = 5
    p_knn_margin: float = 0.2
    """p_hat = min(t / median success length, median progress of the top p_knn_k + margin) (spec
    4.2): after a detour t runs ahead of the task; the neighbours' progress says where we are.
    The neighbours are all those above min_similarity (up to p_knn_k of them), not only those whose
    action applies here: with fewer than p_knn_k of the latter the correction used to be skipped,
    and on MiniWoB++ a head that clicked dead text for two steps had t/T past every stored step
    ("progress mismatch" for the rest of the episode) while its screen was still the first one."""

    # ---- vote and confidence -----------------------------------------------------------------
    min_support: int = 3
    """Count term c_n = min(1, support of the winning action / min_support): one or two successes can be
    luck (or a false label); three agreeing ones are a pattern (spec)."""
    demo_support: int = 3
    """A verified success in which a person took over (a demonstration) counts as this many successes:
    a person showed the way on purpose and a check or the person confirmed it, so one is enough
    for the next run to follow it (min_support: the memory acts on it alone)."""
    confidence_floor: float = 0.3
    """Below this confidence the memory does nothing (spec's fallback floor): the policy runs as if
    there were no memory, and the fusion weight lambda(c) is 0."""
    replace_confidence: float = 0.9
    """At or above it, with the precondition holding and every slot bound, the memory's action is
    executed instead of the policy's (spec's shortcut threshold): it takes a near-unanimous vote
    (share ~0.9+) of >= min_support successes on a screen like this one."""
    lam: float = 2.0
    """Fusion: score(a) = log pi(a) + lambda(c) log(eps + P_mem(a)), lambda(c) = lam * g(c), g =
    clip((c - confidence_floor) / (replace_confidence - confidence_floor), 0, 1) (spec: lambda(c) = 2 g(c), kNN-LM style)."""
    eps: float = 1e-3
    """Floor inside the fusion's log: an action the memory never saw is penalised by at most
    lambda * log(eps) (~ -14 at lambda 2), a strong but finite veto."""
    point_replace: bool = False
    """Whether an action stored as a bare point (no tree element under it, e.g. an icon-only
    button) may replace the policy. False: nothing on the screen verifies a point (its precondition
    is empty) and layouts move, so such actions only inform the vote (re-rank)."""
    point_grid: float = 50.0
    """Bare points are compared on a grid of this many 0..1000 units (5% of the screen)."""

    # ---- storing -----------------------------------------------------------------------------
    erase_loops: bool = True
    """Loop erasure before storing: when a success comes back to a screen it has already been on
    (key cosine >= loop_cos), the steps in between were a detour (a wrong tap undone by Back, a tap
    that changed nothing) and are not stored; progress and history are those of the erased path.
    Without it, a weak policy's successes teach its own mistakes: on gui-sim (settings, a policy
    that taps at random 45% of the time) the vote share of the right action on the home screen sat
    at 0.67-0.96 because detour taps stored with the same screen and history split the vote."""
    loop_cos: float = 0.999
    """Same screen for loop erasure: keys are deterministic, so an identical tree and page give
    cosine 1; 0.999 tolerates float rounding only, never a changed switch or field."""

    # ---- upkeep ------------------------------------------------------------------------------
    dedup: bool = True
    dedup_cos: float = 0.995
    """Merge a new entry into an existing one with the same action and history whose key has
    cosine >= this (spec): the same screen and the same action again adds support, not rows."""
    capacity: Optional[int] = 2000
    """Entries per namespace (one task template on one device profile); None = unbounded."""
    half_life: float = 200.0
    """Ageing, in episodes of the namespace: eviction drops the lowest
    n_support * 0.5 ** (age / half_life) - fail_penalty * n_used_fail (as the robot memory)."""
    fail_penalty: float = 2.0
    fail_delete_min: int = 3
    fail_delete_ratio: float = 0.75
    """Delete an entry when n_used_fail >= fail_delete_min and n_used_fail / n_used > ratio. Higher
    than the robot memory's 0.5: here the memory decides SOME steps and the policy the others, so
    an episode it helped still fails at about the policy's own failure rate (0.3-0.5 for the weak
    policy of the tests) while a falsely labelled entry fails ~always. gui-sim probe (settings,
    layout shift, random taps 45%, 80 episodes): at 0.5 / 2 credit deleted 41 of 150 stored
    entries and second-half success was 31/40; at 0.75 / 3 it deleted 11 and made 34/40, the same
    as with no credit at all."""
    episode_credit: bool = True
    """Failure credit pooled per SOURCE episode (as ``MemoryConfig.episode_credit``): a false success
    label poisons every step cut from that episode; the vote weight its entries carried is summed
    over the episodes they steered, and all its entries go once it steered >= episode_fail_min
    failures with a weighted failure share > episode_fail_ratio (same reasoning as above)."""
    episode_fail_min: int = 3
    episode_fail_ratio: float = 0.75
    ivf_threshold: int = 200_000
    """Exact inner-product search below this many entries per namespace (see ``embodia.memory.index``)."""

    def __post_init__(self):
        if self.dim < 16 or self.k < 1 or self.min_support < 1 or self.p_knn_k < 1 or self.demo_support < 1:
            raise ValueError("need dim >= 16, k >= 1, min_support >= 1, p_knn_k >= 1, demo_support >= 1")
        if not -1.0 <= self.min_similarity < self.similarity_saturation <= 1.0:
            raise ValueError("need -1 <= min_similarity < similarity_saturation <= 1")
        if not 0.0 <= self.confidence_floor < self.replace_confidence <= 1.0:
            raise ValueError("need 0 <= confidence_floor < replace_confidence <= 1")
        if self.history not in ("strict", "prefer", "off"):
            raise ValueError("history must be 'strict', 'prefer' or 'off'")
        if self.field_state not in ("strict", "off"):
            raise ValueError("field_state must be 'strict' or 'off'")
        if self.values not in ("backoff", "off"):
            raise ValueError("values must be 'backoff' or 'off'")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError("capacity must be >= 1 or None")
        for name in ("elite_temperature", "progress_tolerance", "half_life", "eps", "point_grid"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ScreenMemoryConfig":
        return cls(**known_fields(cls, d))

    def fusion_weight(self, confidence: float) -> float:
        """lambda(c) of the re-ranking fusion; 0 below confidence_floor."""
        g = (float(confidence) - self.confidence_floor) / (self.replace_confidence - self.confidence_floor)
        return self.lam * min(1.0, max(0.0, g)) if confidence >= self.confidence_floor else 0.0
