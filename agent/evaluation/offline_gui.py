"""Offline evaluation of a GUI policy on our GUI step logs: per executed step, action type,
grounding (inside the recorded target element), typed text and step success, each with a Wilson
interval, by app and by recorded action type, beside a uniformly random click's rates. The
entry point and the robot side are in `embodia.agent.evaluation.offline`."""
from __future__ import annotations

from typing import Callable

import numpy as np

from embodia.agent.evaluation.offline_common import Cued, check_episodes, cue_step, policy_info
from embodia.agent.evaluation.stats import wilson
from embodia.devices import GuiAction, Observation
from embodia.policies.base import as_policy
from embodia.devices.embodiment import Screen

NEAR = 50.0           # grounding box half-size (0..1000 units) around a recorded point no element holds
LOCATED = ("click", "double_click", "long_press", "right_click", "scroll", "type", "swipe", "drag")
GUI_METRICS = ("type", "grounding", "text", "step_success")


class RecordedGuiPolicy(Cued):
    """The recorded GUI actions as a policy (``cue`` says which step); ``shuffle=True`` rotates
    them by a random offset, so each step of a multi-step episode gets another step's action."""

    def __init__(self, *, shuffle: bool = False, seed: int = 0):
        self.shuffle, self.seed = shuffle, seed
        self.actions: list[GuiAction] = []
        self.t = 0

    def reset(self, seed: int | None = None) -> None:
        self.t = 0

    def cue(self, episode: dict, t: int) -> None:
        if t == 0:
            acts = list(episode["actions"])
            if self.shuffle and len(acts) > 1:   # a rotation: every step gets another step's action
                k = int(np.random.default_rng(self.seed + int(episode.get("index", 0))).integers(1, len(acts)))
                acts = acts[k:] + acts[:k]
            self.actions = acts
        self.t = t

    def act(self, obs, instruction: str) -> GuiAction:
        return self.actions[self.t]


class RandomClickPolicy:
    """A click at a uniformly random point of the screen: the agent the GUI report's ``chance``
    column describes."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        pass        # one stream of draws over the whole recording

    def act(self, obs, instruction: str) -> GuiAction:
        x, y = self.rng.uniform(0.0, 1000.0, 2)
        return GuiAction("click", point=(float(x), float(y)))


def _norm_bounds(bounds, screen: Screen) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = (float(v) for v in bounds)
    return (x0 * 1000 / screen.width, y0 * 1000 / screen.height, x1 * 1000 / screen.width, y1 * 1000 / screen.height)


def target_box(action: GuiAction, tree: list | None, screen: Screen):
    """The recorded action's target as 0..1000 bounds (x0, y0, x1, y1), or None if it has no location:
    its element, else the smallest clickable element under its point, else the smallest element
    under it, else a box of +-`NEAR` around the point (clipped to the screen).

    >>> s = Screen(100, 100)
    >>> tree = [{"index": 0, "bounds": [0, 0, 100, 50], "clickable": True}]
    >>> target_box(GuiAction("click", point=(500, 200)), tree, s)
    (0.0, 0.0, 1000.0, 500.0)
    >>> target_box(GuiAction("click", point=(500, 900)), tree, s)
    (450.0, 850.0, 550.0, 950.0)
    """
    tree = tree or []
    if action.element is not None:
        for e in tree:
            if e.get("index") == action.element and e.get("bounds"):
                return _norm_bounds(e["bounds"], screen)
    if action.point is None:
        return None
    x, y = action.point
    under = [(_norm_bounds(e["bounds"], screen), bool(e.get("clickable"))) for e in tree if e.get("bounds")]
    under = [(b, c) for b, c in under if b[0] <= x < b[2] and b[1] <= y < b[3] and b[2] > b[0] and b[3] > b[1]]
    for pick in ([b for b, c in under if c], [b for b, _ in under]):
        if pick:
            return min(pick, key=lambda b: (b[2] - b[0]) * (b[3] - b[1]))
    return (max(0.0, x - NEAR), max(0.0, y - NEAR), min(1000.0, x + NEAR), min(1000.0, y + NEAR))


def _location(action: GuiAction, tree: list | None, screen: Screen):
    """Where a predicted action acts, 0..1000: its point, else its element's centre."""
    if action.point is not None:
        return action.point
    if action.element is not None:
        for e in tree or []:
            if e.get("index") == action.element and e.get("bounds"):
                x0, y0, x1, y1 = _norm_bounds(e["bounds"], screen)
                return ((x0 + x1) / 2, (y0 + y1) / 2)
    return None


def _args_match(pred: GuiAction, rec: GuiAction) -> bool:
    """The arguments besides location and text that decide what an action does."""
    if rec.type == "scroll" and pred.direction != rec.direction:
        return False
    if rec.type == "key" and tuple(k.lower() for k in pred.keys) != tuple(k.lower() for k in rec.keys):
        return False
    if rec.type == "system_button" and pred.button != rec.button:
        return False
    if rec.type == "open_app" and (pred.app or "").strip().lower() != (rec.app or "").strip().lower():
        return False
    if rec.type == "terminate" and pred.status != rec.status:
        return False
    return True


def judge_step(pred: GuiAction | None, rec: GuiAction, tree: list | None, screen: Screen) -> dict:
    """One step's verdicts: type, grounding (None: the recorded action has no location), text
    (None: it types nothing), step_success, plus the recorded target and the chance of a uniform
    random click for each.

    >>> s = Screen(100, 100); tree = [{"index": 3, "bounds": [0, 0, 100, 50], "clickable": True}]
    >>> v = judge_step(GuiAction("click", element=3), GuiAction("click", point=(10, 10)), tree, s)
    >>> v["type"], v["grounding"], v["step_success"], v["chance"]["grounding"]
    (True, True, True, 0.5)
    """
    box = target_box(rec, tree, screen) if rec.type in LOCATED else None
    has_text = rec.text is not None and rec.type in ("type", "answer")
    type_ok = pred is not None and pred.type == rec.type
    grounding = None
    if box is not None:
        if pred is not None and rec.element is not None and pred.element == rec.element and pred.point is None:
            grounding = True
        else:
            loc = _location(pred, tree, screen) if pred is not None else None
            grounding = loc is not None and box[0] <= loc[0] < box[2] and box[1] <= loc[1] < box[3]
    text = None if not has_text else (pred is not None and (pred.text or "").strip() == rec.text.strip())
    success = bool(type_ok and grounding is not False and text is not False and _args_match(pred, rec))
    area = 0.0 if box is None else (box[2] - box[0]) * (box[3] - box[1]) / 1e6
    click = rec.type == "click"
    chance = {"type": float(click), "grounding": None if box is None else area,
              "text": None if not has_text else 0.0,
              "step_success": area if (click and box is not None) else 0.0}
    return {"type": bool(type_ok), "grounding": grounding, "text": text, "step_success": success,
            "chance": chance}


def _rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": (k / n) if n else None, "ci95": [round(lo, 4), round(hi, 4)]}


def _gui_table(verdicts: list[dict]) -> dict:
    out = {}
    for m in GUI_METRICS:
        vals = [v[m] for v in verdicts if v[m] is not None]
        out[m] = _rate(int(sum(vals)), len(vals))
    return out


def _gui_chance(verdicts: list[dict]) -> dict:
    out = {}
    for m in GUI_METRICS:
        vals = [v["chance"][m] for v in verdicts if v["chance"][m] is not None]
        out[m] = round(float(np.mean(vals)), 4) if vals else None
    return out


def gui_app(header: dict, end: dict | None) -> str:
    """The app an episode ran in: named by its meta or end info (``app``, or an ``app`` slot), else
    by the device URI's target, else (gui-sim over all apps) the app family of its task template."""
    meta = header.get("meta") or {}
    info = (end or {}).get("info") or {}
    for v in (meta.get("app"), info.get("app"), (info.get("slots") or {}).get("app")):
        if isinstance(v, str) and v:
            return v.lower()
    dev = meta.get("device")
    if not isinstance(dev, str) or ":" not in dev:
        return "unknown"
    scheme, target = dev.split(":", 1)[0], dev.split(":", 1)[1].split("?")[0]
    if scheme == "gui-sim" and target in ("", "all"):
        from embodia.sim.gui.tasks import TEMPLATES
        tpl = TEMPLATES.get(info.get("task"))
        return tpl.apps[0] if tpl else "unknown"
    return target or scheme


def read_gui_episodes(root, episodes: list[int] | None = None) -> list[dict]:
    """The recording's episodes, each with ``actions`` (the executed GuiActions), ``steps`` (their
    step lines with screenshots loaded), ``task``, ``app``, ``index``, ``success``, ``info`` and
    ``seed`` (None where the recording did not name one)."""
    from embodia.agent.recording.gui_log import executed_steps, list_gui_episodes, read_gui_episode
    paths = list_gui_episodes(root)
    idx = range(len(paths)) if episodes is None else check_episodes(episodes, len(paths), root)
    out = []
    for i in idx:
        ep = read_gui_episode(paths[i], load_images=True)
        steps, actions = executed_steps(ep)
        end = ep["end"]
        out.append({"index": i, "steps": steps, "actions": actions, "task": ep["header"].get("task", ""),
                    "app": gui_app(ep["header"], end), "success": (end or {}).get("success"),
                    "info": (end or {}).get("info") or {}, "embodiment": ep["header"].get("embodiment"),
                    "seed": ep["header"].get("seed")})
    return out


def gui_obs(step: dict) -> Observation:
    s = step.get("screen") or {}
    img = step.get("screenshot")
    if not s and img is not None:
        s = {"width": img.shape[1], "height": img.shape[0]}
    screen = Screen(int(s.get("width", 1000)), int(s.get("height", 1000)), float(s.get("pixel_ratio", 1.0)))
    return Observation(images={} if img is None else {"screen": img}, screen=screen, ui_tree=step.get("ui_tree"))


def _teacher_force(policy, executed: GuiAction, obs: Observation) -> None:
    """Make the policy's history hold the recorded action instead of its own prediction: through
    ``after_step`` where it has one; a GUI head's word history is rewritten in place."""
    as_policy(policy).teacher_force(obs, executed)


class _RecordedInfo:
    """What a ScreenMemoryPolicy asks a device for (task id and slots), from the episode's end line."""

    def __init__(self, info: dict, embodiment=None):
        self._info = {k: v for k, v in info.items() if k != "page"}
        self.embodiment = embodiment

    def info(self) -> dict:
        return self._info


def _screen_memory(policy, episodes: list[dict], scored: dict, embodiment):
    """``policy`` wrapped with a frozen screen memory of every successful episode but ``scored``."""
    from embodia.memory import ScreenMemory
    from embodia.policies.gui.screen_memory import ScreenMemoryPolicy, default_namespace
    mem = ScreenMemory()
    name = getattr(embodiment, "name", None)
    for ep in episodes:
        if ep["index"] == scored["index"] or not ep["success"]:
            continue
        slots = ep["info"].get("slots")
        ns = default_namespace(name, ep["info"], ep["task"])
        steps = []
        for s, a in zip(ep["steps"], ep["actions"]):
            screen = gui_obs(s).screen
            steps.append({"elements": list(s.get("ui_tree") or []), "instruction": ep["task"],
                          "action": a.to_dict(), "screen": (screen.width, screen.height)})
        mem.add_episode(ns, steps, True, episode_id=ep["index"], slots=slots if isinstance(slots, dict) else None)
    return ScreenMemoryPolicy(policy, mem, learn=False, device=_RecordedInfo(scored["info"], embodiment))


def score_gui(root, policy, *, episodes: list[int] | None = None, seed: int = 0, memory: bool = False,
              progress: Callable[[int, int], None] | None = None) -> dict:
    """Score a GUI ``policy`` step by step on a GUI recording (see the module doc)."""
    from embodia.devices.embodiment import Embodiment
    eps = read_gui_episodes(root, episodes)
    emb = None
    if eps and eps[0]["embodiment"]:
        emb = Embodiment.from_dict(eps[0]["embodiment"])
    arms = ["off", "memory"] if memory else ["off"]
    pool = (read_gui_episodes(root) if episodes is not None else eps) if memory else []   # the memory's source
    verdicts: dict[str, list[dict]] = {a: [] for a in arms}
    rows, mem_info = [], []
    for k, ep in enumerate(eps):
        row = {"episode": ep["index"], "task": ep["task"], "app": ep["app"], "steps": len(ep["steps"])}
        for arm in arms:
            pol = policy if arm == "off" else _screen_memory(policy, pool, ep, emb)
            pol.reset(seed + ep["index"])
            mine = []
            for t, (step, rec) in enumerate(zip(ep["steps"], ep["actions"])):
                obs = gui_obs(step)
                cue_step(policy, ep, t)
                pred = pol.act(obs, ep["task"])
                if pred is not None and not isinstance(pred, GuiAction):
                    raise ValueError(f"a GUI policy must return a GuiAction, got {type(pred).__name__}")
                v = judge_step(pred, rec, obs.ui_tree, obs.screen)
                v.update(app=ep["app"], action=rec.type, episode=ep["index"], t=t,
                         predicted=None if pred is None else pred.to_dict())
                mine.append(v)
                _teacher_force(pol, rec, obs)
            verdicts[arm].extend(mine)
            row[arm] = {m: sum(bool(v[m]) for v in mine if v[m] is not None) for m in GUI_METRICS}
            if arm == "memory":
                mem_info.append(policy_info(pol))
        rows.append(row)
        if progress:
            progress(k + 1, len(eps))
    off = verdicts["off"]
    out = {"kind": "gui", "recording": str(root), "episodes": len(eps), "steps": len(off),
           "overall": _gui_table(off), "chance": _gui_chance(off),
           "by_app": {a: _gui_table([v for v in off if v["app"] == a]) for a in sorted({v["app"] for v in off})},
           "by_action": {a: _gui_table([v for v in off if v["action"] == a])
                         for a in sorted({v["action"] for v in off})},
           "per_episode": rows}
    if memory:
        out["memory"] = _gui_table(verdicts["memory"])
        out["memory_effect"] = {m: _diff(out["memory"][m], out["overall"][m]) for m in GUI_METRICS}
        out["memory_replaced_steps"] = int(sum(i.get("memory_replaced", 0) for i in mem_info))
    return out


def _diff(a: dict, b: dict):
    return None if a["rate"] is None or b["rate"] is None else round(a["rate"] - b["rate"], 4)
