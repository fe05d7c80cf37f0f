"""A success memory around any GUI policy: execute a confident shortcut, or re-rank the policy's choices.

At each decision the wrapper queries a `memory.ScreenMemory` with the current UI tree, the
instruction and the actions executed so far. Then, by ``mode``:

- ``"replace"``: when the memory's confidence is >= ``c_replace`` and its action's precondition
  holds (the referenced element is on screen, every slot binds), the memory's action, bound to the
  current tree, is executed and the base policy is NOT called; otherwise the base policy acts.
  An action the memory already executed on an identical screen this episode (it led back here)
  is not repeated: the base policy decides.
- ``"rerank"``: a base policy with ``propose(obs, instruction, n)`` (a list of GuiActions, best
  first, or of ``(GuiAction, log_prob)`` pairs) has its candidates re-scored with
  ``log pi(a) + lambda(c) * log(eps + P_mem(a))`` (a plain list counts as uniform); a policy
  without ``propose`` gets the ``"replace"`` behaviour.
- ``"exemplars"``: the base policy always decides, shown the stored successes (below); the memory
  never acts itself.
- ``"off"``: the base policy alone (the memory still learns when ``learn``), the paired control arm.

Whenever the base policy decides (not ``"off"``) and it reads exemplars (``takes_exemplars``: the
``openai:`` and ``hf:`` chat policies), it is first shown up to ``exemplars`` whole stored
successes near this screen (`ScreenMemory.exemplars`), which a chat model gets in its prompt, as
Synapse gives its exemplars, but filled online from verified successes.

The loop reports every executed step (``after_step``) and the verified outcome (``end_episode``):
successes are stored, failures credited to the entries that decided. Steps it observes without
having decided them are a person's (take over and hand back, `embodia.agent.loop.takeover`): a
verified success with such steps is stored as a demonstration (``config.demo_support`` successes). ``step_record()`` says what
the memory did at the last decision and ``info()`` sums it up.

Namespace: ``namespace`` if given; else ``<embodiment>/<task>`` with the embodiment name of the
device (or the base policy, or ``gui``) and the task template id from the device's ``info()``
(gui-sim gives ``task``; its ``slots`` and ``page`` are used too); else ``<embodiment>/<the
instruction with digits stripped>``: without slots an instruction is its own task, and stripping
digits keeps "Set an alarm for 7" and "... for 8" together.

>>> from embodia.memory import ScreenMemory                                           # doctest: +SKIP
>>> dev = open_device("gui-sim:settings?shift=layout")                        # doctest: +SKIP
>>> pol = ScreenMemoryPolicy(my_gui_policy, ScreenMemory(), device=dev)        # doctest: +SKIP
>>> run_episode(dev, pol, seed=0); pol.info()["memory_replaced_total"]         # doctest: +SKIP
"""
from __future__ import annotations

import math
import re

from embodia.devices import GuiAction
from embodia.memory.screen import ScreenMemory
from embodia.memory.screen_query import ScreenRetrieval
from embodia.memory.screen_refs import canonical
from embodia.policies.base import Policy, as_policy

MODES = ("replace", "rerank", "exemplars", "off")


def default_namespace(embodiment: str | None, info: dict | None, instruction: str) -> str:
    """``<embodiment>/<task template id>`` when the device names the task, else the instruction
    with digits stripped (see the module doc).

    >>> default_namespace("gui-sim:phone", {"task": "turn-on"}, "Turn on Wi-Fi")
    'gui-sim:phone/turn-on'
    >>> default_namespace(None, None, "Set an alarm for 7:30")
    'gui/set an alarm for :'
    """
    task = (info or {}).get("task")
    if not isinstance(task, str) or not task:
        task = " ".join(re.sub(r"\d+", "", instruction or "").lower().split())
    return f"{embodiment or 'gui'}/{task}"


class ScreenMemoryPolicy(Policy):
    """Wraps any GUI policy (``act(obs, instruction) -> GuiAction``, optionally ``propose``) with a
    `ScreenMemory`; see the module doc. ``learn=False``: a frozen memory (nothing stored or
    credited). ``device``: where the task id, slots and page name come from (its ``info()``)."""

    def __init__(self, policy, memory: ScreenMemory, namespace: str | None = None, mode: str = "replace",
                 learn: bool = True, *, device=None, n_propose: int = 5, exemplars: int = 2):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.policy, self.memory, self.mode, self.learn = as_policy(policy), memory, mode, learn
        if mode == "exemplars" and not self.policy.takes_exemplars:
            raise ValueError(f"mode 'exemplars' needs a policy that reads exemplars (openai:, hf:); "
                             f"{type(self.policy).__name__} does not")
        self.fixed_namespace = namespace
        self.device = device          # optional: task id, slots and page name from its info()
        self.n_propose = int(n_propose)
        self.n_exemplars = int(exemplars)   # stored successes shown to a policy that reads them (0: none)
        self.totals = {"episodes": 0, "decisions": 0, "replaced": 0, "reranked": 0, "hits": 0,
                       "moved": 0, "base_calls": 0, "episodes_replaced": 0, "episodes_replaced_ok": 0,
                       "stored": 0, "deleted": 0}
        self.reset(None)

    @property
    def embodiment(self):
        return self.policy.embodiment or (self.device.embodiment if self.device is not None else None)

    def reset(self, seed: int | None = None) -> None:
        self.policy.reset(seed)
        self.namespace: str | None = None
        self.slots: dict | None = None
        self._steps: list[dict] = []
        self._hist: list[str] = []
        self._page: str | None = None
        self._record: dict | None = None
        self._base_record = None
        self._instruction = ""
        self._ended = False
        self._replaced_on: set = set()      # (screen key, action) pairs the memory decided this episode
        self._decided = False               # act() ran since the last observed step
        self._person_steps = 0              # observed steps nobody here decided: a person's
        self.episode = {"decisions": 0, "replaced": 0, "reranked": 0, "hits": 0, "moved": 0, "base_calls": 0}

    # -- context ---------------------------------------------------------------------------------
    def _info(self) -> dict:
        out = self.device.info() if self.device is not None else None
        return out if isinstance(out, dict) else {}

    def _begin(self, instruction: str, info: dict) -> None:
        """Namespace and slots, fixed at the first decision of an episode."""
        slots = info.get("slots")
        self.slots = dict(slots) if isinstance(slots, dict) else None
        emb = self.embodiment
        self.namespace = self.fixed_namespace or default_namespace(getattr(emb, "name", None), info, instruction)

    @staticmethod
    def _screen(obs):
        s = getattr(obs, "screen", None)
        return (s.width, s.height) if s is not None else None

    def instruct(self, instruction: str) -> None:
        """The namespace is fixed now, so steps taken before the first decision (a person who takes
        over at once) are stored under it too."""
        self.policy.instruct(instruction)
        self._instruction = instruction
        if self.namespace is None:
            self._begin(instruction, self._info())

    # -- deciding --------------------------------------------------------------------------------
    def _base(self, obs, instruction: str):
        self.episode["base_calls"] += 1
        if self.policy.takes_exemplars and self.mode != "off":
            shown = self.memory.exemplars(self.namespace, obs.ui_tree or [], instruction, slots=self.slots,
                                          page=self._page, k=self.n_exemplars)
            self.policy.show_exemplars(shown)
            if self._record is not None:
                self._record["exemplars"] = len(shown)
        action = self.policy.act(obs, instruction)
        self._base_record = self.policy.step_record()
        return action

    def _can_replace(self, r: ScreenRetrieval) -> bool:
        cfg = self.memory.config
        return (not r.empty and r.precondition and r.confidence >= cfg.replace_confidence
                and (r.positional or cfg.point_replace))

    def act(self, obs, instruction: str):
        info = self._info()
        self._instruction = instruction
        if self.namespace is None:
            self._begin(instruction, info)
        page = info.get("page")
        self._page = str(page[0]) if isinstance(page, (list, tuple)) and page else (page if isinstance(page, str) else None)
        self._base_record = None
        self._decided = True
        self.episode["decisions"] += 1
        rec = {"mode": self.mode, "namespace": self.namespace, "source": "base", "replaced": False}
        self._record = rec
        if self.mode in ("off", "exemplars"):
            return self._base(obs, instruction)
        tree, screen = obs.ui_tree or [], self._screen(obs)
        r = self.memory.query(self.namespace, tree, instruction, self._hist, slots=self.slots, screen=screen,
                              t=len(self._steps), page=self._page)
        rec.update(confidence=round(r.confidence, 4), reason=r.reason, n_kept=r.n_kept,
                   memory_action=r.canonical, precondition=r.precondition, values_matched=r.values_matched)
        if not r.empty and r.confidence >= self.memory.config.confidence_floor:
            self.episode["hits"] += 1
        if self.mode == "rerank" and self.policy.proposes:
            action = self._rerank(obs, instruction, r, self.policy.propose, tree, screen, rec)
            if action is not None:
                return action
        if self._can_replace(r):
            # back on a screen where the memory already chose this action: it led nowhere (a Back
            # brought us here again), so the policy decides this time (no replacement loops)
            here = (r.key.tobytes(), r.canonical)
            if here in self._replaced_on:
                rec.update(reason="memory action already tried on this screen")
                return self._base(obs, instruction)
            self._replaced_on.add(here)
            self.episode["replaced"] += 1
            self.episode["moved"] += bool(r.moved)
            rec.update(source="memory", replaced=True, moved=r.moved, stored_at=r.stored_at,
                       bound={"element": r.action.get("element"), "point": r.action.get("point")})
            if self.learn:
                self.memory.record_use(self.namespace, r)
            return GuiAction.from_dict(r.action)
        return self._base(obs, instruction)

    def _rerank(self, obs, instruction, r: ScreenRetrieval, propose, tree, screen, rec):
        """The fused choice among the policy's candidates; None if it offered none."""
        self.episode["base_calls"] += 1
        cands = []
        for c in propose(obs, instruction, self.n_propose) or []:
            a, lp = (c if isinstance(c, tuple) else (c, None))
            cands.append((a, lp))
        if not cands:
            return None
        if any(lp is None for _, lp in cands):           # a ranked shortlist: uniform prior over it
            cands = [(a, -math.log(len(cands))) for a, _ in cands]
        cfg = self.memory.config
        lam = cfg.fusion_weight(r.confidence) if not r.empty else 0.0
        forms = [self.memory.resolve(a.to_dict(), tree, screen) for a, _ in cands]
        scores = [lp + lam * math.log(cfg.eps + r.prob(f)) for (_, lp), f in zip(cands, forms)]
        best = max(range(len(cands)), key=lambda i: (scores[i], -i))   # ties: the policy's order
        steered = best != 0
        rec.update(source="fused" if steered else "base", fusion_lambda=round(lam, 4),
                   candidates=len(cands), chosen=best)
        if steered:
            self.episode["reranked"] += 1
            if self.learn and forms[best] == r.canonical:
                self.memory.record_use(self.namespace, r)
        return cands[best][0]

    # -- learning from what was executed -----------------------------------------------------------
    def after_step(self, obs, executed) -> None:
        self.policy.after_step(obs, executed)      # the base policy's history must hold what really ran
        self._person_steps += not self._decided
        self._decided = False
        d = executed.to_dict() if isinstance(executed, GuiAction) else dict(executed)
        tree, screen = list(obs.ui_tree or []), self._screen(obs)
        self._steps.append({"elements": tree, "instruction": self._instruction,
                            "action": d, "screen": screen, "page": self._page})
        self._hist.append(canonical(d, tree, self.slots, screen, self.memory.config.point_grid))

    def end_episode(self, success: bool) -> None:
        self.policy.end_episode(success)
        ep, tot = self.episode, self.totals
        self._ended = True
        tot["episodes"] += 1
        for k in ("decisions", "replaced", "reranked", "hits", "moved", "base_calls"):
            tot[k] += ep[k]
        if ep["replaced"] or ep["reranked"]:
            tot["episodes_replaced"] += 1
            tot["episodes_replaced_ok"] += bool(success)
        if not self.learn or self.namespace is None:
            return
        out = self.memory.end_episode(bool(success), namespace=self.namespace)
        tot["deleted"] += out["deleted"]
        if success and self._steps:
            # a success a person took part in is a demonstration: it counts for several
            support = self.memory.config.demo_support if self._person_steps else 1
            tot["stored"] += self.memory.add_episode(self.namespace, self._steps, True, slots=self.slots,
                                                     support=support)
        if getattr(self, "autosave", None) is not None:   # a folder: saved after every episode
            self.memory.save(self.autosave)

    def hold_episode(self, label: dict, final_obs) -> None:
        """An outcome nobody verified: with a memory folder (``autosave``) the episode is kept under
        its ``pending/`` for `embodia memory review` (steps, slots, final screen, what steered it);
        it is not stored and steers nothing until a person confirms it."""
        self.policy.hold_episode(label, final_obs)
        uses = self.memory.detach_uses()       # never credited with the next episode's outcome
        folder = getattr(self, "autosave", None)      # a folder when the memory is persistent
        if not self.learn or self.namespace is None or folder is None or not self._steps:
            return
        from embodia.memory import pending
        img = final_obs.images.get("screen") if final_obs is not None and final_obs.images else None
        pending.hold(folder, {"kind": "screen", "namespace": self.namespace, "label": label,
                              "instruction": self._instruction, "steps": self._steps, "slots": self.slots,
                              "uses": uses, "steps_n": len(self._steps)}, frame=img)
        self.memory.save(folder)

    # -- reporting -------------------------------------------------------------------------------
    def step_record(self) -> dict:
        out = {"memory": dict(self._record or {})}
        if isinstance(self._base_record, dict):
            out.update({k: v for k, v in self._base_record.items() if k != "memory"})
        return out

    def info(self) -> dict:
        """This episode's counts and the totals over the stream (the current episode included; the
        loop asks before it reports the outcome, so outcome-based totals lag by that episode)."""
        ep, tot = self.episode, dict(self.totals)
        if not self._ended:
            for k in ep:
                tot[k] += ep[k]
        out = {f"memory_{k}": v for k, v in ep.items()}
        out.update({f"memory_{k}_total": v for k, v in tot.items()})
        out["memory_mode"] = self.mode
        out["memory_namespace"] = self.namespace
        if tot["episodes_replaced"]:
            out["memory_precision"] = tot["episodes_replaced_ok"] / tot["episodes_replaced"]
        return out
