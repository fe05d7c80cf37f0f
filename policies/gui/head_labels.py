"""The GUI head's actions and training labels: a decided row as a `GuiAction` on the tree it was
decided on (`to_action`), and a recorded step as the labels its training reads (`label`), with the
typed-text spans between them (whole words of the instruction or of one element, in a case)."""
from __future__ import annotations

import re
from dataclasses import replace

import torch

from embodia.devices import GuiAction
from embodia.policies.gui.head_encoding import ACTIONS, Encoded, GuiHeadConfig, chord_name
from embodia.policies.gui.text_ops import COMPUTED, apply_text_op, duration_ms, first_defined


def to_action(d: dict, enc: Encoded, instruction: str) -> GuiAction:
    """A `GuiHead.decide` row as a GuiAction on the tree it was decided on."""
    t = d["type"]
    if t == "click_point":
        x, y = ((v + 1.0) * 500.0 for v in d["point"])
        return GuiAction("click", point=(min(1000.0, max(0.0, x)), min(1000.0, max(0.0, y))))
    if t == "backspace":
        return GuiAction("key", keys=("backspace",))
    if t == "key":
        return GuiAction("key", keys=tuple(d["chord"].split("+")))
    if t == "wait":                 # as long as the copied words say; a second where they name no time
        return GuiAction("wait", duration_ms=duration_ms(span_text(d["span"], enc, instruction)) or 1000)
    if t == "type_focused":
        return GuiAction("type", text=typed_text(d, enc, instruction))
    element = enc.elem_index[d["element"]]
    if t == "click":
        return GuiAction("click", element=element)
    if t == "type":
        return GuiAction("type", element=element, text=typed_text(d, enc, instruction))
    return GuiAction("scroll", element=element, direction="down" if t == "scroll_down" else "up")


def typed_text(d: dict, enc: Encoded, instruction: str) -> str:
    """The text a decided row types: its span's words through the best-scored of its text
    operations that applies to them (`text_ops.first_defined`: arithmetic that does not parse is
    never typed half-made); a literal snippet chosen instead, or before them where it ends in a
    space (``rm `` + the copied file name)."""
    snippet = d.get("snippet")
    if snippet and not snippet.endswith(" "):
        return snippet
    ops = d.get("ops") or ("as written",)
    words = span_text(d["span"], enc, instruction)
    if ops[0] == "joined" and d["span"][0] in enc.tree_spans:
        words = row_run(enc, enc.tree_spans[d["span"][0]][0]) or words
    return (snippet or "") + first_defined(words, ops)[1]


def row_run(enc: Encoded, i: int) -> str | None:
    """The texts of the line element ``i`` sits in, left to right, with spaces between: the
    elements before and after it in the tree that each hold text, sit right of the one before and
    share most of its height. The letters of a word drawn one per element: the head points at one
    of them, the layout gives the extent (the span's ends it scores are learnt from few words and
    not trusted). None for a value's text or an element without text."""
    n = len(enc.elem_index)
    if i >= n or not enc.elem_texts[i]:
        return None
    box = enc.elem_feats[:, :4]

    def follows(a: int, b: int) -> bool:          # b continues a's line
        top, bottom = max(box[a, 1], box[b, 1]), min(box[a, 3], box[b, 3])
        shorter = min(box[a, 3] - box[a, 1], box[b, 3] - box[b, 1])
        return bool(enc.elem_texts[a]) and bool(enc.elem_texts[b]) and box[b, 0] >= box[a, 0] and \
            bottom - top >= 0.5 * shorter
    first = i
    while first > 0 and follows(first - 1, first):
        first -= 1
    last = i
    while last + 1 < n and follows(last, last + 1):
        last += 1
    return " ".join(enc.elem_texts[first:last + 1])


def span_text(span: tuple[int, int], enc: Encoded, instruction: str) -> str:
    """The text a (start, end) pair of units stands for: a slice of the instruction, or of one
    element's text where a head copying from the tree chose words there."""
    s, e = span
    if s in enc.tree_spans and e in enc.tree_spans:
        (i, a, _), (j, _, b) = enc.tree_spans[s], enc.tree_spans[e]
        if i == j:
            return enc.elem_texts[i][a:b]
        # over several elements (a head's ``joined`` words): their texts in the page's order
        parts = [enc.elem_texts[i][a:]] + [enc.elem_texts[k] for k in range(i + 1, j)] + [enc.elem_texts[j][:b]]
        return " ".join(p for p in parts if p)
    s, e = min(s, len(enc.spans) - 1), min(e, len(enc.spans) - 1)
    return instruction[enc.spans[s][0]:enc.spans[e][1]]


def span_label(text: str, instruction: str, enc: Encoded, copy_tree: bool) -> tuple[int, int] | None:
    """(start, end) units of a typed text: a run of whole instruction words, else (``copy_tree``)
    a run of whole words of one element's text, other than the instruction's own label."""
    starts = {sp[0]: k for k, sp in enumerate(enc.spans)}
    ends = {sp[1]: k for k, sp in enumerate(enc.spans)}
    at = instruction.find(text or "\0")
    if at >= 0 and at in starts and at + len(text) in ends:
        return starts[at], ends[at + len(text)]
    if not copy_tree or not text:
        return None
    found = [span for i in range(len(enc.elem_texts)) for span in _tree_spans_of(text, i, enc, instruction)]
    if enc.elem_lookup is not None:     # set 3: where the page says the text is read, if it is there
        told = ({int(u) for u in (enc.unit_ord if enc.unit_ord is not None else []).nonzero()[0]},
                {int(v) for v in enc.elem_lookup if v >= 0})
        found.sort(key=lambda se: not (se[0] in told[0] or enc.tree_spans[se[0]][0] in told[1]))
    return found[0] if found else None


def _tree_spans_of(text: str, i: int, enc: Encoded, instruction: str) -> list[tuple[int, int]]:
    """(start, end) units of each occurrence of ``text`` as whole words of copyable text ``i``
    (set 1 and 2 heads take the first found, in the order of the texts)."""
    whole = enc.elem_texts[i]
    if whole == instruction:
        return []
    units = {(a, b): u for u, (j, a, b) in enc.tree_spans.items() if j == i}
    out, at = [], whole.find(text)
    while at >= 0:
        s = next((u for (a, _), u in units.items() if a == at), None)
        e = next((u for (_, b), u in units.items() if b == at + len(text)), None)
        if s is not None and e is not None:
            out.append((s, e))
        if enc.elem_lookup is None:     # sets 1 and 2 looked at the first occurrence only
            break
        at = whole.find(text, at + 1)
    return out


def snippet_label(text: str, instruction: str, enc: Encoded, cfg: GuiHeadConfig) -> tuple:
    """(span, text operation, snippet) labels of a typed text (-1: none). The words copied, as
    `cased_span_label` finds them, and snippet 0 (none); else, for a head with ``snippets``, the
    literal text itself (index + 1, no span), or a prefix snippet and the words after it."""
    span, case = cased_span_label(text, instruction, enc, cfg)
    if span is not None or not cfg.snippets:
        return span, case, (0 if cfg.snippets and span is not None else -1)
    if text in cfg.snippets:
        return None, -1, cfg.snippets.index(text) + 1
    for k, p in enumerate(cfg.snippets):
        if p.endswith(" ") and text.startswith(p) and len(text) > len(p):
            span, case = cased_span_label(text[len(p):], instruction, enc, cfg)
            if span is not None:
                return span, case, k + 1
    return None, -1, -1


def learn_snippets(texts, least: int = 5, most: int = 24) -> tuple[str, ...]:
    """The literal texts a head may type, from the typed texts of its demos: every text typed at
    least ``least`` times whole, and every first word typed at least ``least`` times before other
    words (as a prefix, with its space), at most ``most`` of them, most frequent first. Which of
    them a step is labelled with is `snippet_label`'s: only a text no page holds gets one.

    >>> learn_snippets(["ls"] * 5 + [f"rm f{k}.txt" for k in range(6)] + ["Ada Byron"] * 2)
    ('rm ', 'ls')
    """
    from collections import Counter
    whole = Counter(t for t in texts if t and t.strip())
    prefix = Counter(t.split(" ", 1)[0] + " " for t in texts if t and " " in t.strip() and t.split(" ", 1)[0])
    ranked = sorted([(n, t) for t, n in whole.items() if n >= least] + [(n, p) for p, n in prefix.items() if n >= least],
                    key=lambda nt: (-nt[0], nt[1]))
    return tuple(dict.fromkeys(t for _, t in ranked))[:most]


def cased_span_label(text: str, instruction: str, enc: Encoded, cfg: GuiHeadConfig) -> tuple:
    """(span, index in ``cfg.text_ops``) of a typed text: its words as written, else (a head with
    ``case``) the words it spells in upper or lower case, else (a head with ``compute``) words
    whose arithmetic or compacted form it is (`computed_span_label`); (None, -1) where none is
    on the page. Words as written that lie inside words computing to the same text are the
    computation's (the answer of ``x - 0 = 25`` is 25 by solving, not by copying its last word)."""
    span = span_label(text, instruction, enc, cfg.copy_tree)
    if span is not None and cfg.compute and re.search(r"\d", text):
        computed, op = computed_span_label(text, instruction, enc, cfg)
        if computed is not None and _inside(span, computed, enc):
            return computed, op             # "1" copied out of "0 + 1 =" is the sum, not a copy
    if span is not None or not cfg.case or not text:
        return span, (0 if span is not None else -1)
    case = 1 if text == text.upper() else 2 if text == text.lower() else -1
    if case >= 0 and len(instruction.lower()) == len(instruction):
        folded = replace(enc, elem_texts=[t.lower() if len(t.lower()) == len(t) else t for t in enc.elem_texts])
        span = span_label(text.lower(), instruction.lower(), folded, cfg.copy_tree)
        if span is not None:
            return span, case
    return computed_span_label(text, instruction, enc, cfg) if cfg.compute else (None, -1)


JOIN_UNITS = 40     # units a span of joined words may cover (one letter per element: role, letter, separator)


def wait_span_label(ms: int, instruction: str, enc: Encoded, slack_ms: int = 500) -> tuple[int, int] | None:
    """(start, end) instruction words naming a time within ``slack_ms`` of a recorded wait of
    ``ms`` (the shortest such run: ``2 seconds``); None where the instruction names none."""
    found = []
    for x in range(len(enc.spans)):
        for y in range(x, min(len(enc.spans), x + 4)):
            told = duration_ms(instruction[enc.spans[x][0]:enc.spans[y][1]])
            if told is not None and abs(told - ms) <= slack_ms:
                found.append((y - x, x, y))
                break
    return min(found)[1:] if found else None


def _inside(span: tuple[int, int], outer: tuple[int, int], enc: Encoded) -> bool:
    """Whether the words of ``span`` lie within those of ``outer`` (both of the instruction, or of
    the same element's text)."""
    def where(u):
        return enc.tree_spans[u] if u in enc.tree_spans else (-1, *enc.spans[u])
    (i, a, _), (_, _, b) = where(span[0]), where(span[1])
    (j, c, _), (_, _, d) = where(outer[0]), where(outer[1])
    return i == j and c <= a and b <= d


def _tree_units(enc: Encoded) -> dict[int, list[tuple[int, int, int]]]:
    """Per copyable text of the tree (`Encoded.elem_texts` position), its word units in order as
    (unit, start, end) character offsets into that text."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for u, (i, a, b) in sorted(enc.tree_spans.items()):
        out.setdefault(i, []).append((u, a, b))
    return out


def computed_span_label(text: str, instruction: str, enc: Encoded, cfg: GuiHeadConfig) -> tuple:
    """(span, index in ``cfg.text_ops``) of a typed text that an operation of `COMPUTED` makes of
    some words: of the instruction first, then (``copy_tree``) of one element's text, the longest
    such run of at most ``max_span`` words (``3 + 4 =`` rather than ``3 + 4``: one choice for every
    page alike); (None, -1) where no words give it."""
    sources = [(instruction, [(k, a, b) for k, (a, b) in enumerate(enc.spans)])]
    if cfg.copy_tree:
        sources += [(enc.elem_texts[i], units) for i, units in _tree_units(enc).items()]
    for whole, units in sources:
        found = []
        for x in range(len(units)):
            for y in range(x, min(len(units), x + cfg.max_span)):
                words = whole[units[x][1]:units[y][2]]
                for op in COMPUTED:
                    if words != text and apply_text_op(words, op) == text:      # a computation, not a copy
                        found.append((y - x, units[x][0], units[y][0], op))
        if found:
            _, s, e, op = max(found, key=lambda f: (f[0], -f[1]))
            return (s, e), cfg.text_ops.index(op)
    return joined_span_label(text, enc, cfg) if cfg.copy_tree else (None, -1)


def joined_span_label(text: str, enc: Encoded, cfg: GuiHeadConfig) -> tuple:
    """(span, index of ``joined``) where ``text`` is the whole texts of consecutive elements with
    no space between them (a word drawn one letter per element), over at most `JOIN_UNITS`
    units; (None, -1) where no run of elements spells it."""
    by_text = _tree_units(enc)
    first = {i: units[0][0] for i, units in by_text.items()}
    last = {i: units[-1][0] for i, units in by_text.items()}
    order = sorted(first)
    for x, i in enumerate(order):
        spelled = ""
        for j in order[x:]:
            if j != order[x] and (j - 1 not in first or last[j] - first[i] >= JOIN_UNITS):
                break               # a gap in the run (an element without text), or too long
            spelled += re.sub(r"\s+", "", enc.elem_texts[j])
            if spelled == text and j != i:
                return (first[i], last[j]), cfg.text_ops.index("joined")
            if not text.startswith(spelled):
                break
    return None, -1


def label(step, enc: Encoded, cfg: GuiHeadConfig | None = None) -> dict | None:
    """Training labels of a recorded `GuiStep` on its encoding for a head of config ``cfg`` (its
    action and chord vocabulary; default: the old six types); None for an action the head does
    not produce (the sample is then left out)."""
    cfg = cfg or GuiHeadConfig()
    a = step.action
    out = {"label_type": -1, "label_elem": -1, "label_start": -1, "label_end": -1, "label_cell": -1,
           "label_point": torch.zeros(2), "label_chord": -1, "label_case": -1, "label_snippet": -1}
    pos = {idx: k for k, idx in enumerate(enc.elem_index)}
    if a.type == "click" and a.element is not None:
        if a.element not in pos:
            return None
        out.update(label_type=ACTIONS.index("click"), label_elem=pos[a.element])
    elif a.type == "click" and a.point is not None:
        rows, cols = enc.grid
        cell = min(rows - 1, int(a.point[1] / 1000.0 * rows)) * cols + min(cols - 1, int(a.point[0] / 1000.0 * cols))
        out.update(label_type=ACTIONS.index("click_point"), label_cell=cell,
                   label_point=torch.tensor([a.point[0] / 500.0 - 1.0, a.point[1] / 500.0 - 1.0]))
    elif a.type == "type" and (a.element in pos or (a.element is None and "type_focused" in cfg.actions)):
        if a.element is None:
            out.update(label_type=cfg.actions.index("type_focused"))
        else:
            out.update(label_type=ACTIONS.index("type"), label_elem=pos[a.element])
        span, case, snippet = snippet_label(a.text, step.instruction, enc, cfg)
        if span is not None:
            out.update(label_start=span[0], label_end=span[1], label_case=case)
        out.update(label_snippet=snippet)
    elif a.type == "scroll" and a.point is not None and a.direction in ("up", "down"):
        W, H = step.size.width, step.size.height
        x, y = a.point[0] * W / 1000.0, a.point[1] * H / 1000.0
        under = [k for k, e in enumerate(step.tree[:len(enc.elem_index)])
                 if e["bounds"][0] <= x < e["bounds"][2] and e["bounds"][1] <= y < e["bounds"][3]]
        # the list the wheel turned: a ListView there, else (a web page) the innermost element
        # flagged scrollable there
        lists = [k for k in under if step.tree[k].get("role") == "ListView"] or \
            [k for k in under if step.tree[k].get("scrollable")]
        if not lists:
            return None
        out.update(label_type=ACTIONS.index("scroll_" + a.direction), label_elem=lists[-1])
    elif a.type == "wait" and "wait" in cfg.actions:
        span = wait_span_label(a.duration_ms, step.instruction, enc)
        if span is None:
            return None             # a pause the page does not ask for: not a wait the head learns
        out.update(label_type=cfg.actions.index("wait"), label_start=span[0], label_end=span[1])
    elif a.type == "key" and tuple(a.keys) == ("backspace",):
        out.update(label_type=ACTIONS.index("backspace"))
    elif a.type == "key" and chord_name(a.keys) in cfg.chords:
        out.update(label_type=cfg.actions.index("key"), label_chord=cfg.chords.index(chord_name(a.keys)))
    else:
        return None
    k = out["label_elem"]
    if k >= 0 and not enc.elem_feats[k, 8 if a.type == "scroll" else 4]:
        return None                 # an element that cannot take the action (`able`): never a target
    return out
