"""The GUI head of a VLA checkpoint: the frozen backbone reads the screen, the body's prompt, the
instruction, the policy's own past actions and the UI tree in one sequence; a small trunk over its
states decides an action type, points at a tree element, copies typed text out of the instruction,
and a DiT decodes a screen point where the target is not in the tree.

    >>> policy = GuiHeadPolicy.from_pretrained("policies/checkpoints/embodia-tiny")   # doctest: +SKIP
    >>> policy.reset(0); action = policy.act(obs, "Turn on Hotspot")                   # doctest: +SKIP
    >>> action                                                                          # doctest: +SKIP
    GuiAction(type='click', ..., element=5)

Why this shape (ARCHITECTURE.md section 5.10): a small model trained on CPU does not learn to read
labels from pixels, but it learns to point at UI-tree elements when instruction words and element
text share one text encoding. Here both go through the backbone's one token table in one sequence:

    <image> <embodiment prompt> \\n <instruction words> \\n <history words> \\n <element words>...

Every word is tokenized on its own (``Bluetooth`` has the same ids in the instruction and in a
switch's label) and becomes a *unit*. What the head reads of a unit is fixed by the frozen
backbone and cached once per recorded decision (`backbone_features`): the mean of its tokens' states,
its last token's state, the mean of its tokens' embeddings, and how closely that bag of embeddings
matches any unit of the other parts (cosine; 1.0 for the same word). Units also carry what they are
(instruction / history / element role, text, description, state) and their element's bounds and
flags. The trunk (two transformer layers over [CLS, mean image token, units]) feeds:

* the action type: click, type, scroll down, scroll up, click a point, backspace;
* a pointer over tree elements, conditioned on the type (click, type and scroll name an element;
  the device clicks its centre, as AndroidWorld's index actions do);
* a span of instruction words to type, conditioned on the chosen field, its ends scored with the
  words beside them (typed text is always a slot of the instruction);
* for a target missing from the tree (icon-only buttons): a pointer over the screenshot's image
  cells, then a flow-matching DiT (`action_heads.ActionDiT`, one 2-D action) that decodes the point
  conditioned on that cell's token, its bounds and CLS.

A head's vocabulary is in its config (``gui_head.json``): the bundled embodia-tiny head has the six
types above (a config without ``actions`` means them). `extend_vocabulary` appends two more, as real
pages and apps need them: ``key``, a chord from the head's chord vocabulary (``chords``: enter, tab,
ctrl+a, ctrl+c, ctrl+v, ctrl+s, ctrl+w, ...) scored from CLS and the focused element, and
``type_focused``, typing into whatever field has the focus (no element named). With ``copy_tree``
the typed span may also be words of one element's text (a table cell's value, a word of a
paragraph), not only of the instruction.

The backbone and the robot head are not touched: the GUI head lives beside them in the checkpoint
directory as ``gui_head.safetensors`` + ``gui_head.json`` (which records the backbone weights'
SHA-256; a head trained on another backbone is refused). Train it with `embodia train gui-head`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from embodia.devices import GuiAction, Observation
from embodia.policies.backbone import Backbone, backbone_sha256, read_head_files
from embodia.policies.base import Policy
from embodia.policies.gui.head_encoding import (
    ACTIONS,
    ACTIONS_V2,
    CHORDS,
    Encoded,
    FORMAT,
    F_DESC,
    F_TEXT,
    F_VALUE,
    GuiHeadConfig,
    GuiHeadError,
    HEAD_CONFIG,
    HEAD_WEIGHTS,
    NEAR,
    NEEDS_ELEMENT,
    N_ELEM_FEATS,
    N_SIMS,
    ROLES,
    SEG_INSTR,
    SEG_PAD,
    SEG_TREE,
    SequenceBuilder,
    UNIT_FEATS,
    backbone_features,
    collate,
    describe,
)
from embodia.policies.gui.head_labels import JOIN_UNITS, to_action
from embodia.policies.gui.head_spell import SPELL_COLUMNS
from embodia.policies.placement import Placement, to_device
from embodia.shared.files import write_atomic


# -- the model ----------------------------------------------------------------------------------------
def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.GELU(), nn.Linear(hidden, out))


class GuiHead(nn.Module):
    """Trunk and heads over cached backbone features (see the module docstring)."""

    def __init__(self, cfg: GuiHeadConfig, hidden: int):
        super().__init__()
        from embodia.action_heads import ActionDiT

        self.cfg, self.hidden = cfg, hidden
        d = cfg.dim
        self.unit_in = nn.Sequential(nn.LayerNorm(UNIT_FEATS * hidden), nn.Linear(UNIT_FEATS * hidden, d))
        self.seg = nn.Embedding(4, d)
        self.fld = nn.Embedding(cfg.fields, d)
        self.pos = nn.Embedding(32, d)
        self.item = nn.Embedding(16, d)
        self.sim = nn.Linear(N_SIMS, d)
        # [flags of set 1, instruction match (2), flags set 2 adds (3), the text beside matches (1)]
        self.elem = nn.Linear(cfg.elem_feats + (3 if cfg.features >= 2 else 2), d)
        self.role = nn.Embedding(len(ROLES) + 1, d)
        self.img_proj = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, d))
        self.img_row = nn.Embedding(32, d)
        self.img_col = nn.Embedding(32, d)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.mask = nn.Parameter(torch.zeros(1, 1, d))
        layer = nn.TransformerEncoderLayer(d, cfg.heads, 2 * d, cfg.dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.trunk = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.out_norm = nn.LayerNorm(d)
        self.type_head = _mlp(2 * d + 1, d, len(cfg.actions))   # [CLS, click-pointer-weighted element, its score]
        self.type_emb = nn.Embedding(len(cfg.actions), d)
        self.pointer = _mlp(3 * d, d, 1)
        self.span_q = nn.Linear(d, d)
        self.start = _mlp(4 * d, d, 1)      # [word, the word before it, query, word * query]
        self.end = _mlp(4 * d, d, 1)        # [word, the word after it, query, word * query]
        self.cell = _mlp(3 * d, d, 1)
        self.dit = ActionDiT(action_dim=2, state_dim=4, horizon=1, ctx_dim=d, num_embodiments=1, **cfg.dit)
        if cfg.chords:          # only a head with a chord vocabulary has this (old heads load strictly)
            self.chord = _mlp(2 * d, d, len(cfg.chords))      # [CLS, the focused element]
        if cfg.case:
            self.case = _mlp(2 * d, d, len(cfg.text_ops))       # [CLS, the field typed into]
        if cfg.snippets:        # none, or one of the literal texts: [CLS, the field typed into]
            self.snippet = _mlp(2 * d, d, len(cfg.snippets) + 1)
        if cfg.features >= 2:     # [its label, the text right of it, its container]; starts at zero:
            self.near = nn.Linear(NEAR * d, d)                  # a head extended to set 2 reads as before
            self.ordinal = nn.Embedding(2, d)                   # a word at the position asked for ("3rd word")
            for p in (self.near.weight, self.near.bias, self.ordinal.weight):
                nn.init.zeros_(p)
        if cfg.features >= 3:     # a word of the element holding the value the chosen field takes
            self.lookup = nn.Embedding(2, d)
            nn.init.zeros_(self.lookup.weight)
        if cfg.spell:             # the spelling columns (`head_spell`); start at zero as `near` does
            self.spell = nn.Linear(SPELL_COLUMNS, d)
            nn.init.zeros_(self.spell.weight)
            nn.init.zeros_(self.spell.bias)

    # -- trunk --------------------------------------------------------------------------------------
    def encode(self, batch: dict, mask_words: float = 0.0, generator: torch.Generator | None = None) -> dict:
        """[CLS, the screen's mean image token, units] through the trunk; elements = the mean of
        their units' outputs plus their bounds, flags and role.

        ``mask_words`` (training): the chance that an instruction word is hidden (its identity and
        matches replaced by a learned mask), so that where a typed span starts and ends is learned
        from the words around it ("name X Y and", quotes), not from the trained names themselves.
        """
        meta = batch["unit_meta"]
        B, U, _ = meta.shape
        dev = meta.device
        seg, fld, elem, pos, item = meta.unbind(-1)
        umask = seg != SEG_PAD
        words_in, sims = self.unit_in(batch["units"]), batch["sims"]
        if mask_words > 0:
            hide = (torch.rand(B, U, generator=generator, device=dev) < mask_words) & (seg == SEG_INSTR)
            words_in = torch.where(hide[..., None], self.mask.expand_as(words_in), words_in)
            sims = sims.masked_fill(hide[..., None], 0.0)
        x = (words_in + self.seg(seg) + self.fld(fld) + self.pos(pos.clamp(max=31))
             + self.item(item.clamp(max=15)) + self.sim(sims))
        if self.cfg.features >= 2 and "unit_ord" in batch:
            x = x + self.ordinal(batch["unit_ord"])
        ei = elem.clamp(min=0)
        E = batch["elem_feats"].shape[1]
        # per element: do all its words appear in the instruction, and how many are they (for "turn
        # off Battery percentage" the switch "Battery percentage" outscores the row "Battery"; a
        # partial match, "Express delivery" for "tick Weekend delivery", counts for nothing)
        words_of = ((seg == SEG_TREE) & ((fld == F_TEXT) | (fld == F_DESC)))
        flat = (torch.arange(B, device=dev)[:, None] * E + ei)[words_of]
        hits = torch.zeros(B * E, device=dev).index_add_(0, flat, (batch["sims"][..., 1][words_of] > 0.5).float())
        n = torch.zeros(B * E, device=dev).index_add_(0, flat, torch.ones(len(flat), device=dev))
        full = ((hits == n) & (n > 0)).float()
        match = torch.stack([full, full * hits / 4], -1).view(B, E, 2)
        ef = batch["elem_feats"]
        parts = [ef[..., :N_ELEM_FEATS], match]
        if self.cfg.features >= 2:      # a label or key cell beside the element matches the instruction
            left = batch["elem_near"][..., 0]
            near = torch.gather(full.view(B, E), 1, left.clamp(min=0)) * (left >= 0)
            parts += [ef[..., N_ELEM_FEATS:self.cfg.elem_feats], near[..., None]]
        ebase = self.elem(torch.cat(parts, -1)) + self.role(batch["elem_role"])          # [B, E, d]
        if self.cfg.spell:
            ebase = ebase + self.spell(ef[..., self.cfg.elem_feats:])
        x = x + torch.gather(ebase, 1, ei[..., None].expand(-1, -1, ebase.shape[-1])) * (elem >= 0)[..., None]
        rc, im = batch["img_rc"], batch["img_mask"]
        xi = (self.img_proj(batch["img"]) + self.img_row(rc[..., 0].clamp(max=31))
              + self.img_col(rc[..., 1].clamp(max=31)))
        screen = (xi * im[..., None]).sum(1, keepdim=True) / im.sum(1).clamp(min=1)[:, None, None]
        seq = torch.cat([self.cls.expand(B, -1, -1), screen, x], 1)
        mask = torch.cat([torch.ones(B, 2, dtype=torch.bool, device=dev), umask], 1)
        h = self.out_norm(self.trunk(seq, src_key_padding_mask=~mask))
        g, hu = h[:, 0], h[:, 2:]
        tree = (seg == SEG_TREE) & umask
        flat = (torch.arange(B, device=dev)[:, None] * E + ei)[tree]
        ecount = torch.zeros(B * E, device=dev).index_add_(0, flat, torch.ones(len(flat), device=dev)).clamp(min=1)[:, None]
        e = torch.zeros(B * E, hu.shape[-1], device=dev, dtype=hu.dtype).index_add_(0, flat, hu[tree]) / ecount
        elems = e.view(B, E, -1) + ebase
        if self.cfg.features >= 2:      # what is beside it says (its label, a number between two buttons, its row)
            near = batch["elem_near"]
            k = near.shape[-1]
            both = torch.gather(elems, 1, near.clamp(min=0).view(B, k * E, 1).expand(-1, -1, elems.shape[-1]))
            both = (both * (near >= 0).view(B, k * E, 1)).view(B, E, -1)
            elems = elems + self.near(both)
        return {"g": g, "img": xi, "img_mask": im, "grid": batch["grid"], "units": hu, "seg": seg, "fld": fld,
                "uelem": elem, "elems": elems, "elem_mask": batch["elem_mask"],
                "elem_feats": batch["elem_feats"], "elem_lookup": batch.get("elem_lookup")}

    # -- heads --------------------------------------------------------------------------------------
    def type_logits(self, z: dict) -> torch.Tensor:
        """Action type from CLS and from what a click would point at: whether the instruction's
        target is on screen (click it) or not (scroll, or an icon outside the tree) is easiest to
        read from the best match among the elements."""
        click = torch.full((len(z["g"]),), self.cfg.actions.index("click"), dtype=torch.long, device=z["g"].device)
        r = self.pointer_logits(z, click)
        any_elem = able(z, click).any(1, keepdim=True)
        w = torch.where(any_elem, r.softmax(-1).nan_to_num(0.0), torch.zeros_like(r))
        top = torch.where(any_elem, r.max(-1, keepdim=True).values, torch.zeros_like(any_elem, dtype=r.dtype))
        return self.type_head(torch.cat([z["g"], (w[..., None] * z["elems"]).sum(1), top], -1))

    def pointer_logits(self, z: dict, types: torch.Tensor) -> torch.Tensor:
        """Scores over the tree's elements for an action of type ``types``; only elements that can
        take it compete (clicks and typing: clickable ones; scrolls: scrollable ones)."""
        q = (z["g"] + self.type_emb(types))[:, None].expand_as(z["elems"])
        s = self.pointer(torch.cat([z["elems"], q, z["elems"] * q], -1)).squeeze(-1)
        return s.masked_fill(~able(z, types), float("-inf"))

    def copyable(self, z: dict) -> torch.Tensor:
        """[B, U] the units a typed text may be copied from: the instruction's words, and with
        ``copy_tree`` the words of the elements' texts (a table cell's value, a paragraph's word)."""
        ok = z["seg"] == SEG_INSTR
        if self.cfg.copy_tree:
            ok = ok | ((z["seg"] == SEG_TREE) & ((z["fld"] == F_TEXT) | (z["fld"] == F_VALUE)))
        return ok

    def chord_logits(self, z: dict) -> torch.Tensor:
        """Scores over the chord vocabulary, from CLS and the focused element (what ctrl+a selects)."""
        focused = (z["elem_feats"][..., 5] > 0.5) & z["elem_mask"]
        f = (z["elems"] * focused[..., None]).sum(1)
        return self.chord(torch.cat([z["g"], f], -1))

    def case_logits(self, z: dict, elems: torch.Tensor) -> torch.Tensor:
        """Scores over the head's text operations (`GuiHeadConfig.text_ops`: a case, or a computed
        answer) for the text typed into ``elems`` (-1: the focused field): the instruction says
        how ("in upper case", "solve for x"), CLS has read it."""
        chosen = z["elems"][torch.arange(len(elems), device=elems.device), elems.clamp(min=0)] * (elems >= 0)[:, None]
        return self.case(torch.cat([z["g"], chosen], -1))

    def snippet_logits(self, z: dict, elems: torch.Tensor) -> torch.Tensor:
        """Scores over [no snippet] + the head's literal texts for the text typed into ``elems``."""
        chosen = z["elems"][torch.arange(len(elems), device=elems.device), elems.clamp(min=0)] * (elems >= 0)[:, None]
        return self.snippet(torch.cat([z["g"], chosen], -1))

    def span_logits(self, z: dict, elems: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end scores over the copyable words for the text typed into ``elems`` (-1: into
        the focused field, no element chosen)."""
        chosen = z["elems"][torch.arange(len(elems), device=elems.device), elems.clamp(min=0)]
        chosen = chosen * (elems >= 0)[:, None]
        ok = self.copyable(z)
        u = z["units"]
        if self.cfg.features >= 3 and z["elem_lookup"] is not None:
            # set 3: the words of the element the chosen field's value is read from (the cell beside
            # the key its label or the instruction names), so the span is read there, not learnt
            b = torch.arange(len(elems), device=elems.device)
            src = torch.where(elems >= 0, z["elem_lookup"][b, elems.clamp(min=0)], -1)
            u = u + self.lookup(((z["uelem"] == src[:, None]) & (src[:, None] >= 0)).long())
        u = u * ok[..., None]
        q = (z["g"] + self.span_q(chosen))[:, None].expand_as(u)
        before, after = F.pad(u, (0, 0, 1, 0))[:, :-1], F.pad(u, (0, 0, 0, 1))[:, 1:]
        return (self.start(torch.cat([u, before, q, u * q], -1)).squeeze(-1).masked_fill(~ok, float("-inf")),
                self.end(torch.cat([u, after, q, u * q], -1)).squeeze(-1).masked_fill(~ok, float("-inf")))

    def cell_logits(self, z: dict) -> torch.Tensor:
        """Scores over the screen's image cells: which one holds the target the tree lacks."""
        q = z["g"][:, None].expand_as(z["img"])
        s = self.cell(torch.cat([z["img"], q, z["img"] * q], -1)).squeeze(-1)
        return s.masked_fill(~z["img_mask"], float("-inf"))

    def point_inputs(self, z: dict, cells: torch.Tensor) -> dict:
        """The DiT's condition for a point inside image cell ``cells``: [CLS, that cell's token] and
        the cell's bounds (in -1..1 of the screen) as its state."""
        B, dev = len(cells), cells.device
        b = torch.arange(B, device=dev)
        rows, cols = z["grid"][:, 0].float(), z["grid"][:, 1].float()
        r, c = (cells // z["grid"][:, 1]).float(), (cells % z["grid"][:, 1]).float()
        bounds = torch.stack([c / cols, r / rows, (c + 1) / cols, (r + 1) / rows], -1) * 2 - 1
        return dict(ctx=torch.stack([z["g"], z["img"][b, cells]], 1), state=bounds,
                    state_mask=torch.ones(B, 4, device=dev), emb_id=torch.zeros(B, dtype=torch.long, device=dev))

    def loss(self, batch: dict, generator: torch.Generator | None = None,
             mask_words: float = 0.0) -> tuple[torch.Tensor, dict]:
        from embodia.action_heads import flow_loss

        z = self.encode(batch, mask_words, generator)
        t = batch["label_type"]
        parts = {"type": F.cross_entropy(self.type_logits(z), t)}
        ch = batch.get("label_chord")
        if self.cfg.chords and ch is not None and (ch >= 0).any():
            parts["chord"] = F.cross_entropy(self.chord_logits(z)[ch >= 0], ch[ch >= 0])
        el = batch["label_elem"]
        has = el >= 0
        if has.any():
            parts["pointer"] = F.cross_entropy(self.pointer_logits(z, t)[has], el[has])
        sp = batch["label_start"] >= 0
        if sp.any():
            st, en = self.span_logits(z, el)
            parts["span"] = 0.5 * (F.cross_entropy(st[sp], batch["label_start"][sp])
                                   + F.cross_entropy(en[sp], batch["label_end"][sp]))
            cs = batch.get("label_case")
            if self.cfg.case and cs is not None and (cs >= 0).any():
                parts["case"] = F.cross_entropy(self.case_logits(z, el)[cs >= 0], cs[cs >= 0])
        sn = batch.get("label_snippet")
        if self.cfg.snippets and sn is not None and (sn >= 0).any():
            parts["snippet"] = F.cross_entropy(self.snippet_logits(z, el)[sn >= 0], sn[sn >= 0])
        pt = t == self.cfg.actions.index("click_point")
        if pt.any():
            cells = batch["label_cell"]
            parts["cell"] = F.cross_entropy(self.cell_logits(z)[pt], cells[pt])
            inp = {k: v[pt] for k, v in self.point_inputs(z, cells.clamp(min=0)).items()}
            parts["point"] = flow_loss(self.dit, batch["label_point"][pt][:, None],
                                       torch.ones(int(pt.sum()), 1, 2, device=t.device),
                                       inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"],
                                       generator=generator, repeats=4)
        return sum(parts.values()), {k: float(v.detach()) for k, v in parts.items()}

    @torch.no_grad()
    def decide(self, batch: dict, generator: torch.Generator | None = None) -> list[dict]:
        """Greedy decisions: type, element (tree position), instruction-word span, point in [-1, 1]."""
        from embodia.action_heads import sample

        z = self.encode(batch)
        tl = self.type_logits(z)
        dev = tl.device
        acts = self.cfg.actions
        for a in NEEDS_ELEMENT:                     # no element that can take it: not this type
            none = ~able(z, torch.full((len(tl),), acts.index(a), dtype=torch.long, device=dev)).any(1)
            tl[none, acts.index(a)] = float("-inf")
        nothing = ~self.copyable(z).any(1)          # nothing to copy: no typing, no wait read off the page
        for a in ("type", "type_focused", "wait"):
            if a in acts:
                tl[nothing, acts.index(a)] = float("-inf")
        types = tl.argmax(-1)
        pl = self.pointer_logits(z, types)
        elems = pl.argmax(-1)
        typed_into = torch.where(types == acts.index("type"), elems, -1)
        ops = self.case_logits(z, typed_into).argsort(-1, descending=True) if self.cfg.case else None
        across = ops[:, 0] == self.cfg.text_ops.index("joined") if self.cfg.compute else None
        best, L = self._best_span(z, typed_into, across)
        chords = self.chord_logits(z).softmax(-1) if self.cfg.chords else None
        cells = self.cell_logits(z).argmax(-1)
        inp = self.point_inputs(z, cells)
        pts = sample(self.dit, inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"],
                     torch.ones(len(types), 1, 2, device=dev),
                     steps=self.cfg.steps, generator=generator)[:, 0]
        tp, pp = tl.softmax(-1), pl.softmax(-1)
        out = [{"type": acts[int(types[b])], "type_p": float(tp[b, types[b]]), "element": int(elems[b]),
                "element_p": float(pp[b, elems[b]]), "span": (int(best[b] // L), int(best[b] % L)),
                "ops": [self.cfg.text_ops[int(k)] for k in ops[b]] if ops is not None else ["as written"],
                "cell": int(cells[b]),
                "point": pts[b].clamp(-1, 1).tolist()} for b in range(len(types))]
        if self.cfg.snippets:
            for b, k in enumerate(self.snippet_logits(z, typed_into).argmax(-1).tolist()):
                out[b]["snippet"] = self.cfg.snippets[k - 1] if k else None
        if chords is not None:
            for b, row in enumerate(out):
                k = int(chords[b].argmax())
                row.update(chord=self.cfg.chords[k], chord_p=float(chords[b, k]))
        return out

    def _best_span(self, z: dict, elems: torch.Tensor, across: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
        """The best (start, end) pair, flattened as start * L + end, of at most ``max_span`` words;
        a span copied from the tree stays inside one element's text, except in the rows of
        ``across`` (words to be joined), which may run over consecutive elements' texts (at most
        `JOIN_UNITS` units, from a text to a text)."""
        st, en = self.span_logits(z, elems)
        L, dev = st.shape[1], st.device
        score = st[:, :, None] + en[:, None, :]
        i, j = torch.arange(L, device=dev)[:, None], torch.arange(L, device=dev)[None, :]
        ok = (j >= i) & (j - i < self.cfg.max_span)
        if self.cfg.copy_tree:      # one element's text, or its value (feature set 2)
            src = z["uelem"] * 2 + (z["fld"] == F_VALUE).long()
            ok = ok & (src[:, :, None] == src[:, None, :])
            if across is not None and across.any():
                tree = (z["seg"] == SEG_TREE) & (z["fld"] == F_TEXT)
                run = (j >= i) & (j - i < JOIN_UNITS) & tree[:, :, None] & tree[:, None, :]
                ok = torch.where(across[:, None, None], ok | run, ok)
        return score.masked_fill(~ok, float("-inf")).flatten(1).argmax(-1), L


def able(z: dict, types: torch.Tensor) -> torch.Tensor:
    """[B, E] which elements can take an action of type ``types`` (element features 4 = clickable,
    8 = scrollable, see `SequenceBuilder.encode`)."""
    feats, mask = z["elem_feats"], z["elem_mask"]
    scroll = (types == ACTIONS.index("scroll_down")) | (types == ACTIONS.index("scroll_up"))
    flag = torch.where(scroll[:, None], feats[..., 8], feats[..., 4]) > 0.5
    return mask & flag


# -- files ------------------------------------------------------------------------------------------
def has_gui_head(checkpoint) -> bool:
    p = Path(checkpoint)
    return (p / HEAD_WEIGHTS).is_file() and (p / HEAD_CONFIG).is_file()


def save_gui_head(head: GuiHead, checkpoint, *, extra: dict | None = None) -> None:
    """Write gui_head.safetensors + gui_head.json into a checkpoint directory (each replaced
    atomically); nothing else in the directory is touched."""
    from safetensors.torch import save

    p = Path(checkpoint)
    meta = {"format": FORMAT, "config": asdict(head.cfg), "backbone_sha256": backbone_sha256(p), **(extra or {})}
    weights = save({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()})
    write_atomic(p / HEAD_WEIGHTS, lambda f: f.write(weights))
    write_atomic(p / HEAD_CONFIG, lambda f: f.write((json.dumps(meta, indent=2) + "\n").encode()))


def load_gui_head(checkpoint, backbone: Backbone | None = None) -> tuple[GuiHead, Backbone, dict]:
    """(head, backbone, meta) from a checkpoint directory; the backbone is loaded from its
    ``backbone/`` folder unless given."""
    p = Path(checkpoint)
    meta, weights = read_head_files(p, HEAD_WEIGHTS, HEAD_CONFIG, FORMAT, GuiHeadError, what="GUI head",
                                    retrain=f"`embodia train gui-head --out {p}`")
    cfg = GuiHeadConfig(**{k: v for k, v in meta["config"].items() if k in GuiHeadConfig.__dataclass_fields__})
    backbone = backbone or Backbone.from_pretrained(p / "backbone")
    head = GuiHead(cfg, backbone.hidden_size)
    missing, unexpected = head.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise GuiHeadError(f"{p / HEAD_WEIGHTS}: keys do not match the config "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    return head.eval(), backbone, meta


def extend_vocabulary(head: GuiHead, *, actions=ACTIONS_V2, chords=CHORDS, copy_tree: bool = True,
                      features: int | None = None, case: bool = False, spell: bool | None = None,
                      compute: bool = False, snippets: tuple = (), **reading) -> GuiHead:
    """A copy of ``head`` with a larger action vocabulary (and, with ``features``, a later element
    feature set), every trained weight kept: the new action types are appended (old indices
    unchanged), so the type head's and type embedding's old rows carry over and only the new rows
    and the chord head start fresh; the element inputs a later feature set adds come after the old
    ones and start at zero weight, so the copy reads a page as the old head did until fine-tuning
    teaches it the new ones. ``case``: the copy may also type copied words in upper or lower case
    (its case head starts fresh). ``compute``: it may also type a computed answer (`text_ops`; the
    case head's rows for the cases carry over, the new ones start fresh); ``snippets``: literal
    texts it may type (their head starts fresh); ``reading``: other `GuiHeadConfig` fields of how it
    reads a page (``max_text_words``, ``long_tail``). ``spell`` (None: as ``head``): the copy also reads the spelling
    columns (`embodia.policies.gui.head_spell`), through a projection that starts at zero."""
    cfg = replace(head.cfg, actions=tuple(actions), chords=tuple(chords), copy_tree=copy_tree,
                  features=head.cfg.features if features is None else features, case=case or compute,
                  compute=compute, snippets=tuple(snippets), **reading,
                  spell=head.cfg.spell if spell is None else spell)
    new = GuiHead(cfg, head.hidden)
    state = new.state_dict()
    for k, v in head.state_dict().items():
        rows = tuple(slice(0, n) for n in v.shape)
        if k == "elem.weight" and state[k].shape != v.shape:
            state[k].zero_()
        state[k][rows] = v          # same shape: all of it; type head / embedding: the old rows
    new.load_state_dict(state)
    return new


# -- the policy -------------------------------------------------------------------------------------
class GuiHeadPolicy(Policy):
    """Policy protocol for GUI devices over a checkpoint's GUI head: one `GuiAction` per decision.

    It remembers its own actions of the episode (the history the head reads: which categories it
    has already looked in, what it has typed); `reset` forgets them.
    """

    loop_threads = True        # a bundled-size model, at the runtime's torch threads

    def __init__(self, head: GuiHead, backbone: Backbone, *, embodiment=None, threads: int | None = None,
                 torch_device: str | None = None, dtype: str | None = None):
        """``torch_device`` / ``dtype`` as `VLAPolicy`'s (`embodia.policies.placement`); the dtype is the
        backbone's: the head itself, a few million parameters over float16 feature caches, stays float32."""
        self.placement = Placement.resolve(torch_device, dtype)
        dev = self.placement.device
        self.head = head.to(dev).eval()
        self.backbone = backbone.to(device=dev, dtype=self.placement.dtype).eval()
        self.builder = SequenceBuilder(backbone, head.cfg)
        self.embodiment = embodiment
        if threads:
            torch.set_num_threads(threads)
        self.reset(None)

    @classmethod
    def from_pretrained(cls, checkpoint, **kw) -> "GuiHeadPolicy":
        head, backbone, _ = load_gui_head(checkpoint)
        return cls(head, backbone, **kw)

    def bind(self, embodiment) -> "GuiHeadPolicy":
        if not embodiment.is_gui:
            raise GuiHeadError(f"the GUI head drives screens, not {embodiment.name!r}")
        self.embodiment = embodiment
        return self

    def reset(self, seed: int | None = None) -> None:
        self.generator = torch.Generator(device=self.placement.device).manual_seed(0 if seed is None else int(seed))
        self.history: list[str] = []
        self.last: dict = {}

    def features(self, obs: Observation, instruction: str) -> tuple[Encoded, dict]:
        """The decision's encoding and what the head reads of it (the same float16 features
        training cached)."""
        if obs.ui_tree is None:
            raise GuiHeadError("the GUI head reads a UI tree; this device gives none")
        screen = obs.images.get("screen") if obs.images else None
        if screen is None:
            raise GuiHeadError("the GUI head reads observation.images.screen; the observation has none")
        size = (obs.screen.width, obs.screen.height) if obs.screen is not None else (screen.shape[1], screen.shape[0])
        prompt = self.embodiment.prompt() if self.embodiment is not None else ""
        enc = self.builder.encode(prompt, instruction, self.history, obs.ui_tree, size, screen)
        return enc, backbone_features(self.backbone, [enc])[0]

    @torch.inference_mode()
    def act(self, obs: Observation, instruction: str) -> GuiAction:
        enc, feats = self.features(obs, instruction)
        d = self.head.decide(to_device(collate([feats]), self.placement.device), generator=self.generator)[0]
        action = to_action(d, enc, instruction)
        self.last = {k: d[k] for k in ("type", "type_p", "element_p")}
        if d["type"] == "key":
            self.last.update(chord=d["chord"], chord_p=d["chord_p"])
        self.history.append(describe(action, obs.ui_tree))
        return action

    def info(self) -> dict:
        return {"head": "gui", **({"last": self.last} if self.last else {})}

    def teacher_force(self, obs: Observation, executed: GuiAction) -> None:
        """The recorded action replaces the head's own latest one in its word history."""
        if self.history:
            self.history[-1] = describe(executed, obs.ui_tree)
