"""What the GUI head reads: one decision (instruction, action history, UI tree, screenshot)
encoded as a sequence of word units with segment, field, element and position ids, the backbone's
pooled features beside it, and a batch of them collated for training. Its vocabulary (action types,
roles, segments, fields) and config are here too; the model, files and policy are in `head.py`."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch
from torch.nn import functional as F

from embodia.devices import GuiAction
from embodia.policies.backbone import Backbone
from embodia.policies.gui.head_context import page_context
from embodia.policies.gui.head_layout import beside, container, element_name, right_of, words
from embodia.policies.gui.head_spell import spell_columns
from embodia.policies.gui.text_ops import CASES, TEXT_OPS

HEAD_WEIGHTS = "gui_head.safetensors"
HEAD_CONFIG = "gui_head.json"
FORMAT = "embodia-gui-head/1"
ACTIONS = ("click", "type", "scroll_down", "scroll_up", "click_point", "backspace")
# what real pages and apps also need: a key chord from the head's chord vocabulary, and typing into
# whatever field has the focus (after a click on a list, a date field, a terminal); appended after
# ACTIONS so that a head extended from an old one keeps its action indices
ACTIONS_V2 = ACTIONS + ("key", "type_focused")
# and a wait whose length the head copies from the page ("wait 2 seconds": `text_ops.duration_ms`)
ACTIONS_V3 = ACTIONS_V2 + ("wait",)
CHORDS = ("enter", "tab", "esc", "ctrl+a", "ctrl+c", "ctrl+v", "ctrl+x", "ctrl+z", "ctrl+s", "ctrl+w",
          "ctrl+end", "ctrl+home", "delete", "up", "down", "left", "right", "home", "end", "space",
          "shift+tab")         # back to the field before (a spin box whose arrows sit on its right end)
NEEDS_ELEMENT = ("click", "type", "scroll_down", "scroll_up")
ROLES = ("TextView", "Button", "ImageButton", "Switch", "EditText", "CheckBox", "ImageView", "ListView",
         "View")
SEG_PAD, SEG_INSTR, SEG_HIST, SEG_TREE = 0, 1, 2, 3
F_INSTR, F_HIST, F_ROLE, F_TEXT, F_DESC, F_STATE, F_QUOTED, F_VALUE = range(8)
N_ELEM_FEATS = 11                    # the element flags of feature set 1 (the bundled head's)
N_ELEM_FEATS_V2 = N_ELEM_FEATS + 4   # feature set 2 adds: enabled, editable, holds a value, the n-th asked for
# set 3 adds: in the page's copy of the instruction, at the named coordinate, holds (its container
# holds) a word of the instruction no other element holds
N_ELEM_FEATS_V3 = N_ELEM_FEATS_V2 + 4
ORDINAL_WORDS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
_ORDINAL = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b|\b(" + "|".join(ORDINAL_WORDS) + r")\b", re.IGNORECASE)
NEAR = 3                             # feature set 2: elements read beside each one (see `Encoded.elem_near`)
LONG_TAIL = 4                        # feature set 2: words kept from the end of a long text


class GuiHeadError(ValueError):
    """A GUI head that is missing, corrupt, or trained on another backbone; the message names the file."""


@dataclass
class GuiHeadConfig:
    dim: int = 64
    layers: int = 2
    heads: int = 4
    dropout: float = 0.0
    image_area: int = 112 * 196          # pixels of the downscaled screenshot (multiples of 28 per side)
    max_elements: int = 48
    max_words: int = 8                   # per element field / history item
    max_instruction_words: int = 32
    history: int = 12                    # past actions read (a settings search takes up to 10)
    max_span: int = 10                   # words of a typed text
    dit: dict = field(default_factory=lambda: dict(dim=32, depth=2, heads=4, num_registers=2, mlp_ratio=2.0))
    steps: int = 10                      # Euler steps of the point decoder
    mask_words: float = 0.15             # training: instruction words hidden (see GuiHead.encode)
    # the vocabulary a head was trained with travels in its gui_head.json; a config without these
    # fields (the bundled embodia-tiny head) is the old one: six action types, no chords, typed
    # text only from the instruction
    actions: tuple = ACTIONS
    chords: tuple = ()
    copy_tree: bool = False              # typed text may also be words of one tree element's text
    # what the head reads of an element. 1 (the bundled head, and any config without the field):
    # bounds, eight flags, role, the first `max_words` words of its text and description. 2 adds
    # what forms and long pages need: enabled / editable / holds-a-value flags, the words of its
    # value (a field's content, a text area's text; copyable like its text), the text of the label
    # beside or above an unnamed field, up to `max_text_words` words of a long text (its first
    # ones and its last `LONG_TAIL`), and whether the text beside it (its label, a row's key
    # cell) matches the instruction. 3 adds what the page's layout says (`head_context`): its copy
    # of the instruction, ordinals counted in reading order over a block of text, the value beside
    # the key a field's label or the instruction names, the point at a coordinate it names, the
    # element (and what it holds) whose text alone holds a word of the instruction
    features: int = 1
    # typed text may also be the copied words in upper or lower case ("type it in capitals"): a
    # three-way choice (`CASES`) beside the span; off for old heads
    case: bool = False
    # and (issue 54) a computed answer: the copied words' arithmetic calculated, or compacted as a
    # masked date or time field takes them (`text_ops.COMPUTED`), chosen by the same head
    compute: bool = False
    # literal texts the head may type, learnt from demos whose typed text no page holds (a shell's
    # ``ls``); one ending in a space is a prefix the copied words follow (``rm `` + a listed file)
    snippets: tuple = ()
    max_text_words: int = 24             # feature set 2: words read of an element's text or value
    long_tail: int = LONG_TAIL           # of those, the last ones of a longer text (a terminal's newest lines)
    # two more element columns after the feature set's flags: the key of the expression's next
    # character, and "all of it entered" (`embodia.policies.gui.head_spell`); off for old heads
    spell: bool = False

    def __post_init__(self):
        self.actions, self.chords, self.snippets = tuple(self.actions), tuple(self.chords), tuple(self.snippets)
        unknown = [a for a in self.actions if a not in ACTIONS_V3]
        if unknown or self.actions[:len(ACTIONS)] != ACTIONS:
            raise GuiHeadError(f"GUI head actions must start with {list(ACTIONS)} and come from "
                               f"{list(ACTIONS_V3)}; got {list(self.actions)}")
        if ("key" in self.actions) != bool(self.chords):
            raise GuiHeadError("a GUI head with the 'key' action needs a chord vocabulary, and only it")
        if any(not isinstance(t, str) or not t.strip() for t in self.snippets):
            raise GuiHeadError(f"GUI head snippets must be non-empty texts; got {list(self.snippets)}")
        if not 0 <= self.long_tail < self.max_text_words <= 32:
            raise GuiHeadError(f"GUI head reads at most 32 words of a text, its last long_tail fewer than all; "
                               f"got max_text_words={self.max_text_words}, long_tail={self.long_tail}")
        if self.compute and not self.case:
            raise GuiHeadError("a GUI head that computes answers chooses among its text operations: it needs case=True")
        if self.features not in (1, 2, 3):
            raise GuiHeadError(f"GUI head feature set {self.features!r} is unknown (1, 2 or 3)")

    @property
    def text_ops(self) -> tuple[str, ...]:
        """What this head may do to copied words before typing them (`text_ops.TEXT_OPS`)."""
        return TEXT_OPS if self.compute else CASES

    @property
    def elem_feats(self) -> int:
        """Width of the element flag vector of this feature set."""
        return (N_ELEM_FEATS, N_ELEM_FEATS_V2, N_ELEM_FEATS_V3)[self.features - 1]

    @property
    def fields(self) -> int:
        """Unit field ids of this feature set (set 2 adds `F_VALUE`)."""
        return F_VALUE + 1 if self.features >= 2 else F_VALUE


def chord_name(keys) -> str:
    """A key action's keys as one vocabulary entry.

    >>> chord_name(("ctrl", "a")), chord_name(("Enter",))
    ('ctrl+a', 'enter')
    """
    return "+".join(str(k).lower() for k in keys)


def quoted(ws: list[tuple[str, int, int]]) -> set[int]:
    """Indices of the words between a pair of quote marks (literal text in an instruction).

    >>> sorted(quoted(words("Send 'Dinner at 8?' to Ada")))
    [2, 3, 4, 5]
    """
    out, opened = set(), None
    for k, (w, _, _) in enumerate(ws):
        if w in ("'", '"'):
            if opened is not None and ws[opened][0] == w:
                out.update(range(opened + 1, k))
                opened = None
            elif opened is None:
                opened = k
    return out


def describe(action: GuiAction, tree: list | None) -> str:
    """A past action in a few words, as the head reads its history: ``click Network``,
    ``type Amara Weber``, ``scroll down``, ``click icon`` (a point outside the tree).

    >>> describe(GuiAction("click", element=0), [{"index": 0, "text": "Network", "bounds": [0, 0, 9, 9]}])
    'click Network'
    """
    if action.type in ("click", "long_press", "double_click"):
        if action.element is None:
            return f"{action.type} icon"
        return f"{action.type} {element_name(next((e for e in tree or [] if e.get('index') == action.element), {}))}"
    if action.type == "type":
        return f"type {action.text}"
    if action.type == "scroll":
        return f"scroll {action.direction}"
    if action.type == "key":
        return "press " + "+".join(action.keys)
    return action.type


def image_size_for(width: int, height: int, area: int, factor: int = 28) -> tuple[int, int]:
    """(W, H), multiples of ``factor``, with the screen's aspect and about ``area`` pixels.

    >>> image_size_for(540, 960, 112 * 196)
    (112, 196)
    """
    w = max(factor, int(round(math.sqrt(area * width / height) / factor)) * factor)
    h = max(factor, int(round(math.sqrt(area * height / width) / factor)) * factor)
    return w, h


# -- encoding one decision --------------------------------------------------------------------------
@dataclass
class Encoded:
    """One decision's backbone sequence and the unit structure over it (no tensors from a model)."""

    input_ids: list[int]
    tok_unit: np.ndarray          # [T] unit index of each token, -1 outside units
    tok_pos: np.ndarray           # [T] position of the token inside its unit
    unit_meta: np.ndarray         # [U, 5] segment, field, element, position, item
    elem_feats: np.ndarray        # [E, N_ELEM_FEATS]
    elem_role: np.ndarray         # [E]
    elem_index: list[int]         # the tree's `index` of each element
    spans: list[tuple[int, int]]  # character span of each instruction unit (units 0..len-1)
    image: np.ndarray             # uint8 [h, w, 3] downscaled screen
    grid: tuple[int, int]         # merged image tokens (rows, cols)
    # unit index -> (element position, start, end) in that element's text, for every word of an
    # element's text: where a copied text comes from when a head types words it read on the page
    tree_spans: dict = field(default_factory=dict)
    # the texts a copy can come from: each element's text as encoded ("" for a password), then
    # (feature set 2) each element's value at position len(elements) + its position
    elem_texts: list = field(default_factory=list)
    # [U] feature set 2: 1 for a word of an element's text or value at the position the
    # instruction asks for by ordinal ("the 3rd word"), else 0
    unit_ord: np.ndarray | None = None
    # [E, NEAR] feature set 2: position of the text naming each element (`beside`), of the nearest
    # text to its right on its row (`right_of`) and of the element holding it (`container`); -1: none
    elem_near: np.ndarray | None = None
    # [E] feature set 3: per field, the position of the element holding the value to type into it, -1
    elem_lookup: np.ndarray | None = None


def ordinals(instruction: str) -> set[int]:
    """The positions an instruction asks for by ordinal ("the 2nd text area", "the third word").

    >>> sorted(ordinals("Find the 11th word, then the third"))
    [3, 11]
    """
    return {int(m.group(1)) if m.group(1) else ORDINAL_WORDS.index(m.group(2).lower()) + 1
            for m in _ORDINAL.finditer(instruction or "")}


def read_words(text: str, limit: int, tail: int = 0) -> list[tuple[int, tuple[str, int, int]]]:
    """(position, word unit) of the words of a text the head reads: the first ``limit``, or for a
    longer text the first ``limit - tail`` and its last ``tail`` at the last positions of the
    position table (32), so the end of a long paragraph is read as its end.

    >>> [(k, w) for k, (w, _, _) in read_words("a b c d e f", 4, tail=2)]
    [(0, 'a'), (1, 'b'), (30, 'e'), (31, 'f')]
    """
    ws = words(text)
    if len(ws) <= limit or not tail:
        return list(enumerate(ws[:limit]))
    return list(enumerate(ws[:limit - tail])) + [(32 - tail + j, w) for j, w in enumerate(ws[-tail:])]


def _word_number(text: str, at: int) -> int:
    """1-based count of the whitespace-separated word that starts at or contains character ``at``
    (how a person counts "the 3rd word": punctuation belongs to its word)."""
    return len(text[:at].split()) + (0 if at and not text[at - 1].isspace() else 1)


class SequenceBuilder:
    """Turns (instruction, history, tree, screen) into an `Encoded` for one backbone."""

    def __init__(self, backbone: Backbone, cfg: GuiHeadConfig):
        self.bb, self.cfg = backbone, cfg
        tok = backbone.tokenizer
        self._tok = lru_cache(maxsize=65536)(lambda s: tuple(tok(s, add_special_tokens=False)["input_ids"]))
        self.space = self._tok(" ")
        self.newline = self._tok("\n")
        self.vs = tok.convert_tokens_to_ids(backbone.vision_start)
        self.ve = tok.convert_tokens_to_ids(backbone.vision_end)

    def encode(self, prompt: str, instruction: str, history: list[str], tree: list[dict],
               screen_size: tuple[int, int], screen: np.ndarray) -> Encoded:
        from PIL import Image

        cfg = self.cfg
        W, H = screen_size
        iw, ih = image_size_for(screen.shape[1], screen.shape[0], cfg.image_area, self.bb.factor)
        img = np.asarray(Image.fromarray(np.ascontiguousarray(screen)).resize((iw, ih), Image.Resampling.BICUBIC))
        rows, cols = ih // self.bb.factor, iw // self.bb.factor
        ids: list[int] = [self.vs] + [self.bb.image_token_id] * (rows * cols) + [self.ve]
        ids += list(self._tok(prompt))
        tok_unit = [-1] * len(ids)
        tok_pos = [0] * len(ids)
        meta: list[tuple] = []

        def sep(piece):
            ids.extend(piece)
            tok_unit.extend([-1] * len(piece))
            tok_pos.extend([0] * len(piece))

        def unit(word: str, seg: int, fld: int, elem: int, pos: int, item: int) -> int | None:
            t = self._tok(word)
            if not t:
                return None
            sep(self.space)
            u = len(meta)
            meta.append((seg, fld, elem, min(pos, 31), min(item, 15)))
            ids.extend(t)
            tok_unit.extend([u] * len(t))
            tok_pos.extend(range(len(t)))
            return u

        sep(self.newline)
        spans = []
        ws = words(instruction)[:cfg.max_instruction_words]
        for k, (w, a, b) in enumerate(ws):
            unit(w, SEG_INSTR, F_QUOTED if k in quoted(ws) else F_INSTR, -1, k, 0)
            spans.append((a, b))
        sep(self.newline)
        hist = history[-cfg.history:] if cfg.history else []
        for age, item in zip(range(len(hist) - 1, -1, -1), hist):
            for k, (w, _, _) in enumerate(words(item)[:cfg.max_words]):
                unit(w, SEG_HIST, F_HIST, -1, k, age)
            sep(self.newline)
        elems = list(tree or [])[:cfg.max_elements]
        asked = ordinals(instruction) if cfg.features >= 2 else set()
        feats, roles, tree_spans, texts, near, marked, lookup = self._elements(elems, set(hist), (W, H), unit, sep,
                                                                               asked, instruction)
        if cfg.spell:
            feats = np.concatenate([feats, spell_columns(instruction, history, elems)], 1)
        unit_ord = np.zeros(len(meta), np.int64)
        unit_ord[list(marked)] = 1
        return Encoded(ids, np.asarray(tok_unit, np.int64), np.asarray(tok_pos, np.int64),
                       np.asarray(meta, np.int64).reshape(-1, 5), feats, roles,
                       [int(e.get("index", i)) for i, e in enumerate(elems)], spans, img, (rows, cols),
                       tree_spans, texts, elem_near=near, unit_ord=unit_ord, elem_lookup=lookup)

    def _elements(self, elems: list[dict], clicked: set, size: tuple[int, int], unit, sep, asked: set,
                  instruction: str):
        """The tree's units (through ``unit`` / ``sep``) and per element its flags, role id, copyable
        spans, texts, the elements beside it, the units at an ordinal the instruction names
        (``asked``) and (set 3) the element holding the value each field takes, as the config's
        feature set reads them. ``clicked``: the history's items ("click <label>", as `describe`
        writes them)."""

        cfg, (W, H) = self.cfg, size
        v2, v3 = cfg.features >= 2, cfg.features >= 3
        ctx = page_context(elems, instruction, asked) if v3 else None
        feats = np.zeros((len(elems), cfg.elem_feats), np.float32)
        roles = np.zeros(len(elems), np.int64)
        tree_spans: dict[int, tuple[int, int, int]] = {}
        texts, values = [], []
        marked: set[int] = set()
        nth: dict[str, int] = {}             # elements of each role so far: "the 2nd text area"
        near = np.asarray(list(zip(beside(elems), right_of(elems), container(elems))) if v2
                          else [(-1,) * NEAR] * len(elems), np.int64).reshape(-1, NEAR)
        left = near[:, 0]
        limit, tail = (cfg.max_text_words, cfg.long_tail) if v2 else (cfg.max_words, 0)
        for i, e in enumerate(elems):
            x0, y0, x1, y1 = e["bounds"]
            checked = e.get("checked")
            name = element_name(e)
            value = "" if e.get("password") or not v2 else str(e.get("value") or "")
            flags = (x0 / W, y0 / H, x1 / W, y1 / H, bool(e.get("clickable")), bool(e.get("focused")),
                     checked is True, checked is not None, bool(e.get("scrollable")), bool(e.get("password")),
                     f"click {name}" in clicked)
            role = str(e.get("role") or "View")
            nth[role] = nth.get(role, 0) + 1
            feats[i] = flags + ((e.get("enabled", True) is not False, bool(e.get("editable")), bool(value),
                                 nth[role] in asked) if v2 else ()) + (ctx.flags(i) if v3 else ())
            roles[i] = ROLES.index(role) + 1 if role in ROLES else 0
            unit(role, SEG_TREE, F_ROLE, i, 0, 0)
            text = "" if e.get("password") else str(e.get("text") or "")
            texts.append(text)
            values.append(value)
            for k, (w, a, b) in read_words(text, limit, tail):
                u = unit(w, SEG_TREE, F_TEXT, i, k, 0)
                if u is not None:
                    tree_spans[u] = (i, a, b)
                    if ((i, a) in ctx.marks) if v3 else (_word_number(text, a) in asked):
                        marked.add(u)
            desc = str(e.get("desc") or "")
            if v2 and not text and not desc and e.get("editable") and left[i] >= 0:
                desc = str(elems[left[i]].get("text") or "")       # an unnamed field: the label beside it
            if desc and desc != text:
                for k, (w, _, _) in enumerate(words(desc)[:cfg.max_words]):
                    unit(w, SEG_TREE, F_DESC, i, k, 0)
            for k, (w, a, b) in read_words(value, limit, tail):
                u = unit(w, SEG_TREE, F_VALUE, i, k, 0)
                if u is not None:
                    tree_spans[u] = (len(elems) + i, a, b)
                    if _word_number(value, a) in asked:
                        marked.add(u)
            if checked is not None:
                unit("on" if checked else "off", SEG_TREE, F_STATE, i, 0, 0)
            if e.get("focused"):
                unit("focused", SEG_TREE, F_STATE, i, 1, 0)
            sep(self.newline)
        lookup = np.asarray(ctx.lookup, np.int64) if v3 else None
        return feats, roles, tree_spans, texts + values if v2 else texts, near, marked, lookup


UNIT_FEATS = 3        # per unit: mean backbone state, last token's state, mean token embedding
N_SIMS = 6


@torch.no_grad()
def backbone_features(backbone: Backbone, encoded: list[Encoded]) -> list[dict]:
    """Run the frozen backbone over a batch of encoded decisions; per decision what the head reads,
    all fixed functions of the backbone (cacheable, float16):

    * ``units`` [U, 3 * hidden]: per word unit, the mean of its tokens' states, the state of its last
      token (the backbone is causal: it has read the word and all before it) and the mean of its
      tokens' embeddings (the backbone's own table, shared by instruction and tree);
    * ``sims`` [U, 6]: per unit, the best cosine match of its bag of token embeddings among the
      instruction's, the history's and the tree's units (0 within its own part), and those to the
      16th power (near 1 only for the same word);
    * ``img`` [n, hidden]: the states of the image tokens.
    """
    dev = backbone.device
    T = max(len(e.input_ids) for e in encoded)
    ids = torch.full((len(encoded), T), backbone.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), T), dtype=torch.long)
    for b, e in enumerate(encoded):
        ids[b, :len(e.input_ids)] = torch.tensor(e.input_ids)
        mask[b, :len(e.input_ids)] = 1
    images = [torch.from_numpy(np.array(e.image, copy=True)) for e in encoded]
    pv, grid = backbone.patchify(torch.stack(images) if all(i.shape == images[0].shape for i in images) else images)
    ctx, _ = backbone(ids.to(dev), mask.to(dev), pv, grid)
    ctx = ctx.float().cpu()
    table = backbone.model.get_input_embeddings().weight.detach().float().cpu()
    out = []
    for b, e in enumerate(encoded):
        n = len(e.input_ids)
        U = len(e.unit_meta)
        tu = torch.from_numpy(e.tok_unit[:n])
        inside = tu >= 0
        idx, states, emb = tu[inside], ctx[b, :n][inside], table[ids[b, :n][inside]]
        count = torch.zeros(U).index_add_(0, idx, torch.ones(len(idx))).clamp(min=1)[:, None]
        mean_state = torch.zeros(U, ctx.shape[-1]).index_add_(0, idx, states) / count
        mean_emb = torch.zeros(U, table.shape[-1]).index_add_(0, idx, emb) / count
        last = torch.zeros(U, dtype=torch.long).scatter_reduce_(0, idx, torch.nonzero(inside).squeeze(1),
                                                                 reduce="amax", include_self=False)
        bag = F.normalize(mean_emb, dim=-1)
        sims = bag @ bag.T
        seg = torch.from_numpy(e.unit_meta[:, 0])
        best = []
        for s in (SEG_INSTR, SEG_HIST, SEG_TREE):
            m = (seg == s)[None, :] & (seg != s)[:, None]
            v = sims.masked_fill(~m, 0.0).amax(-1).clamp(min=0) if U else torch.zeros(0)
            best += [v, v.pow(16)]
        out.append({
            "units": torch.cat([mean_state, ctx[b, last], mean_emb], -1).half(),
            "sims": torch.stack(best, -1).half() if U else torch.zeros(0, N_SIMS).half(),
            "img": ctx[b, :n][ids[b, :n] == backbone.image_token_id].half(),
            "unit_meta": torch.from_numpy(e.unit_meta),
            "unit_ord": torch.from_numpy(e.unit_ord if e.unit_ord is not None else np.zeros(U, np.int64)),
            "elem_feats": torch.from_numpy(e.elem_feats),
            "elem_role": torch.from_numpy(e.elem_role),
            "elem_near": torch.from_numpy(e.elem_near if e.elem_near is not None
                                          else np.full((len(e.elem_role), NEAR), -1, np.int64)),
            "grid": torch.tensor(e.grid),
            **({"elem_lookup": torch.from_numpy(e.elem_lookup)} if e.elem_lookup is not None else {}),
        })
    return out


def collate(samples: list[dict]) -> dict:
    """Pad a list of `backbone_features` dicts (plus optional labels) into one batch."""
    B = len(samples)
    U = max(1, max(len(s["unit_meta"]) for s in samples))
    E = max(1, max(len(s["elem_feats"]) for s in samples))
    I = max(len(s["img"]) for s in samples)
    d = samples[0]["img"].shape[1]
    meta = torch.zeros(B, U, 5, dtype=torch.long)
    meta[..., 2] = -1
    units = torch.zeros(B, U, samples[0]["units"].shape[1])
    sims = torch.zeros(B, U, N_SIMS)
    uord = torch.zeros(B, U, dtype=torch.long)
    feats = torch.zeros(B, E, samples[0]["elem_feats"].shape[1])
    role = torch.zeros(B, E, dtype=torch.long)
    near = torch.full((B, E, NEAR), -1, dtype=torch.long)
    lookup = torch.full((B, E), -1, dtype=torch.long)
    emask = torch.zeros(B, E, dtype=torch.bool)
    img = torch.zeros(B, I, d)
    img_rc = torch.zeros(B, I, 2, dtype=torch.long)
    img_mask = torch.zeros(B, I, dtype=torch.bool)
    for b, s in enumerate(samples):
        u, e, n = len(s["unit_meta"]), len(s["elem_feats"]), len(s["img"])
        meta[b, :u], units[b, :u], sims[b, :u] = s["unit_meta"], s["units"].float(), s["sims"].float()
        if "unit_ord" in s:
            uord[b, :u] = s["unit_ord"]
        feats[b, :e], role[b, :e], emask[b, :e] = s["elem_feats"], s["elem_role"], True
        if "elem_near" in s:
            near[b, :e] = s["elem_near"]
        if "elem_lookup" in s:
            lookup[b, :e] = s["elem_lookup"]
        img[b, :n], img_mask[b, :n] = s["img"].float(), True
        rows, cols = (int(v) for v in s["grid"])
        k = torch.arange(n)
        img_rc[b, :n, 0], img_rc[b, :n, 1] = k // cols, k % cols
    out = {"unit_meta": meta, "unit_ord": uord, "units": units, "sims": sims, "elem_feats": feats, "elem_role": role,
           "elem_near": near, "elem_lookup": lookup, "elem_mask": emask, "img": img, "img_rc": img_rc,
           "img_mask": img_mask, "grid": torch.stack([s["grid"] for s in samples])}
    if "label_type" in samples[0]:
        for k in ("label_type", "label_elem", "label_start", "label_end", "label_cell", "label_chord", "label_case",
                  "label_snippet"):
            out[k] = torch.tensor([int(s.get(k, -1)) for s in samples])
        out["label_point"] = torch.stack([s["label_point"] for s in samples])
    return out
