"""One query of the screen memory: the element-reference candidates near this screen, the
consistency filter, a weighted vote on the next action, the winner bound to the current UI tree
(``ScreenRetrieval``). A mixin of `ScreenMemory`, so `memory/screen.py` keeps the storage,
insertion, credit and files, and the steps of a query read together here."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from embodia.memory.screen_refs import (
    PLACEHOLDER,
    POSITIONAL,
    STRING_FIELDS,
    canon,
    centre,
    fill,
    fill_ref,
    find_element,
    element_ref,
    action_value,
    field_state,
    slot_values,
)

START = "<start>"                     # the "previous action" of an episode's first step
_TINY = 1e-12


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



class ScreenQueryMixin:
    """One query of a `ScreenMemory` (its ``_spaces``, ``config``, ``featurizer``)."""

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
        bound, hist_w, reason = self._consistent(s, cand, elements, slots, screen, t, history, out)
        if not bound:
            return done(reason)
        out.n_kept = len(bound)
        self._vote(s, bound, hist_w, history, out)
        return done("ok")

    def _consistent(self, s, cand, elements, slots, screen, t, history, out):
        """The candidates whose precondition holds (bound to this screen), in the task's phase, after
        the same previous action (a filter, or a vote weight when preferred), and of this
        instance's slot values when those are enough: (bound, history weights, reason if none)."""
        cfg = self.config
        # consistency 1: the precondition (the element is on this screen, every slot binds)
        bound = []
        for r, sc in cand:
            b = self._bind(s.values[r], elements, slots, screen)
            if b is not None:
                bound.append((r, sc, b))
        if not bound:
            return bound, None, "no precondition holds"
        # consistency 1b: the same fields filled (and with what) as when the entry was stored
        if cfg.field_state == "strict":
            state = field_state(elements, slots)
            bound = [x for x in bound if s.values[x[0]].get("state", []) == state]
            if not bound:
                return bound, None, "field state mismatch"
        # consistency 2: progress
        if t is not None and s.success_lengths:
            # steps taken overstate progress after a detour; the nearest stored screens (whether or
            # not their action applies here) say where in the task this screen is
            p_hat = min(1.0, float(t) / float(np.median(s.success_lengths)))
            top = sorted(cand, key=lambda x: -x[1])[: cfg.p_knn_k]
            p_hat = min(p_hat, float(np.median([s.num["progress"][r] for r, _ in top])) + cfg.p_knn_margin)
            out.progress_hat = p_hat
            bound = [x for x in bound if abs(float(s.num["progress"][x[0]]) - p_hat) <= cfg.progress_tolerance]
            if not bound:
                return bound, None, "progress mismatch"
        # consistency 3: history (a filter when strict, a vote weight when preferred)
        hist_w = np.ones(len(bound))
        if history is not None and cfg.history != "off":
            prev = history[-1] if len(history) else START
            match = np.array([s.values[x[0]]["hist"] == prev for x in bound])
            if cfg.history == "strict":
                bound = [x for x, m in zip(bound, match) if m]
                hist_w = np.ones(len(bound))
                if not bound:
                    return bound, None, "history mismatch"
            else:
                hist_w = np.where(match, 1.0, cfg.history_miss)
        # the instance's own slot values: vote among their candidates when they are enough
        if cfg.values == "backoff" and slots:
            vals = slot_values(slots)
            same = [i for i, x in enumerate(bound) if vals in s.values[x[0]].get("vals", ())]
            if same and sum(int(s.num["n_support"][bound[i][0]]) for i in same) >= cfg.min_support:
                bound, hist_w = [bound[i] for i in same], hist_w[same]
                out.values_matched = True
        return bound, hist_w, "ok"

    def _vote(self, s, bound, hist_w, history, out) -> None:
        """Weighted majority vote on the resolved canonical form; the winner, bound to this screen,
        with its confidence share x c_sim x c_n and where it was stored, goes into ``out``."""
        cfg = self.config
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
        saturation, spread = self._saturation(s, [bound[i][0] for i in sel])
        mean_sim = float((ws * sims[sel]).sum() / ws.sum())
        c_sim = float(np.clip((mean_sim - cfg.min_similarity) / (saturation - cfg.min_similarity), 0, 1))
        c_n = min(1.0, float(sup[sel].sum()) / cfg.min_support)
        out.confidence = float(min(1.0, max(0.0, share * c_sim * c_n)))
        out.components = {"share": float(share), "c_sim": c_sim, "c_n": c_n,
                          "similarity": mean_sim, "saturation": saturation}
        if spread is not None:
            out.components["spread"] = spread
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

    def _saturation(self, s, rows) -> tuple:
        """The similarity at which c_sim saturates for a winner stored at ``rows``, and the median
        cosine among those rows' keys (None for fewer than two). With ``spread_saturation``, the
        lower of ``similarity_saturation`` and that median: a query as close to the stored instances
        as they are to one another is one more instance of the same step, however much instance
        content (random labels, other options) every instance of this task carries. Never below
        ``min_similarity + spread_margin``, so that the floor's neighbours do not count fully."""
        cfg = self.config
        rows = sorted(set(rows))
        if not cfg.spread_saturation or len(rows) < 2:
            return cfg.similarity_saturation, None
        k = s.keys[rows].astype(np.float64)
        spread = float(np.median((k @ k.T)[np.triu_indices(len(rows), 1)]))
        return float(min(cfg.similarity_saturation, max(spread, cfg.min_similarity + cfg.spread_margin))), spread

    def _bind(self, value: dict, elements, slots, screen) -> Optional[dict]:
        """The stored action bound to the current tree, or None when its precondition fails: the
        referenced element is absent or disabled (MiniWoB's sign-agreement enables its field only
        once the text is scrolled to its end), or a placeholder has no current slot value."""
        fields = {}
        for k, v in value["fields"].items():
            if k in STRING_FIELDS and isinstance(v, str):
                v = fill(v, slots)
                if v is None:
                    return None
            fields[k] = tuple(v) if isinstance(v, list) else v
        act = {"type": value["type"], **fields}
        ref = None
        if value["ref"] is not None:
            want = fill_ref(value["ref"], slots)
            slot_named = bool(PLACEHOLDER.search(value["ref"]["text"] + value["ref"]["desc"]))
            el = find_element(elements, want, by_label=slot_named) if want is not None else None
            if el is None or el.get("enabled") is False:     # a disabled control takes no action
                return None
            ref = element_ref(el)                    # the element found: what a policy's action on it resolves to
            act["element"] = int(el["index"])
            if screen is not None and el.get("bounds") is not None:
                act["point"] = centre(el["bounds"], screen)
                if value.get("end") is not None and value.get("point") is not None:
                    dx, dy = (act["point"][i] - value["point"][i] for i in (0, 1))
                    act["end"] = (min(1000.0, max(0.0, value["end"][0] + dx)),
                                  min(1000.0, max(0.0, value["end"][1] + dy)))
        elif value.get("point") is not None:
            act["point"] = tuple(value["point"])
            if value.get("end") is not None:
                act["end"] = tuple(value["end"])
        # a type with no target goes where the focus is (as a key does): the steps before it, which
        # the history matched, put the focus there; only a bare point is unanchored
        untargeted_type = value["type"] == "type" and value.get("point") is None
        anchored = value["ref"] is not None or value["type"] not in POSITIONAL or untargeted_type
        return {"action": act, "anchored": anchored,
                "canon": canon(value["type"], ref, fields, value.get("point"), self.config.point_grid)}

    def resolve(self, action: dict, elements, screen=None) -> str:
        """The resolved canonical form of a concrete action on the current screen (no placeholders:
        the action names real text): look it up in ``ScreenRetrieval.votes`` (``prob``) to fuse a
        policy's candidates with the memory."""
        v = action_value(action, elements, None, screen)
        fields = {k: (tuple(x) if isinstance(x, list) else x) for k, x in v["fields"].items()}
        return canon(v["type"], v["ref"], fields, v["point"], self.config.point_grid)


    def exemplars(self, namespace: str, screen_elements, instruction: str, *, slots: Optional[dict] = None,
                  page: Optional[str] = None, k: int = 2, max_steps: int = 16) -> List[List[dict]]:
        """Whole stored successes to show a model as examples (as Synapse shows its exemplars, but
        filled online from verified successes): the source episodes of the entries nearest to this
        screen, most similar first, at most ``k``, each as its stored steps in order, at most
        ``max_steps``. A step is ``{"type", "target": {role, text, id, desc} of the element it
        acted on, and the action's own fields (text typed, keys...)}``, placeholders filled with
        ``slots`` (this task's values) or else with the values the success was stored with. []
        when nothing stored is near (``min_similarity``)."""
        s = self._ns.get(namespace)
        if s is None or s.n == 0 or k <= 0:
            return []
        q = self.key(list(screen_elements or []), instruction, slots, page)
        score, ids = s.index.search(q[None], min(self.config.k, s.n))
        episodes: List[int] = []
        for sc, r in zip(score[0], s.rows(ids[0])):
            e = int(s.num["episode_id"][r]) if r >= 0 and sc >= self.config.min_similarity else None
            if e is not None and e not in episodes:
                episodes.append(e)
        out = []
        for e in episodes[:k]:
            rows = sorted(np.flatnonzero(s.num["episode_id"] == e), key=lambda r: int(s.num["step"][r]))
            out.append([_exemplar_step(s.values[r], slots) for r in rows[:max_steps]])
        return out


def _exemplar_step(value: dict, slots: Optional[dict]) -> dict:
    """A stored step as a model reads it, its placeholders filled (`ScreenQueryMixin.exemplars`)."""
    stored = dict(kv.split("=", 1) for kv in ((value.get("vals") or [""])[0] or "").split("|") if "=" in kv)
    values = slots or stored

    def show(text, slug=False):
        return (fill(text, values, slug) or text) if isinstance(text, str) and PLACEHOLDER.search(text) else text

    step = {"type": value["type"]}
    ref = value.get("ref")
    if ref is not None:
        step["target"] = {key: show(v, key == "id") for key, v in ref.items() if v}
    elif value.get("point") is not None:
        step["point"] = [round(float(x), 1) for x in value["point"]]
    step.update({key: show(v) for key, v in (value.get("fields") or {}).items()})
    return step
