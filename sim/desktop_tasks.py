"""The desktop bench's tasks: the three apps (galculator, mousepad, gnumeric), the words and
names each split draws from, and per task its instruction, its check on the app's own state (the
calculator's display, the file on disk, the cells ssconvert reads back) and its expert's steps. The
device that runs them is `embodia.sim.desktop_bench`."""
from __future__ import annotations

import csv
import io
import random
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from embodia.devices.actions import GuiAction
from embodia.devices.desktop import DesktopDevice


class AppMissing(RuntimeError):
    """The bench application is not installed here."""


@dataclass
class App:
    name: str
    binary: str
    package: str                  # the Debian package that installs it
    window: str                   # a substring of its main window's title
    args: Callable[[Path, dict], list[str]] = lambda work, v: []


APPS = {
    "galculator": App("galculator", "galculator", "galculator", "galculator"),
    "mousepad": App("mousepad", "mousepad", "mousepad", "Mousepad",
                    lambda work, v: [str(work / v["file"])] if v.get("open") else []),
    "gnumeric": App("gnumeric", "gnumeric", "gnumeric", "Gnumeric", lambda work, v: [str(work / v["file"])]),
}

WORDS = {"train": ["apple", "river", "stone", "cloud", "maple", "tiger", "amber", "cedar", "delta", "ember"],
         "test": ["harbor", "violet", "quartz", "meadow", "falcon", "lumen", "orchid", "saffron", "tundra",
                  "zephyr"]}
NAMES = {"train": ["notes", "todo", "draft", "plan", "memo"], "test": ["report", "journal", "ledger",
                                                                        "agenda", "summary"]}


# -- variations ----------------------------------------------------------------------------------------
def _num(rng: random.Random, split: str) -> int:
    """Held-out values: train draws 2..299, test 300..999."""
    return rng.randint(2, 299) if split == "train" else rng.randint(300, 999)


def _phrase(rng: random.Random, split: str, n: int = 3) -> str:
    return " ".join(rng.sample(WORDS[split], n))


def _file(rng: random.Random, split: str, ext: str) -> str:
    return f"{rng.choice(NAMES[split])}-{rng.randint(10, 99)}.{ext}"


def _calc(op: str):
    def make(rng, split):
        a, b = _num(rng, split), _num(rng, split) % 97 + 2
        if op == "-" and a < b:
            a, b = b, a
        # the display shows b just before "=": the result must differ from it
        if op == "-" and a == 2 * b:
            a += 1
        if op == "/":
            a = (a + (a == b)) * b          # a whole quotient, not equal to b
        result = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
        word = {"+": "+", "-": "-", "*": "×", "/": "÷"}[op]
        return {"a": a, "b": b, "op": op, "result": result,
                "instruction": f"Compute {a} {word} {b} with the calculator."}
    return make


def _cell(rng, split) -> str:
    return f"{rng.choice('BCDE')}{rng.randint(2, 9)}"


@dataclass
class Task:
    app: str
    name: str
    make: Callable[[random.Random, str], dict]       # variation: slots + "instruction"
    files: Callable[[Path, dict], None] = lambda work, v: None
    check: Callable[[DesktopDevice], bool] = lambda dev: False
    expert: Callable[[DesktopDevice, dict, list], GuiAction | None] = lambda dev, mem, tree: None
    multi_step: bool = False
    extra: dict = field(default_factory=dict)


# -- tree helpers --------------------------------------------------------------------------------------
def find(tree: list, *, text=None, role=None, editable=None, where=None) -> dict | None:
    """The first element with that text (exact, after stripping mnemonics and ellipses), role, ..."""
    for e in tree or []:
        if text is not None and _clean(e.get("text", "")) != _clean(text):
            continue
        if role is not None and e.get("role") not in ((role,) if isinstance(role, str) else role):
            continue
        if editable is not None and bool(e.get("editable")) != editable:
            continue
        if where is not None and not where(e):
            continue
        return e
    return None


def _clean(s: str) -> str:
    return s.replace("_", "").replace("…", "").replace("...", "").replace("’", "'").strip().lower()


def click(e: dict) -> GuiAction:
    return GuiAction("click", element=e["index"])


# -- galculator ----------------------------------------------------------------------------------------
def calc_display(tree) -> str | None:
    e = find(tree, role="text", where=lambda e: e.get("app") == "galculator")
    return None if e is None else (e.get("value") or e.get("text") or "").strip()


def _calc_check(dev) -> bool:
    shown = calc_display(dev.observe_tree())
    try:
        return shown is not None and float(shown.replace(",", "")) == float(dev.slots["result"])
    except ValueError:
        return False


def calc_keys(v) -> list[str]:
    # No "AC" first: a fresh instance shows 0, and the gate reads AC's description "Reset calculator
    # (clear all)" as a delete (a false positive of label matching, left to the gate's own issue).
    return [*str(v["a"]), v["op"], *str(v["b"]), "="]


def _calc_shown_after(v) -> list[str | None]:
    """What the display shows after each key of `calc_keys` (None: not checked, after an operator)."""
    a, b = str(v["a"]), str(v["b"])
    return [a[:i + 1] for i in range(len(a))] + [None] + [b[:i + 1] for i in range(len(b))] + [str(v["result"])]


def _calc_expert(dev, mem, tree):
    """Presses the keys in order, checking the display after each digit: a press the calculator
    did not take (the display still shows the state before it) is pressed again."""
    keys, shown = calc_keys(dev.slots), _calc_shown_after(dev.slots)
    i = mem.get("pressed", 0)
    if i > 0 and shown[i - 1] is not None:
        now = calc_display(tree)
        before = next((x for x in reversed(shown[:i - 1]) if x is not None), "0")
        if now is not None and now != shown[i - 1] and now == before and mem.get("retries", 0) < 3:
            mem["retries"] = mem.get("retries", 0) + 1
            i -= 1                               # not taken: press it again
    if i >= len(keys):
        return None
    e = find(tree, text=keys[i], role=("push button", "toggle button"))
    if e is None:
        return GuiAction("wait", duration_ms=200)
    mem["pressed"] = i + 1
    return click(e)


# -- mousepad ------------------------------------------------------------------------------------------
def editor(tree) -> dict | None:
    return find(tree, role="text", editable=True, where=lambda e: e["bounds"][3] - e["bounds"][1] > 100)


def _editor_files(work: Path, v: dict) -> None:
    if v.get("open"):
        (work / v["file"]).write_text(v["initial"], encoding="utf-8")


def _mp_type(rng, split):
    text = _phrase(rng, split)
    return {"text": text, "instruction": f"Type '{text}' into the empty document."}


def _mp_append(rng, split):
    name, line = _file(rng, split, "txt"), _phrase(rng, split, 2)
    initial = "".join(f"{w}\n" for w in rng.sample(WORDS[split], 3))
    return {"file": name, "open": True, "initial": initial, "line": line, "expected": initial + line + "\n",
            "instruction": f"Add the line '{line}' at the end of {name} and save it."}


def _mp_saveas(rng, split):
    name, text = _file(rng, split, "txt"), _phrase(rng, split)
    return {"file": name, "text": text, "expected": text,
            "instruction": f"Write '{text}' in a new document and save it as {name}."}


def _mp_discard(rng, split):
    name, text = _file(rng, split, "txt"), _phrase(rng, split, 2)
    initial = "".join(f"{w}\n" for w in rng.sample(WORDS[split], 2))
    return {"file": name, "open": True, "initial": initial, "text": text,
            "instruction": f"Type '{text}' into {name}, then close it without saving."}


def _disk(dev, name) -> str | None:
    try:
        return (dev.work / name).read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _mp_type_expert(dev, mem, tree):
    ed = editor(tree)
    if ed is None:
        return GuiAction("wait", duration_ms=200)
    if (ed.get("value") or "") == dev.slots["text"]:
        return None
    return GuiAction("type", text=dev.slots["text"], element=ed["index"])


def _mp_append_expert(dev, mem, tree):
    ed = editor(tree)
    step = mem.setdefault("step", 0)
    if ed is None:
        return GuiAction("wait", duration_ms=200)
    mem["step"] += 1
    if step == 0:
        return click(ed)
    if step == 1:
        return GuiAction("key", keys=("ctrl", "end"))
    if step == 2:
        return GuiAction("type", text=dev.slots["line"] + "\n")
    if step == 3:
        return GuiAction("key", keys=("ctrl", "s"))
    return None


def _menu_path(tree, mem, menu: str, item: str):
    """Open ``menu`` (a menu bar entry) and click ``item`` in it, through the tree."""
    it = find(tree, text=item, role=("menu item", "check menu item"))
    if it is not None:
        return click(it)
    m = find(tree, text=menu, role="menu")
    return click(m) if m is not None else GuiAction("wait", duration_ms=200)


def _dialog_name_entry(tree):
    """The file chooser's name field: an editable, single-line entry in a 'Save As' window."""
    return find(tree, role=("text", "entry"), editable=True,
                where=lambda e: "save" in e.get("window", "").lower() and e["bounds"][3] - e["bounds"][1] < 60)


def _mp_saveas_expert(dev, mem, tree):
    path = str(dev.work / dev.slots["file"])
    entry = _dialog_name_entry(tree)
    if entry is not None:
        if (entry.get("value") or "") != path:
            if not entry.get("focused"):
                return click(entry)
            mem["typed"] = mem.get("typed", 0) + 1
            return GuiAction("key", keys=("ctrl", "a")) if mem["typed"] % 2 else GuiAction("type", text=path)
        save = find(tree, text="Save", role="push button", where=lambda e: "save" in e.get("window", "").lower())
        return click(save) if save is not None else GuiAction("key", keys=("enter",))
    if _disk(dev, dev.slots["file"]) is not None:
        return None
    ed = editor(tree)
    if ed is None:
        return GuiAction("wait", duration_ms=200)
    if (ed.get("value") or "") != dev.slots["text"]:
        return GuiAction("type", text=dev.slots["text"], element=ed["index"])
    return _menu_path(tree, mem, "File", "Save As")


def _discard_button(tree):
    for label in ("Don't Save", "Discard", "Close without Saving", "Close without saving", "Discard all"):
        e = find(tree, text=label, role="push button")
        if e is not None:
            return e
    return None


def _close_discarding(work):
    """An expert that does ``work`` (which ends by closing the window), then presses the close
    dialog's discard button once it shows, and does nothing more after that."""
    def expert(dev, mem, tree):
        b = _discard_button(tree)
        if b is not None:
            mem["discarded"] = True
            return click(b)
        if mem.get("discarded"):
            return None
        return work(dev, mem, tree)
    return expert


def _mp_type_then_close(dev, mem, tree):
    ed = editor(tree)
    if ed is None:
        return GuiAction("wait", duration_ms=200)
    if dev.slots["text"] not in (ed.get("value") or ""):
        return GuiAction("type", text=dev.slots["text"], element=ed["index"])
    return _menu_path(tree, mem, "File", "Close Tab") if find(tree, text="Close Tab") else \
        GuiAction("key", keys=("ctrl", "w"))


def _closed_unchanged(dev) -> bool:
    gone = dev.proc is not None and dev.proc.poll() is not None or not dev.app_windows()
    return gone and _disk(dev, dev.slots["file"]) == dev.slots["initial"]


# -- gnumeric ------------------------------------------------------------------------------------------
def _sheet_files(work: Path, v: dict) -> None:
    rows = v.get("grid", [[""]])
    src = work / (Path(v["file"]).stem + ".csv")
    src.write_text("\n".join(",".join(str(c) for c in r) for r in rows) + "\n", encoding="utf-8")
    subprocess.run(["ssconvert", str(src), str(work / v["file"])], check=True, capture_output=True, timeout=30)
    src.unlink()


def read_cells(path: Path) -> list[list[str]] | None:
    """A saved workbook's first sheet as rows of strings, read back with gnumeric's ssconvert."""
    if not path.exists():
        return None
    out = path.with_suffix(".check.csv")
    r = subprocess.run(["ssconvert", "-T", "Gnumeric_stf:stf_csv", str(path), str(out)], capture_output=True,
                       timeout=30)
    if r.returncode != 0 or not out.exists():
        return None
    rows = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8"))))
    out.unlink()
    return rows


def _at(rows, ref: str) -> str:
    m = re.fullmatch(r"([A-Z])(\d+)", ref)
    col, row = ord(m.group(1)) - 65, int(m.group(2)) - 1
    return rows[row][col] if rows and row < len(rows) and col < len(rows[row]) else ""


def _sheet_check(dev) -> bool:
    mtime = _mtime(dev)
    if mtime is None or mtime == dev.memory.get("start_mtime"):
        return False               # not saved since the episode began: no need to read it back
    rows = read_cells(dev.work / dev.slots["file"])
    return rows is not None and _at(rows, dev.slots["cell"]).strip() == str(dev.slots["expect"])


def _sheet_set(rng, split):
    cell, value = _cell(rng, split), _num(rng, split)
    return {"file": _file(rng, split, "gnumeric"), "cell": cell, "entry": str(value), "expect": value,
            "grid": [["label", "x"]],
            "instruction": f"Put {value} in cell {cell} and save the workbook."}


def _sheet_sum(rng, split):
    vals = [_num(rng, split) for _ in range(3)]
    return {"file": _file(rng, split, "gnumeric"), "cell": "A4", "entry": "=SUM(A1:A3)", "expect": sum(vals),
            "grid": [[v] for v in vals], "instruction": "Put the sum of A1:A3 in A4 and save the workbook."}


def _sheet_product(rng, split):
    a, b = _num(rng, split), rng.randint(2, 9)
    return {"file": _file(rng, split, "gnumeric"), "cell": "C1", "entry": "=A1*B1", "expect": a * b,
            "grid": [[a, b]], "instruction": "Put A1 times B1 in C1 and save the workbook."}


def _sheet_word(rng, split):
    cell, word = _cell(rng, split), rng.choice(WORDS[split])
    return {"file": _file(rng, split, "gnumeric"), "cell": cell, "entry": word, "expect": word,
            "grid": [["name", "qty"]], "instruction": f"Write '{word}' in cell {cell} and save the workbook."}


def name_box(tree) -> dict | None:
    """Gnumeric's name box: the editable field holding the current cell's reference."""
    return find(tree, role="text", editable=True,
                where=lambda e: re.fullmatch(r"[A-Z]+[0-9]+", (e.get("value") or "").strip()) is not None
                and e["bounds"][0] < 100)


def _sheet_expert(dev, mem, tree):
    nb = name_box(tree)
    if nb is None:
        return GuiAction("wait", duration_ms=200)
    step = mem.setdefault("step", 0)
    cell = dev.slots["cell"]
    if step == 0:                      # go to the cell through the name box
        mem["step"], mem["waits"] = 1, 0
        return GuiAction("click", element=nb["index"])
    if step == 1:
        # keys go where the focus is: typing before the name box has it (a window that has just come
        # up takes the first click as its own) writes the cell reference into the sheet's A1
        if not nb.get("focused"):
            return _sheet_wait(mem, back_to=0, looks=2)
        mem["step"] = 2
        return GuiAction("key", keys=("ctrl", "a"))
    if step == 2:
        mem["step"], mem["waits"] = 3, 0
        return GuiAction("type", text=cell + "\n")
    if step == 3:
        # the jump is done when the name box shows the cell and has given the focus back to the sheet
        if (nb.get("value") or "").strip() != cell or nb.get("focused"):
            return _sheet_wait(mem, back_to=0)
        mem["step"] = 4
        return GuiAction("type", text=dev.slots["entry"] + "\n")
    if step == 4:
        mem["step"], mem["waits"], mem["before_save"] = 5, 0, _mtime(dev)
        return GuiAction("key", keys=("ctrl", "s"))
    if _mtime(dev) == mem["before_save"] and mem["waits"] < SHEET_WAITS:
        mem["waits"] += 1              # the file reaches the disk a moment after the keys
        return GuiAction("wait", duration_ms=300)
    return None


SHEET_WAITS = 6    # the expert looks up to 6 times, 0.3 s apart, before it does a step again


def _sheet_wait(mem, back_to: int, looks: int = SHEET_WAITS) -> GuiAction:
    """Wait for gnumeric to catch up with the keys; after ``looks`` looks, go back to step ``back_to``."""
    mem["waits"] = mem.get("waits", 0) + 1
    if mem["waits"] > looks:
        mem["step"], mem["waits"] = back_to, 0
    return GuiAction("wait", duration_ms=300)


def _mtime(dev) -> float | None:
    path = dev.work / dev.slots["file"]
    return path.stat().st_mtime if path.exists() else None


def _sheet_discard(rng, split):
    v = _sheet_set(rng, split)
    v.update(instruction=f"Put {v['entry']} in cell {v['cell']}, then close the workbook without saving.")
    return v


def _sheet_set_then_close(dev, mem, tree):
    if mem.get("step", 0) < 4:
        return _sheet_expert(dev, mem, tree)
    mem["step"] = 5
    return GuiAction("key", keys=("ctrl", "w"))


def _sheet_closed_unchanged(dev) -> bool:
    gone = dev.proc is not None and dev.proc.poll() is not None or not dev.app_windows()
    return gone and (dev.work / dev.slots["file"]).stat().st_mtime == dev.memory.get("start_mtime")


TASKS: dict[str, Task] = {t.app + "/" + t.name: t for t in [
    Task("galculator", "add", _calc("+"), check=_calc_check, expert=_calc_expert),
    Task("galculator", "subtract", _calc("-"), check=_calc_check, expert=_calc_expert),
    Task("galculator", "multiply", _calc("*"), check=_calc_check, expert=_calc_expert),
    Task("galculator", "divide", _calc("/"), check=_calc_check, expert=_calc_expert),
    Task("mousepad", "type", _mp_type, check=lambda d: (editor(d.observe_tree()) or {}).get("value") ==
         d.slots["text"], expert=_mp_type_expert),
    Task("mousepad", "append-save", _mp_append, _editor_files,
         check=lambda d: _disk(d, d.slots["file"]) == d.slots["expected"], expert=_mp_append_expert,
         multi_step=True),
    Task("mousepad", "save-as", _mp_saveas, check=lambda d: _disk(d, d.slots["file"]) == d.slots["expected"],
         expert=_mp_saveas_expert, multi_step=True),
    Task("mousepad", "close-discard", _mp_discard, _editor_files, check=_closed_unchanged,
         expert=_close_discarding(_mp_type_then_close), multi_step=True),
    Task("gnumeric", "set-cell", _sheet_set, _sheet_files, _sheet_check, _sheet_expert, True),
    Task("gnumeric", "sum", _sheet_sum, _sheet_files, _sheet_check, _sheet_expert, True),
    Task("gnumeric", "product", _sheet_product, _sheet_files, _sheet_check, _sheet_expert, True),
    Task("gnumeric", "word", _sheet_word, _sheet_files, _sheet_check, _sheet_expert, True),
    Task("gnumeric", "close-discard", _sheet_discard, _sheet_files, _sheet_closed_unchanged,
         _close_discarding(_sheet_set_then_close), True),
]}
