"""The screen memory's key: a hashing-trick featurizer of the instruction template, the visible
elements and the page name."""
from __future__ import annotations

import hashlib
import math
import re
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from embodia.memory.screen_refs import (
    PLACEHOLDER,
    element_ref,
    abstract_instruction,
    value_class,
)

# ------------------------------------------------------------------------------------------------
# the key: a hashing-trick featurizer
# ------------------------------------------------------------------------------------------------
_WORD = re.compile(r"\{\w+(?: \w+)*\}|[\w'-]+")


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
    checked/focused/disabled state, what its field holds (`value_class`: empty, a slot, something else) and
    the page name, each block L2-normalised, weighted and summed, the sum L2-normalised.
    Deterministic across processes (blake2b, not Python's salted ``hash``). v2: field values, slot
    values abstracted inside longer texts, states named by their slot, disabled controls; a memory
    keyed by v1 is refused on load (`MemoryMismatch`), not read with mismatched keys. Digits stay
    literal: a calculator's display is its state (reading numbers as "#" made every display one
    screen, and loop erasure dropped the steps between them), though MiniWoB's page clock ("Time
    left: 9 / 10sec") then keeps loop erasure from dropping a click that changed nothing.

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
        return f"screen-hash-uni-bi/v2/dim={self.dim}/seed={self.seed}/w={','.join(map(str, self.weights))}"

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
            r = element_ref(el, slots)
            toks.append("r:" + r["role"])
            if r["id"]:
                toks.append("d:" + r["id"])
                toks.append("dp:" + r["id"].split("_")[0])
            toks += _grams(r["text"], "t:") + _grams(r["desc"], "c:")
            toks.append("e:" + r["role"] + "|" + r["text"].lower())
            # a state is named by the slot that labels the element when one does (MiniWoB's radio
            # ids are positions: "ch2 is checked" is another option in the next instance)
            name = r["text"] if PLACEHOLDER.search(r["text"]) else (r["id"] or r["text"])
            for state in ("checked", "focused"):
                if el.get(state):
                    toks.append(f"s:{state}:{name}")
            if el.get("enabled") is False:
                toks.append(f"s:disabled:{name}")
            filled = value_class(el, slots)
            if filled is not None:
                toks.append(f"v:{r['id'] or r['role']}:{filled or '-'}")
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
