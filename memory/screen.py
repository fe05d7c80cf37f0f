"""Success memory for screens: the discrete (GUI) form of retrieve-then-steer.

A verified successful GUI episode is cut into one entry per step: the KEY is a hashed text-feature
vector of (instruction template, visible UI elements, page name); the VALUE is the action executed
there as an ELEMENT REFERENCE (role, text, resource id, content description) rather than an index
or a pixel, so that it survives layout changes, plus a precondition (the referenced element must be
on the current screen), the progress t/T, the previous action's canonical form and the source
episode. Slot values of the task instance (``{"setting": "Wi-Fi"}``) are replaced by placeholders
(``{setting}``) in the instruction, in element texts and ids, and in typed text, so one success
teaches every instance of its template.

A query keeps the neighbours that are consistent with the current screen and trajectory (their
element is present, their previous action matches, their progress is close), takes a weighted
majority vote on the first action's canonical form, and returns the winner BOUND to the current
tree: the element's current index, its centre in 0..1000, and the placeholders filled from the
current slots. The caller (``embodia.policies.gui.screen_memory``) executes it when the confidence is high,
re-ranks its policy's candidates with the vote otherwise, and reports the verified outcome.

Leaf module: numpy, faiss and the standard library; elements and actions are plain dicts (a UI tree
element as ``embodia.devices.gui`` describes it; an action as ``GuiAction.to_dict()``).

>>> mem = ScreenMemory()
>>> tree = [{"index": 0, "role": "Switch", "text": "Wi-Fi", "id": "setting_wi_fi", "bounds": [0, 100, 540, 200]},
...         {"index": 1, "role": "Switch", "text": "NFC", "id": "setting_nfc", "bounds": [0, 200, 540, 300]}]
>>> for ep in range(3):
...     _ = mem.add_episode("phone/turn-on", [(tree, "Turn on Wi-Fi", {"type": "click", "element": 0})],
...                         success=True, slots={"setting": "Wi-Fi"})
>>> moved = [dict(tree[1], index=0), dict(tree[0], index=1, bounds=[0, 300, 540, 400])]
>>> r = mem.query("phone/turn-on", moved, "Turn on Wi-Fi", [], slots={"setting": "Wi-Fi"}, screen=(540, 960))
>>> r.action, round(r.confidence, 2)
({'type': 'click', 'element': 1, 'point': (500.0, 364.6)}, 1.0)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from embodia.memory.config import known_fields
from embodia.memory.index import KeyIndex
from embodia.memory.persist import MemoryFileError, MemoryMismatch

__all__ = ["ScreenMemory", "ScreenMemoryConfig", "ScreenRetrieval", "Featurizer", "canonical",
           "element_at", "abstract_instruction", "SCREEN_SCHEMA_VERSION", "START"]

SCREEN_SCHEMA_VERSION = 1
START = "<start>"                     # the "previous action" of an episode's first step
_TINY = 1e-12
_STRING_FIELDS = ("text", "app")      # action fields whose value may be a slot reference
_KEEP_FIELDS = ("direction", "keys", "button", "duration_ms", "status")
_POSITIONAL = ("click", "double_click", "right_click", "long_press", "swipe", "drag", "scroll", "type")


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
    4.2): after a detour t runs ahead of the task; the neighbours' progress says where we are."""

    # ---- vote and confidence -----------------------------------------------------------------
    min_support: int = 3
    """Count term c_n = min(1, support of the winning action / min_support): one or two successes can be
    luck (or a false label); three agreeing ones are a pattern (spec)."""
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
        if self.dim < 16 or self.k < 1 or self.min_support < 1 or self.p_knn_k < 1:
            raise ValueError("need dim >= 16, k >= 1, min_support >= 1, p_knn_k >= 1")
        if not -1.0 <= self.min_similarity < self.similarity_saturation <= 1.0:
            raise ValueError("need -1 <= min_similarity < similarity_saturation <= 1")
        if not 0.0 <= self.confidence_floor < self.replace_confidence <= 1.0:
            raise ValueError("need 0 <= confidence_floor < replace_confidence <= 1")
        if self.history not in ("strict", "prefer", "off"):
            raise ValueError("history must be 'strict', 'prefer' or 'off'")
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


# ------------------------------------------------------------------------------------------------
# slots: instance values <-> placeholders
# ------------------------------------------------------------------------------------------------
def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_")


def _slot_items(slots: Optional[dict]) -> List[Tuple[str, str]]:
    """(name, value) pairs, longest value first so "Wi-Fi calling" wins over "Wi-Fi"."""
    items = [(str(k), str(v)) for k, v in (slots or {}).items() if isinstance(v, str) and v.strip()]
    return sorted(items, key=lambda kv: (-len(kv[1]), kv[0]))


def slot_values(slots: Optional[dict]) -> str:
    """The instance's slot values as one comparable string (``""`` without slots).

    >>> slot_values({"setting": "Ad tracking", "app": "Settings"})
    'app=Settings|setting=Ad tracking'
    """
    return "|".join(f"{k}={v}" for k, v in sorted(_slot_items(slots)))


def abstract_instruction(instruction: str, slots: Optional[dict] = None) -> str:
    """The instruction with every slot value replaced by its placeholder (its template).

    >>> abstract_instruction("Send 'On my way' to Alice Baker", {"text": "On my way", "contact": "Alice Baker"})
    "Send '{text}' to {contact}"
    """
    out = instruction or ""
    for name, value in _slot_items(slots):
        out = out.replace(value, "{" + name + "}")
    return out


def _abstract_text(s: str, slots) -> str:
    """A whole text equal to a slot value becomes its placeholder (partial matches stay literal:
    "Wi-Fi" in "Wi-Fi calling" is another label)."""
    for name, value in _slot_items(slots):
        if s == value:
            return "{" + name + "}"
    return s


def _abstract_id(s: str, slots) -> str:
    """Resource ids often embed the label (``setting_wi_fi``): its slug becomes the placeholder."""
    for name, value in _slot_items(slots):
        sl = _slug(value)
        if len(sl) >= 3 and sl in s:
            s = s.replace(sl, "{" + name + "}")
    return s


MAX_VALS = 64       # slot-value sets an entry remembers when identical successes merge into it
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _fill(s: str, slots, slug: bool = False) -> Optional[str]:
    """Placeholders -> the current slot values (slugged inside ids); None if one cannot bind."""
    slots = slots or {}
    missing = [m for m in _PLACEHOLDER.findall(s) if not isinstance(slots.get(m), str)]
    if missing:
        return None
    return _PLACEHOLDER.sub(lambda m: _slug(slots[m.group(1)]) if slug else slots[m.group(1)], s)


# ------------------------------------------------------------------------------------------------
# element references and canonical forms
# ------------------------------------------------------------------------------------------------
def _ref(el: dict, slots=None) -> dict:
    """The element reference of a tree element, slot values abstracted."""
    return {"role": str(el.get("role") or ""), "text": _abstract_text(str(el.get("text") or ""), slots),
            "id": _abstract_id(str(el.get("id") or ""), slots),
            "desc": _abstract_text(str(el.get("desc") or ""), slots)}


def _fill_ref(ref: dict, slots) -> Optional[dict]:
    out = {"role": ref["role"], "text": _fill(ref["text"], slots), "id": _fill(ref["id"], slots, slug=True),
           "desc": _fill(ref["desc"], slots)}
    return None if any(v is None for v in out.values()) else out


def _find(elements: Sequence[dict], ref: dict) -> Optional[dict]:
    """The current element a concrete reference names. By resource id when the reference has one
    and exactly one element carries it (a field's text changes as it is typed into); when several
    do (list rows on Android share ids), the one of them with the same text; else by role + text
    (+ desc). None when nothing matches: the precondition fails."""
    def same_label(el):
        return str(el.get("text") or "") == ref["text"] and str(el.get("desc") or "") == ref["desc"]

    if ref["id"]:
        same = [el for el in elements if str(el.get("id") or "") == ref["id"]]
        if len(same) == 1:
            return same[0]
        for el in same:
            if same_label(el):
                return el
    if ref["text"] or ref["desc"]:
        for el in elements:
            if str(el.get("role") or "") == ref["role"] and same_label(el):
                return el
    return None


def _centre(bounds, screen) -> Tuple[float, float]:
    x0, y0, x1, y1 = (float(b) for b in bounds)
    w, h = float(screen[0]), float(screen[1])
    cx, cy = (x0 + x1) / 2.0, (y0 + y1) / 2.0
    return (round(min(1000.0, max(0.0, cx * 1000.0 / w)), 1), round(min(1000.0, max(0.0, cy * 1000.0 / h)), 1))


def element_at(elements: Sequence[dict], point, screen, *, scroll: bool = False) -> Optional[dict]:
    """The smallest element under a 0..1000 ``point`` on a ``screen`` = (width, height) in the
    pixels of the elements' bounds: a clickable one for taps, any for a scroll. None if none."""
    if point is None or screen is None:
        return None
    x, y = float(point[0]) * float(screen[0]) / 1000.0, float(point[1]) * float(screen[1]) / 1000.0
    best, area = None, math.inf
    for el in elements:
        b = el.get("bounds")
        if b is None or not (scroll or el.get("clickable")):
            continue
        x0, y0, x1, y1 = (float(v) for v in b)
        if x0 <= x < x1 and y0 <= y < y1 and (x1 - x0) * (y1 - y0) < area:
            best, area = el, (x1 - x0) * (y1 - y0)
    return best


def _target(action: dict, elements: Sequence[dict], screen) -> Optional[dict]:
    """The tree element an action acts on: its ``element`` index, else the element under its point."""
    idx = action.get("element")
    if idx is not None:
        for el in elements:
            if el.get("index") == idx:
                return el
    if action.get("type") in _POSITIONAL and action.get("point") is not None:
        return element_at(elements, action["point"], screen, scroll=action.get("type") == "scroll")
    return None


def _canon(atype: str, ref: Optional[dict], fields: dict, point=None, grid: float = 50.0) -> str:
    """One string per distinct action: type, element reference (or a bare point on a grid), and the
    action's own fields. Equal strings = the same action for the vote and the history."""
    parts = [atype]
    if ref is not None:
        parts.append("el=" + "|".join((ref["role"], ref["id"], ref["text"], ref["desc"])))
    elif point is not None:
        parts.append("at=%d,%d" % (int(float(point[0]) // grid), int(float(point[1]) // grid)))
    for k in _STRING_FIELDS + _KEEP_FIELDS:
        v = fields.get(k)
        if v not in (None, (), []):
            parts.append(f"{k}={list(v) if isinstance(v, (list, tuple)) else v}")
    return " ".join(parts)


def _value(action: dict, elements: Sequence[dict], slots, screen) -> dict:
    """The stored value of one executed action: its element reference, its abstracted fields."""
    el = _target(action, elements, screen)
    fields = {k: (_abstract_text(action[k], slots) if isinstance(action.get(k), str) else action[k])
              for k in _STRING_FIELDS if action.get(k) is not None}
    fields.update({k: (list(action[k]) if isinstance(action[k], tuple) else action[k])
                   for k in _KEEP_FIELDS if action.get(k) not in (None, (), [])})
    point = action.get("point")
    return {"type": str(action.get("type")), "ref": _ref(el, slots) if el is not None else None,
            "fields": fields, "point": list(point) if point is not None else None,
            "end": list(action["end"]) if action.get("end") is not None else None,
            "index": int(el["index"]) if el is not None and el.get("index") is not None else None,
            "centre": list(_centre(el["bounds"], screen)) if el is not None and screen is not None
            and el.get("bounds") is not None else None}


def canonical(action: dict, elements: Sequence[dict], slots: Optional[dict] = None,
              screen=None, grid: float = 50.0) -> str:
    """The abstract canonical form of ``action`` (a ``GuiAction.to_dict()``) taken on a screen with
    ``elements``: what the memory stores as an entry's history and compares with ``history``.

    >>> tree = [{"index": 3, "role": "Switch", "text": "NFC", "id": "setting_nfc", "bounds": [0, 0, 9, 9]}]
    >>> canonical({"type": "click", "element": 3}, tree, {"setting": "NFC"})
    'click el=Switch|setting_{setting}|{setting}|'
    """
    v = _value(action, elements, slots, screen)
    return _canon(v["type"], v["ref"], v["fields"], v["point"], grid)


# ------------------------------------------------------------------------------------------------
# the key: a hashing-trick featurizer
# ------------------------------------------------------------------------------------------------
_WORD = re.compile(r"\{\w+\}|[\w'-]+")


@lru_cache(maxsize=1 << 16)
def _bucket(token: str, dim: int, seed: int) -> Tuple[int, float]:
    h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8,
                                       key=seed.to_bytes(8, "little")).digest(), "little")
    return h % dim, (1.0 if (h >> 63) & 1 else -1.0)


def _grams(text: str, prefix: str) -> List[str]:
    words = _WORD.findall(text.lower())
    return [prefix + w for w in words] + [f"{prefix}{a} {b}" for a, b in zip(words, words[1:])]


class Featurizer:
    """Hashing-trick text features: the instruction template's word unigrams and bigrams, each
    visible element's role, id, text and description words (slot values abstracted, sorted), its
    checked/focused state, and the page name, each block L2-normalised, weighted and summed, the
    sum L2-normalised. Deterministic across processes (blake2b, not Python's salted ``hash``).

    >>> f = Featurizer(dim=64)
    >>> a = f.key([{"index": 0, "role": "Button", "text": "OK"}], "Tap OK")
    >>> bool(np.allclose(a, f.key([{"index": 5, "role": "Button", "text": "OK"}], "Tap OK"))), a.shape
    (True, (64,))
    """

    def __init__(self, dim: int = 2048, seed: int = 0, weights=(0.5, 1.0, 0.5)):
        self.dim, self.seed = int(dim), int(seed)
        self.weights = tuple(float(w) for w in weights)

    @property
    def id(self) -> str:
        return f"screen-hash-uni-bi/v1/dim={self.dim}/seed={self.seed}/w={','.join(map(str, self.weights))}"

    def _block(self, tokens: Sequence[str]) -> np.ndarray:
        v = np.zeros(self.dim, np.float64)
        counts: Dict[str, int] = {}
        for t in tokens:
            counts[t] = counts.get(t, 0) + 1
        for t in sorted(counts):
            i, s = _bucket(t, self.dim, self.seed)
            v[i] += s * (1.0 + math.log(counts[t]))          # sublinear tf: ten rows are not ten times one
        n = np.linalg.norm(v)
        return v / n if n > 0 else v

    @staticmethod
    def element_tokens(elements: Sequence[dict], slots=None) -> List[str]:
        toks: List[str] = []
        for el in elements:
            r = _ref(el, slots)
            toks.append("r:" + r["role"])
            if r["id"]:
                toks.append("d:" + r["id"])
                toks.append("dp:" + r["id"].split("_")[0])
            toks += _grams(r["text"], "t:") + _grams(r["desc"], "c:")
            toks.append("e:" + r["role"] + "|" + r["text"].lower())
            for state in ("checked", "focused"):
                if el.get(state):
                    toks.append(f"s:{state}:{r['id'] or r['text']}")
        return sorted(toks)

    def key(self, elements: Sequence[dict], instruction: str, slots: Optional[dict] = None,
            page: Optional[str] = None) -> np.ndarray:
        wi, ws, wp = self.weights
        v = wi * self._block(_grams(abstract_instruction(instruction, slots), "i:"))
        v += ws * self._block(self.element_tokens(elements or [], slots))
        if page:
            v += wp * self._block(["p:" + str(page).lower()])
        n = np.linalg.norm(v)
        return (v / n if n > 0 else v).astype(np.float32)


# ------------------------------------------------------------------------------------------------
# retrieval result
# ------------------------------------------------------------------------------------------------
@dataclass
class ScreenRetrieval:
    """Result of ``ScreenMemory.query``.

    ``action`` is the winning action bound to the current tree (a dict for ``GuiAction.from_dict``:
    ``element`` = its current index, ``point`` = its centre in 0..1000 when the screen size was
    given, placeholders filled), or None. ``votes`` maps each surviving action's resolved canonical
    form to its vote share (P_mem). ``moved`` says whether the bound element sits at another index
    or position than where the winning entry was stored."""
    namespace: str
    action: Optional[dict] = None
    canonical: Optional[str] = None            # the winner's resolved canonical form
    confidence: float = 0.0
    precondition: bool = False                 # the winner's element is on screen and its slots bind
    positional: bool = True                    # the winner is anchored by an element (False: bare point)
    votes: Dict[str, float] = field(default_factory=dict)
    elite_ids: List[int] = field(default_factory=list)      # entries that voted for the winner
    elite_weights: List[float] = field(default_factory=list)
    elite_episodes: List[int] = field(default_factory=list)
    components: Dict[str, float] = field(default_factory=dict)
    n_retrieved: int = 0
    n_candidates: int = 0                      # ... with similarity >= min_similarity
    n_kept: int = 0                            # ... that pass the consistency filter
    history_matched: Optional[bool] = None
    values_matched: bool = False               # the vote was among entries with the query's slot values
    key: Optional[np.ndarray] = None           # the query's key (None: the namespace was empty)
    top_similarity: Optional[float] = None     # the nearest stored key's similarity to it
    progress_hat: Optional[float] = None
    moved: Optional[bool] = None
    stored_at: Optional[dict] = None           # {"index", "centre"} of the winner when it was stored
    reason: str = "ok"
    timing_ms: float = 0.0

    @property
    def empty(self) -> bool:
        return self.action is None

    def prob(self, canonical_form: str) -> float:
        """P_mem of an action given by its resolved canonical form (0 when no entry voted for it)."""
        return float(self.votes.get(canonical_form, 0.0))


# ------------------------------------------------------------------------------------------------
# storage
# ------------------------------------------------------------------------------------------------
_NUM = {"ids": np.int64, "progress": np.float32, "episode_id": np.int64, "step": np.int32,
        "ep_len": np.int32, "created_clock": np.int64, "last_used_clock": np.int64,
        "n_support": np.int32, "n_used": np.int32, "n_used_fail": np.int32}
_NS_STATE = ("clock", "episodes", "merges", "evictions", "deleted_credit", "deleted_episodes",
             "queries", "next_id")


class _Space:
    """One namespace: keys [n, dim], numeric columns, JSON-able values, a FAISS inner-product index.
    Ids only grow and rows stay sorted by id."""

    def __init__(self, name: str, cfg: ScreenMemoryConfig):
        self.name = name
        self._keys = np.zeros((0, cfg.dim), np.float32)       # capacity-doubling buffer
        self.num = {k: np.zeros(0, dt) for k, dt in _NUM.items()}
        self.values: List[dict] = []
        self.index = KeyIndex(cfg.dim, "cosine", cfg.ivf_threshold)
        self.success_lengths: List[int] = []
        self.source_credit: Dict[int, List[float]] = {}       # source episode -> [w_succ, w_fail, n_fail]
        for k in _NS_STATE:
            setattr(self, k, 0)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def keys(self) -> np.ndarray:
        return self._keys[: self.n]

    def set_keys(self, keys: np.ndarray) -> None:
        self._keys = np.ascontiguousarray(keys, np.float32)

    def rows(self, ids) -> np.ndarray:
        """Rows of entry ids (-1 for ids that are gone)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        all_ids = self.num["ids"]
        if self.n == 0:
            return np.full(ids.shape, -1, np.int64)
        r = np.minimum(np.searchsorted(all_ids, ids), self.n - 1)
        return np.where(all_ids[r] == ids, r, -1)

    def append(self, key: np.ndarray, value: dict, num: dict) -> None:
        i = self.next_id
        self.next_id += 1
        n = self.n
        if n >= self._keys.shape[0]:
            buf = np.zeros((max(64, 2 * n), self._keys.shape[1]), np.float32)
            buf[:n] = self._keys[:n]
            self._keys = buf
        self._keys[n] = key
        for k, dt in _NUM.items():
            self.num[k] = np.append(self.num[k], np.asarray(i if k == "ids" else num[k], dt))
        self.values.append(value)
        if not self.index.maybe_rebuild(self.keys, self.num["ids"]):
            self.index.add(key[None], np.asarray([i], np.int64))

    def delete(self, rows) -> int:
        rows = np.unique(np.asarray(list(rows), np.int64))
        if rows.size == 0:
            return 0
        self.index.remove(self.num["ids"][rows])
        keep = np.ones(self.n, bool)
        keep[rows] = False
        self._keys = np.ascontiguousarray(self.keys[keep])
        self.num = {k: v[keep] for k, v in self.num.items()}
        self.values = [v for v, ok in zip(self.values, keep) if ok]
        self.index.maybe_rebuild(self.keys, self.num["ids"])
        return int(rows.size)


# ------------------------------------------------------------------------------------------------
# the memory
# ------------------------------------------------------------------------------------------------
class ScreenMemory:
    """Success memory for GUI screens, one FAISS inner-product index per namespace (device profile
    and task, e.g. ``"gui-sim:phone/turn-on"``). Not thread-safe: one per control loop."""

    def __init__(self, config: Optional[ScreenMemoryConfig] = None):
        self.config = config if config is not None else ScreenMemoryConfig()
        c = self.config
        self.featurizer = Featurizer(c.dim, c.hash_seed, (c.w_instruction, c.w_screen, c.w_page))
        self._ns: Dict[str, _Space] = {}
        self._uses: Dict[str, Dict[int, float]] = {}       # namespace -> entry id -> vote weight
        self.next_episode = 0

    # -- introspection ---------------------------------------------------------------------------
    def namespaces(self) -> List[str]:
        return sorted(self._ns)

    def __len__(self) -> int:
        return sum(s.n for s in self._ns.values())

    def __contains__(self, namespace: str) -> bool:
        return namespace in self._ns

    def size(self, namespace: str) -> int:
        s = self._ns.get(namespace)
        return 0 if s is None else s.n

    def entries(self, namespace: str) -> List[dict]:
        """Copies of a namespace's entries: the value plus the numeric columns, one dict each."""
        s = self._ns.get(namespace)
        if s is None:
            return []
        return [{**json.loads(json.dumps(v)), **{k: s.num[k][r].item() for k in _NUM}}
                for r, v in enumerate(s.values)]

    def stats(self) -> Dict[str, dict]:
        return {name: {"entries": s.n, "supports": int(s.num["n_support"].sum()),
                       **{k: getattr(s, k) for k in _NS_STATE if k != "next_id"},
                       "median_success_len": float(np.median(s.success_lengths)) if s.success_lengths else None}
                for name, s in sorted(self._ns.items())}

    def key(self, elements, instruction: str, slots=None, page=None) -> np.ndarray:
        return self.featurizer.key(elements, instruction, slots, page)

    # -- insertion -------------------------------------------------------------------------------
    def _space(self, namespace: str) -> _Space:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace must be a non-empty string")
        s = self._ns.get(namespace)
        if s is None:
            s = self._ns[namespace] = _Space(namespace, self.config)
        return s

    @staticmethod
    def _step(step) -> Tuple[list, str, dict, Optional[tuple], Optional[str]]:
        """A step as (elements, instruction, action) or a dict with those keys plus optional
        ``screen`` (width, height of the bounds' pixels) and ``page``."""
        if isinstance(step, dict):
            return (step["elements"], step["instruction"], step["action"], step.get("screen"),
                    step.get("page"))
        elements, instruction, action = step[:3]
        return elements, instruction, action, None, None

    def add_episode(self, namespace: str, steps, success: bool, episode_id: Optional[int] = None,
                    slots: Optional[dict] = None) -> int:
        """Store a verified SUCCESSFUL episode, one entry per step; ``success=False`` stores nothing
        (returns 0), so the caller may call it after every episode. ``steps``: a list of (UI tree
        elements, instruction, action dict) or of dicts with keys elements, instruction, action and
        optional screen (width, height) and page. ``episode_id`` None: a fresh one. Returns the
        number of steps stored or merged into identical entries (after loop erasure)."""
        if not success or not steps:
            return 0
        if episode_id is None:
            episode_id = self.next_episode
        self.next_episode = max(self.next_episode, int(episode_id) + 1)
        cfg = self.config
        s = self._space(namespace)
        parsed = [self._step(raw) for raw in steps]
        for t, (_, _, action, _, _) in enumerate(parsed):
            if not isinstance(action, dict) or "type" not in action:
                raise ValueError(f"step {t}: the action must be a dict with a 'type', got {action!r}")
        keys = [self.key(el, ins, slots, page) for el, ins, _, _, page in parsed]
        path = self._erase_loops(keys) if cfg.erase_loops else list(range(len(parsed)))
        T = len(path)
        s.clock += 1
        s.episodes += 1
        s.success_lengths = (s.success_lengths + [T])[-1000:]
        prev = START
        for t, i in enumerate(path):
            elements, _, action, screen, _ = parsed[i]
            key = keys[i]
            value = _value(action, elements, slots, screen)
            value["canon"] = _canon(value["type"], value["ref"], value["fields"], value["point"], cfg.point_grid)
            value["hist"] = prev
            value["vals"] = [slot_values(slots)]         # the slot values it was stored with
            prev = value["canon"]
            num = {"progress": t / T, "episode_id": int(episode_id), "step": i, "ep_len": T,
                   "created_clock": s.clock, "last_used_clock": -1, "n_support": 1, "n_used": 0,
                   "n_used_fail": 0}
            r = self._dedup_row(s, key, value) if cfg.dedup else -1
            if r >= 0:
                s.num["n_support"][r] += 1
                merged = s.values[r].setdefault("vals", [])
                if value["vals"][0] not in merged and len(merged) < MAX_VALS:
                    merged.append(value["vals"][0])
                s.num["created_clock"][r] = s.clock        # refresh: ageing restarts
                s.num["ep_len"][r] = min(int(s.num["ep_len"][r]), T)
                s.merges += 1
            else:
                s.append(key, value, num)
        self._enforce_capacity(s)
        return T

    def _erase_loops(self, keys: List[np.ndarray]) -> List[int]:
        """Indices of the steps left after removing every return to an earlier screen."""
        K = np.stack(keys)
        S = K @ K.T
        path, i = [], 0
        while i < len(keys):
            again = np.flatnonzero(S[i, i + 1:] >= self.config.loop_cos)
            if again.size:
                i += 1 + int(again[-1])        # continue from the last visit of this screen
                continue
            path.append(i)
            i += 1
        return path

    def _dedup_row(self, s: _Space, key: np.ndarray, value: dict) -> int:
        if s.n == 0:
            return -1
        score, ids = s.index.search(key[None], min(8, s.n))
        for sc, r in zip(score[0], s.rows(ids[0])):
            if r >= 0 and sc >= self.config.dedup_cos and s.values[r]["canon"] == value["canon"] \
                    and s.values[r]["hist"] == value["hist"]:
                return r
        return -1

    def _enforce_capacity(self, s: _Space) -> int:
        cap = self.config.capacity
        if cap is None or s.n <= cap:
            return 0
        age = (s.clock - s.num["created_clock"]).astype(np.float64)
        score = s.num["n_support"] * 0.5 ** (age / self.config.half_life) - \
            self.config.fail_penalty * s.num["n_used_fail"]
        order = np.lexsort((s.num["ids"], score))            # lowest score first, then oldest
        n = s.delete(order[: s.n - cap])
        s.evictions += n
        return n

    # -- retrieval -------------------------------------------------------------------------------
    def query(self, namespace: str, screen_elements, instruction: str, history=None, *,
              slots: Optional[dict] = None, screen=None, t: Optional[int] = None,
              page: Optional[str] = None) -> ScreenRetrieval:
        """Retrieve, filter, vote and bind.

        ``history``: abstract canonical forms (``canonical(...)``) of the actions executed so far
        this episode, most recent last; ``[]`` at the first step; None skips the history filter.
        ``screen``: (width, height) in the pixels of the elements' bounds, to give the bound action
        a point. ``t``: steps executed so far (progress filter). ``page``: the page/activity name.
        """
        t0 = time.perf_counter()
        cfg = self.config
        out = ScreenRetrieval(namespace)

        def done(reason: str) -> ScreenRetrieval:
            out.reason = reason
            out.timing_ms = (time.perf_counter() - t0) * 1e3
            return out

        s = self._ns.get(namespace)
        if s is None or s.n == 0:
            return done("empty namespace")
        s.queries += 1
        elements = list(screen_elements or [])
        q = out.key = self.key(elements, instruction, slots, page)
        score, ids = s.index.search(q[None], min(cfg.k, s.n))
        cand = [(int(r), float(sc)) for sc, r in zip(score[0], s.rows(ids[0])) if r >= 0]
        out.n_retrieved = len(cand)
        out.top_similarity = max((sc for _, sc in cand), default=None)
        cand = [(r, sc) for r, sc in cand if sc >= cfg.min_similarity]
        out.n_candidates = len(cand)
        if not cand:
            return done("no neighbour above min_similarity")
        # consistency 1: the precondition (the element is on this screen, every slot binds)
        bound = []
        for r, sc in cand:
            b = self._bind(s.values[r], elements, slots, screen)
            if b is not None:
                bound.append((r, sc, b))
        if not bound:
            return done("no precondition holds")
        # consistency 2: progress
        if t is not None and s.success_lengths:
            p_hat = min(1.0, float(t) / float(np.median(s.success_lengths)))
            if len(bound) >= cfg.p_knn_k:
                top = sorted(bound, key=lambda x: -x[1])[: cfg.p_knn_k]
                p_hat = min(p_hat, float(np.median([s.num["progress"][r] for r, _, _ in top])) + cfg.p_knn_margin)
            out.progress_hat = p_hat
            bound = [x for x in bound if abs(float(s.num["progress"][x[0]]) - p_hat) <= cfg.progress_tolerance]
            if not bound:
                return done("progress mismatch")
        # consistency 3: history (a filter when strict, a vote weight when preferred)
        hist_w = np.ones(len(bound))
        if history is not None and cfg.history != "off":
            prev = history[-1] if len(history) else START
            match = np.array([s.values[x[0]]["hist"] == prev for x in bound])
            if cfg.history == "strict":
                bound = [x for x, m in zip(bound, match) if m]
                hist_w = np.ones(len(bound))
                if not bound:
                    return done("history mismatch")
            else:
                hist_w = np.where(match, 1.0, cfg.history_miss)
        # the instance's own slot values: vote among their candidates when they are enough
        if cfg.values == "backoff" and slots:
            vals = slot_values(slots)
            same = [i for i, x in enumerate(bound) if vals in s.values[x[0]].get("vals", ())]
            if same and sum(int(s.num["n_support"][bound[i][0]]) for i in same) >= cfg.min_support:
                bound, hist_w = [bound[i] for i in same], hist_w[same]
                out.values_matched = True
        out.n_kept = len(bound)
        # weighted majority vote on the resolved canonical form
        sims = np.array([x[1] for x in bound])
        sup = np.array([s.num["n_support"][x[0]] for x in bound], np.float64)
        nu = np.array([s.num["n_used"][x[0]] for x in bound], np.float64)
        nf = np.array([s.num["n_used_fail"][x[0]] for x in bound], np.float64)
        w = np.exp((sims - sims.max()) / cfg.elite_temperature) * sup * (1.0 - nf / (nu + 2.0)) * hist_w
        if not np.all(np.isfinite(w)) or w.sum() <= 0:
            w = np.ones_like(sims)
        tally: Dict[str, float] = {}
        for (_, _, b), wi in zip(bound, w):
            tally[b["canon"]] = tally.get(b["canon"], 0.0) + float(wi)
        total = sum(tally.values())
        out.votes = {c: v / total for c, v in sorted(tally.items(), key=lambda kv: -kv[1])}
        win = next(iter(out.votes))
        sel = [i for i, x in enumerate(bound) if x[2]["canon"] == win]
        ws = w[sel]
        best = sel[int(np.argmax(ws))]
        r_best, _, b_best = bound[best]
        share = out.votes[win]
        c_sim = float(np.clip(((ws * sims[sel]).sum() / ws.sum() - cfg.min_similarity) / (cfg.similarity_saturation - cfg.min_similarity), 0, 1))
        c_n = min(1.0, float(sup[sel].sum()) / cfg.min_support)
        out.confidence = float(min(1.0, max(0.0, share * c_sim * c_n)))
        out.components = {"share": float(share), "c_sim": c_sim, "c_n": c_n,
                          "similarity": float((ws * sims[sel]).sum() / ws.sum())}
        if history is not None and cfg.history != "off":
            out.history_matched = bool((hist_w[sel] == 1.0).any())
        out.action, out.canonical = b_best["action"], win
        out.precondition = True
        out.positional = b_best["anchored"]
        out.elite_ids = [int(s.num["ids"][bound[i][0]]) for i in sel]
        out.elite_weights = [float(x) for x in ws / ws.sum()]
        out.elite_episodes = [int(s.num["episode_id"][bound[i][0]]) for i in sel]
        v = s.values[r_best]
        out.stored_at = {"index": v.get("index"), "centre": v.get("centre")}
        if b_best["anchored"]:
            moved = v.get("index") != b_best["action"].get("element")
            if v.get("centre") is not None and b_best["action"].get("point") is not None:
                moved = moved or max(abs(a - b) for a, b in zip(v["centre"], b_best["action"]["point"])) > 1.0
            out.moved = bool(moved)
        return done("ok")

    def _bind(self, value: dict, elements, slots, screen) -> Optional[dict]:
        """The stored action bound to the current tree, or None when its precondition fails: the
        referenced element is absent, or a placeholder has no current slot value."""
        fields = {}
        for k, v in value["fields"].items():
            if k in _STRING_FIELDS and isinstance(v, str):
                v = _fill(v, slots)
                if v is None:
                    return None
            fields[k] = tuple(v) if isinstance(v, list) else v
        act = {"type": value["type"], **fields}
        ref = None
        if value["ref"] is not None:
            want = _fill_ref(value["ref"], slots)
            el = _find(elements, want) if want is not None else None
            if el is None:
                return None
            ref = _ref(el)                    # the element found: what a policy's action on it resolves to
            act["element"] = int(el["index"])
            if screen is not None and el.get("bounds") is not None:
                act["point"] = _centre(el["bounds"], screen)
                if value.get("end") is not None and value.get("point") is not None:
                    dx, dy = (act["point"][i] - value["point"][i] for i in (0, 1))
                    act["end"] = (min(1000.0, max(0.0, value["end"][0] + dx)),
                                  min(1000.0, max(0.0, value["end"][1] + dy)))
        elif value.get("point") is not None:
            act["point"] = tuple(value["point"])
            if value.get("end") is not None:
                act["end"] = tuple(value["end"])
        anchored = value["ref"] is not None or value["type"] not in _POSITIONAL
        return {"action": act, "anchored": anchored,
                "canon": _canon(value["type"], ref, fields, value.get("point"), self.config.point_grid)}

    def resolve(self, action: dict, elements, screen=None) -> str:
        """The resolved canonical form of a concrete action on the current screen (no placeholders:
        the action names real text): look it up in ``ScreenRetrieval.votes`` (``prob``) to fuse a
        policy's candidates with the memory."""
        v = _value(action, elements, None, screen)
        fields = {k: (tuple(x) if isinstance(x, list) else x) for k, x in v["fields"].items()}
        return _canon(v["type"], v["ref"], fields, v["point"], self.config.point_grid)

    # -- failure credit --------------------------------------------------------------------------
    def record_use(self, namespace: str, retrieval: ScreenRetrieval) -> int:
        """Note that the entries that voted for ``retrieval``'s winner decided an executed action of
        the current episode; ``end_episode`` credits them with its outcome. Returns entries noted."""
        if retrieval is None or retrieval.empty:
            return 0
        if retrieval.namespace != namespace:
            raise ValueError(f"retrieval is from {retrieval.namespace!r}, not {namespace!r}")
        used = self._uses.setdefault(namespace, {})
        for i, w in zip(retrieval.elite_ids, retrieval.elite_weights):
            used[i] = used.get(i, 0.0) + w
        return len(retrieval.elite_ids)

    def end_episode(self, success: bool, namespace: Optional[str] = None) -> Dict[str, int]:
        """Close the episode: the entries noted by ``record_use`` get n_used += 1 (and n_used_fail
        on failure); an entry that keeps failing is deleted, and so is every entry of a source
        episode whose entries keep steering failures (``episode_credit``). A failure ticks the
        ageing clock of the namespaces involved. Returns {"credited", "deleted"}."""
        cfg = self.config
        names = set(self._uses) | ({namespace} if namespace else set())
        credited = deleted = 0
        for name in sorted(names):
            s = self._ns.get(name)
            if s is None:
                continue
            if not success:
                s.clock += 1
            used = self._uses.get(name, {})
            ids = np.array(sorted(used), np.int64)
            rows = s.rows(ids)
            sources: Dict[int, float] = {}
            for i, r in zip(ids.tolist(), rows.tolist()):
                if r >= 0:
                    ep = int(s.num["episode_id"][r])
                    sources[ep] = sources.get(ep, 0.0) + used[i]
            rows = rows[rows >= 0]
            if rows.size:
                s.num["n_used"][rows] += 1
                s.num["last_used_clock"][rows] = s.clock
                credited += int(rows.size)
            bad_rows: List[int] = []
            if not success and rows.size:
                s.num["n_used_fail"][rows] += 1
                nf, nu = s.num["n_used_fail"][rows], s.num["n_used"][rows]
                bad_rows += rows[(nf >= cfg.fail_delete_min) & (nf > cfg.fail_delete_ratio * nu)].tolist()
            bad_eps = []
            if cfg.episode_credit:
                for ep, w in sources.items():
                    rec = s.source_credit.setdefault(ep, [0.0, 0.0, 0])
                    rec[0 if success else 1] += w
                    if not success:
                        rec[2] += 1
                        if rec[2] >= cfg.episode_fail_min and rec[1] > cfg.episode_fail_ratio * (rec[0] + rec[1]):
                            bad_eps.append(ep)
            if bad_eps:
                bad_rows += np.flatnonzero(np.isin(s.num["episode_id"], bad_eps)).tolist()
                s.deleted_episodes += len(bad_eps)
                for ep in bad_eps:
                    s.source_credit.pop(ep, None)
            n = s.delete(bad_rows)
            s.deleted_credit += n
            deleted += n
        self._uses = {}
        return {"credited": credited, "deleted": deleted}

    def drop_namespace(self, namespace: str) -> bool:
        return self._ns.pop(namespace, None) is not None

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path) -> Path:
        """Write to directory ``path`` atomically: per namespace ``entries-<gen>.npz`` (keys and
        numeric columns) and ``values-<gen>.json``, then ``meta.json`` (schema, featurizer id,
        config, file sizes and sha256) by atomic rename: the commit point. Older generations are
        removed afterwards; a crash leaves the old memory or the new one, never a mix."""
        from embodia.memory.persist import _fsync_dir, _ns_dirname, sha256_file, write_atomic
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        gen = f"{time.time_ns():x}"
        recs = []
        for name in self.namespaces():
            s = self._ns[name]
            d = path / "ns" / _ns_dirname(name)
            d.mkdir(parents=True, exist_ok=True)
            arrays = {"keys": s.keys, **{f"col_{k}": v for k, v in s.num.items()},
                      "state": np.array([getattr(s, k) for k in _NS_STATE], np.int64),
                      "success_lengths": np.asarray(s.success_lengths, np.int64),
                      "source_credit": np.asarray([[ep, *v] for ep, v in sorted(s.source_credit.items())],
                                                  np.float64).reshape(-1, 4)}
            f_np, f_js = d / f"entries-{gen}.npz", d / f"values-{gen}.json"
            write_atomic(f_np, lambda f: np.savez(f, **arrays))
            text = json.dumps({"name": name, "values": s.values}, sort_keys=True).encode("utf-8")
            write_atomic(f_js, lambda f: f.write(text))
            _fsync_dir(d)
            recs.append({"name": name, "dir": f"ns/{d.name}", "n": s.n,
                         "files": {fn.name: {"bytes": fn.stat().st_size, "sha256": sha256_file(fn)}
                                   for fn in (f_np, f_js)},
                         "entries": f_np.name, "values": f_js.name})
        meta = {"format": "embodia.screen_memory", "schema_version": SCREEN_SCHEMA_VERSION,
                "featurizer": self.featurizer.id, "config": self.config.to_dict(), "generation": gen,
                "next_episode": self.next_episode, "saved_at": time.time(), "namespaces": recs}
        text = json.dumps(meta, indent=1, sort_keys=True).encode("utf-8")
        write_atomic(path / "meta.json", lambda f: f.write(text))
        _fsync_dir(path)
        keep = {(r["dir"], f) for r in recs for f in r["files"]}
        root = path / "ns"
        for d in (root.iterdir() if root.is_dir() else ()):
            if not d.is_dir():
                continue
            for f in d.iterdir():
                ours = re.fullmatch(r"(entries-[0-9a-f]+\.npz|values-[0-9a-f]+\.json)", f.name)
                if ours and (f"ns/{d.name}", f.name) not in keep:
                    f.unlink(missing_ok=True)
            if not any(d.iterdir()):
                d.rmdir()
        return path

    @classmethod
    def load(cls, path, *, config: Optional[ScreenMemoryConfig] = None,
             missing_ok: bool = False) -> "ScreenMemory":
        """Load a memory written by ``save``. A missing/corrupted/truncated file or another schema:
        ``MemoryFileError`` naming the file (``missing_ok``: no meta.json -> an empty memory). A
        memory keyed by another featurizer (``config`` changing dim, seed or block weights):
        ``MemoryMismatch``. No pickle: ``np.load(allow_pickle=False)`` and JSON."""
        from embodia.memory.persist import sha256_file
        path = Path(path)
        mp = path / "meta.json"
        if missing_ok and not mp.exists():
            return cls(config)
        try:
            meta = json.loads(mp.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise MemoryFileError(mp, "missing (no screen memory saved here)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise MemoryFileError(mp, f"unreadable or corrupted ({e})") from e
        if not isinstance(meta, dict) or meta.get("format") != "embodia.screen_memory":
            raise MemoryFileError(mp, "not a screen memory")
        if meta.get("schema_version") != SCREEN_SCHEMA_VERSION:
            raise MemoryFileError(mp, f"unsupported schema_version {meta.get('schema_version')!r} "
                                      f"(this code reads {SCREEN_SCHEMA_VERSION})")
        try:
            cfg = config if config is not None else ScreenMemoryConfig.from_dict(meta["config"])
        except (KeyError, TypeError, ValueError) as e:
            raise MemoryFileError(mp, f"invalid config ({e})") from e
        mem = cls(cfg)
        if meta.get("featurizer") != mem.featurizer.id:
            raise MemoryMismatch(f"{mp}: keys from featurizer {meta.get('featurizer')!r}, this memory "
                                 f"uses {mem.featurizer.id!r}; re-key instead of mixing key spaces")
        mem.next_episode = int(meta.get("next_episode", 0))
        for rec in meta.get("namespaces", []):
            try:
                d = path / rec["dir"]
                for fn, info in rec["files"].items():
                    f = d / fn
                    if not f.is_file():
                        raise MemoryFileError(f, "missing")
                    if f.stat().st_size != info["bytes"] or sha256_file(f) != info["sha256"]:
                        raise MemoryFileError(f, "truncated or corrupted (size or sha256 differs from meta.json)")
                with np.load(d / rec["entries"], allow_pickle=False) as z:
                    data = {k: z[k] for k in z.files}
                values = json.loads((d / rec["values"]).read_bytes().decode("utf-8"))
                s = _Space(rec["name"], cfg)
                s.set_keys(np.asarray(data["keys"], np.float32).reshape(-1, cfg.dim))
                s.num = {k: data[f"col_{k}"].astype(dt) for k, dt in _NUM.items()}
                s.values = values["values"]
                if values.get("name") != rec["name"] or not (len(s.values) == s.keys.shape[0] ==
                                                              s.num["ids"].shape[0] == rec["n"]):
                    raise ValueError("entry counts or namespace name disagree")
                for k, v in zip(_NS_STATE, data["state"].tolist()):
                    setattr(s, k, int(v))
                s.success_lengths = [int(x) for x in data["success_lengths"]]
                s.source_credit = {int(r[0]): [float(r[1]), float(r[2]), int(r[3])] for r in data["source_credit"]}
            except MemoryFileError:
                raise
            except (KeyError, TypeError, ValueError, OSError) as e:
                raise MemoryFileError(path / rec.get("dir", "?") if isinstance(rec, dict) else mp,
                                      f"invalid content ({type(e).__name__}: {e})") from e
            s.index.rebuild(s.keys, s.num["ids"])
            mem._ns[s.name] = s
        return mem
