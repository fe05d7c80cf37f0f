"""The scripted experts of the MiniWoB++ tasks (`embodia.sim.miniwob`): one plan function per task,
``plan(instruction, tree, memo) -> GuiAction``, that reads only what a model sees (the instruction
and the UI tree, as the browser device gives it) and returns one action per step; `TreeExpert`
turns a plan into a policy; `embodia.sim.miniwob.EXPERTS` joins this module's ``EXPERTS`` with
those of `embodia.sim.miniwob_experts_more`. Which tasks have one, and why the others do not, is in
`embodia.sim.miniwob`'s module doc; their success on held-out seeds is in
docs/benchmarks/miniwob.md.
"""
from __future__ import annotations

import re

from embodia.devices.actions import GuiAction
from embodia.policies.base import Policy

__all__ = ["EXPERTS", "TreeExpert"]

QUERY_BOTTOM = 45          # pixels: MiniWoB's instruction bar (#query) ends above this, the task area starts


# -- scripted experts: from the instruction and the tree, one action per step ----------------------
class TreeExpert(Policy):
    """A policy from a plan function ``plan(instruction, tree, memo) -> GuiAction``; it looks only at
    what a model sees (the instruction and the UI tree), so its demonstrations can be imitated.
    ``memo`` is the episode's scratch pad (what the expert already typed: a password field does not
    show its text)."""

    def __init__(self, plan):
        self.plan = plan
        self.memo: dict = {}

    def reset(self, seed=None) -> None:
        self.memo = {}

    def act(self, obs, instruction: str) -> GuiAction:
        action = self.plan(instruction, obs.ui_tree or [], self.memo)
        return action if action is not None else GuiAction("wait", duration_ms=100)


def quoted(instruction: str) -> list[str]:
    return re.findall(r'"([^"]*)"', instruction)


def find_element(tree, role=None, text=None, **fields):
    """The first element with that role (or one of those roles), exact text and field values."""
    for e in tree:
        if role is not None and e.get("role") not in ((role,) if isinstance(role, str) else role):
            continue
        if text is not None and (e.get("text") or "").strip() != text:
            continue
        if all(e.get(k) == v for k, v in fields.items()):
            return e
    return None


def click_on(e) -> GuiAction | None:
    return GuiAction("click", element=e["index"]) if e is not None else None


def fill_once(field, value: str, memo: dict, key) -> GuiAction | None:
    """Type ``value`` into ``field`` once per episode (a password field never shows what it holds)."""
    if field is None or memo.get(key):
        return None
    memo[key] = True
    return GuiAction("type", element=field["index"], text=value)


def button_named(tree, *names):
    for name in names:
        e = find_element(tree, "push button", name)
        if e is not None:
            return e
    return None


def click_button(instruction, tree, memo):
    return click_on(find_element(tree, "push button", quoted(instruction)[0]))


def click_link(instruction, tree, memo):
    target = quoted(instruction)[0]
    return click_on(next((e for e in tree if e.get("clickable") and e.get("text") == target), None))


def click_test(instruction, tree, memo):
    return click_on(find_element(tree, "push button"))


def click_test_2(instruction, tree, memo):
    m = re.search(r"button (\S+?)\.?$", instruction)
    return click_on(find_element(tree, "push button", m.group(1) if m else "ONE"))


def enter_text(instruction, tree, memo):
    return fill_once(find_element(tree, "entry"), quoted(instruction)[0], memo, "entry") or click_on(button_named(tree, "Submit"))


def enter_text_2(instruction, tree, memo):
    text = quoted(instruction)[0]
    text = text.upper() if "upper case" in instruction else text.lower()
    return fill_once(find_element(tree, "entry"), text, memo, "entry") or click_on(button_named(tree, "Submit"))


def enter_password(instruction, tree, memo):
    password = quoted(instruction)[0]
    for i, field in enumerate(e for e in tree if e.get("role") == "password text"):
        action = fill_once(field, password, memo, i)
        if action is not None:
            return action
    return click_on(button_named(tree, "Submit", "submit"))


def login_user(instruction, tree, memo):
    user, password = quoted(instruction)[:2]
    return (fill_once(find_element(tree, "entry"), user, memo, "user")
            or fill_once(find_element(tree, "password text"), password, memo, "password")
            or click_on(button_named(tree, "Login", "login")))


def focus_text(instruction, tree, memo):
    entry = find_element(tree, "entry")
    return None if entry is None or entry.get("focused") else click_on(entry)


def focus_text_2(instruction, tree, memo):
    m = re.search(r"(\d)(st|nd|rd|th) input", instruction)
    entries = [e for e in tree if e.get("role") == "entry"]
    k = int(m.group(1)) - 1 if m else 0
    return click_on(entries[k]) if k < len(entries) and not entries[k].get("focused") else None


def click_checkboxes(instruction, tree, memo):
    m = re.match(r"Select (.*) and click Submit\.", instruction)
    wanted = {w.strip() for w in m.group(1).split(",") if w.strip()} if m else set()
    for box in (e for e in tree if e.get("role") == "check box"):
        if (box.get("text", "").strip() in wanted) != bool(box.get("checked")):
            return click_on(box)
    return click_on(button_named(tree, "Submit"))


def click_option(instruction, tree, memo):
    m = re.match(r"Select (.*) and click Submit\.", instruction)
    radio = find_element(tree, "radio button", m.group(1).strip()) if m else None
    if radio is not None and not radio.get("checked"):
        return click_on(radio)
    return click_on(button_named(tree, "Submit"))


def click_dialog(instruction, tree, memo):
    return click_on(button_named(tree, "Close", "close", "×", "x"))


def click_dialog_2(instruction, tree, memo):
    label = quoted(instruction)[0]
    return click_on(button_named(tree, "Close") if label.lower() == "x" else button_named(tree, label))


WIDGET_ROLES = {"button": ("push button",), "checkbox": ("check box",), "radio": ("radio button",),
                "text": ("entry",), "textarea": ("text",)}


def click_widget(instruction, tree, memo):
    roles = WIDGET_ROLES.get(quoted(instruction)[0], ())
    return click_on(next((e for e in tree if e.get("role") in roles), None))


def click_tab(instruction, tree, memo):
    m = re.search(r"Tab #(\d)", instruction)
    return click_on(find_element(tree, ("page tab", "link"), f"Tab #{m.group(1)}") if m else None)


def next_step(memo: dict, key, actions: list) -> GuiAction | None:
    """The next of a fixed sequence of actions (``memo`` counts how many ran)."""
    i = memo.get(key, 0)
    if i >= len(actions) or actions[i] is None:
        return None
    memo[key] = i + 1
    return actions[i]


def _replace(field, text: str, memo: dict, key) -> GuiAction | None:
    """Replace a field's content: focus it, select all (ctrl+a), type; once per episode."""
    if field is None:
        return None
    return next_step(memo, key, [click_on(field), GuiAction("key", keys=("ctrl", "a")), GuiAction("type", text=text)])


def click_button_sequence(instruction, tree, memo):
    names = re.findall(r"button (\w+)", instruction)
    return next_step(memo, "seq", [click_on(find_element(tree, "push button", n)) for n in names])


def click_collapsible(instruction, tree, memo):
    header = next((e for e in tree if e.get("role") == "page tab" and e.get("text", "").startswith("Section")), None)
    return next_step(memo, "open", [click_on(header)]) or click_on(button_named(tree, "Submit", "submit"))


def choose_list(instruction, tree, memo):
    m = re.match(r"Select (.*) from the list and click Submit\.", instruction)
    box = find_element(tree, "combo box")
    if m and box is not None and box.get("value") != m.group(1):
        return next_step(memo, "pick", [click_on(box), GuiAction("type", text=m.group(1)), GuiAction("key", keys=("enter",))])
    return click_on(button_named(tree, "Submit"))


def click_start(field) -> GuiAction:
    """A click near the left end of a field: in a date field, on its first part (the month), which
    typed digits then fill part by part."""
    x0, y0, x1, y1 = field["box"]
    return GuiAction("click", point=(x0 + max(1.0, (x1 - x0) * 0.08), (y0 + y1) / 2))


def enter_date(instruction, tree, memo):
    m = re.search(r"Enter (\d\d)/(\d\d)/(\d{4})", instruction)
    field = find_element(tree, "date")
    typed = next_step(memo, "date", [click_start(field), GuiAction("type", text="".join(m.groups()))]) if m and field else None
    return typed or click_on(button_named(tree, "Submit"))


def enter_time(instruction, tree, memo):
    m = re.search(r"Enter (\d{1,2}):(\d\d) (AM|PM)", instruction)
    field = find_element(tree, "inputtime")
    text = f"{int(m.group(1)):02d}{m.group(2)}{m.group(3)}" if m else ""
    typed = next_step(memo, "time", [click_on(field), GuiAction("type", text=text)]) if m and field else None
    return typed or click_on(button_named(tree, "Submit"))


def simple_arithmetic(instruction, tree, memo):
    problem = next((e["text"] for e in tree if re.fullmatch(r"-?\d+ [-+x*] -?\d+ =", e.get("text", ""))), None)
    if problem is None:
        return None
    a, op, b, _ = problem.split()
    value = {"+": int(a) + int(b), "-": int(a) - int(b)}.get(op, int(a) * int(b))
    return fill_once(find_element(tree, "entry"), str(value), memo, "answer") or click_on(button_named(tree, "Submit"))


def copy_paste(instruction, tree, memo):
    """The key chords a person uses: select the text, copy, paste into the box."""
    source, box = find_element(tree, "text"), find_element(tree, "entry")
    return next_step(memo, "copy", [click_on(source), GuiAction("key", keys=("ctrl", "a")), GuiAction("key", keys=("ctrl", "c")),
                                 click_on(box), GuiAction("key", keys=("ctrl", "v"))]) or click_on(button_named(tree, "Submit"))


def odd_or_even(instruction, tree, memo):
    """Per row (an Odd button, a number, an Even button at one height): the button the number's
    parity names, once; then Submit."""
    for odd in (e for e in tree if e.get("role") == "push button" and e.get("text") == "Odd"):
        y = (odd["bounds"][1] + odd["bounds"][3]) / 2
        row = [e for e in tree if e["bounds"][1] <= y <= e["bounds"][3]]
        number = next((e for e in row if re.fullmatch(r"-?\d+", e.get("text", ""))), None)
        if number is None or memo.get(y):
            continue
        memo[y] = True
        name = "Odd" if int(number["text"]) % 2 else "Even"
        return click_on(next((e for e in row if e.get("role") == "push button" and e.get("text") == name), None))
    return click_on(button_named(tree, "Submit", "submit"))


def click_tab_2(instruction, tree, memo):
    """The link if the open tab shows it, else the next tab not opened yet."""
    target = quoted(instruction)[0]
    link = next((e for e in tree if e.get("clickable") and e.get("role") != "page tab"
                 and e.get("text", "").strip() == target), None)
    if link is not None:
        return click_on(link)
    opened = memo.setdefault("tabs", set())
    tab = next((e for e in tree if e.get("role") == "page tab" and e.get("text") not in opened), None)
    if tab is not None:
        opened.add(tab["text"])
    return click_on(tab)


def read_table(instruction, tree, memo):
    m = re.search(r"Enter the value of (.+?) into the text field", instruction)
    cells = [e for e in tree if e.get("role") == "table cell"]
    key = next((i for i, e in enumerate(cells) if m and e.get("text") == m.group(1)), None)
    if key is None or key + 1 >= len(cells):
        return None
    return fill_once(find_element(tree, "entry"), cells[key + 1]["text"], memo, "answer") or click_on(button_named(tree, "Submit"))


def find_word(instruction, tree, memo):
    m = re.search(r"Find the (\d+)(st|nd|rd|th) word", instruction)
    entry = find_element(tree, "entry")
    if m is None or entry is None:
        return None
    above = [e for e in tree if e.get("role") == "label" and 40 <= e["bounds"][1] < entry["bounds"][1]
             and e["bounds"][0] < entry["bounds"][2]]
    words = " ".join(e["text"] for e in above).split()
    k = int(m.group(1)) - 1
    word = re.sub(r"[^a-zA-Z0-9]", "", words[k]) if k < len(words) else ""
    return fill_once(entry, word, memo, "answer") or click_on(button_named(tree, "Submit"))


def sign_agreement(instruction, tree, memo):
    """Scroll the agreement to its end where the form is disabled until then, type the name where
    asked, then the named button."""
    said = quoted(instruction)
    m = re.search(r"Click the (\w+) button", instruction)
    name = m.group(1) if m else (said[-1] if said else "")
    button = next((e for e in tree if e.get("role") == "push button" and e.get("text", "").lower() == name.lower()), None)
    entry = find_element(tree, "entry") if len(said) == 2 else None
    if button is not None and button.get("enabled") and (entry is None or entry.get("enabled")):
        return (fill_once(entry, said[0], memo, "name") if entry is not None else None) or click_on(button)
    area = find_element(tree, "text")
    if area is None:
        return None
    x0, y0, x1, y1 = area["box"]
    return GuiAction("scroll", point=((x0 + x1) / 2, (y0 + y1) / 2), direction="down")


def _field_labelled(tree, words: tuple[str, ...]):
    """The entry a label (or row header) naming one of ``words`` belongs to: on its row, else the
    nearest one below it, or above it where the form puts its labels under the fields (its first
    field comes before its first label)."""
    entries = [e for e in tree if e.get("role") == "entry"]
    labels = [e for e in tree if e.get("role") in ("label", "row header") and e["bounds"][1] >= QUERY_BOTTOM]
    under = bool(entries and labels) and entries[0]["bounds"][1] < labels[0]["bounds"][1] and \
        not any(e["bounds"][1] <= (labels[0]["bounds"][1] + labels[0]["bounds"][3]) / 2 <= e["bounds"][3] for e in entries)
    for lab in (e for e in labels if any(w in e.get("text", "").lower() for w in words)):
        y = (lab["bounds"][1] + lab["bounds"][3]) / 2
        beside = next((e for e in entries if e["bounds"][1] <= y <= e["bounds"][3]), None)
        if under:
            near = sorted((e for e in entries if e["bounds"][3] <= lab["bounds"][1] + 1), key=lambda e: -e["bounds"][3])
        else:
            near = sorted((e for e in entries if e["bounds"][1] >= lab["bounds"][1]), key=lambda e: e["bounds"][1])
        if beside or near:
            return beside or near[0]
    return None


def movie_search(instruction, tree, memo):
    """multi-layouts / multi-orderings: three labelled fields in any order and layout, then the
    form's button (Submit, Search, Go!)."""
    m = re.search(r"Search for (.+?) movies directed by (.+?) from year (\d+)\.", instruction)
    if m is None:
        return None
    genre, director, year = m.groups()
    for words, value in ((("genre",), genre), (("director",), director), (("year", "date"), year)):
        action = fill_once(_field_labelled(tree, words), value, memo, words)
        if action is not None:
            return action
    return click_on(next((e for e in tree if e.get("clickable") and e.get("text") in ("Submit", "Search", "Go!")), None))


# -- experts added for issue 37's second part ------------------------------------------------------
def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9']+", text)


def _ordinal(instruction: str, default: int = 1) -> int:
    m = re.search(r"(\d+)(?:st|nd|rd|th)\b", instruction)
    return int(m.group(1)) if m else default


def button_delay(instruction, tree, memo):
    """ONE, then the wait the instruction names (TWO only counts after it), then TWO."""
    m = re.search(r"wait (\d+) seconds?", instruction)
    pause = GuiAction("wait", duration_ms=int(m.group(1)) * 1000 + 300) if m else None
    return next_step(memo, "seq", [click_on(find_element(tree, "push button", "ONE")), pause, click_on(find_element(tree, "push button", "TWO"))])


def scroll_text(instruction, tree, memo):
    """The text area's value holds the whole text, scrolled or not: its last word, typed."""
    area = find_element(tree, "text")
    words = _words(area.get("value") or "") if area is not None else []
    if not words:
        return None
    return fill_once(find_element(tree, "entry"), words[-1], memo, "answer") or click_on(button_named(tree, "Submit"))


def scroll_text_2(instruction, tree, memo):
    """Scroll the text area to the end the instruction names until it cannot move (more wheel turns
    than its text needs), then Submit."""
    area = find_element(tree, "text")
    if area is None:
        return None
    x0, y0, x1, y1 = area["box"]
    way = "up" if "to the top" in instruction else "down"
    turns = [GuiAction("scroll", point=((x0 + x1) / 2, (y0 + y1) / 2), direction=way)] * 6
    return next_step(memo, "scroll", turns) or click_on(button_named(tree, "Submit"))


def simple_algebra(instruction, tree, memo):
    """``a + x = b``, ``x - a = b`` and the like: x from the equation the page shows."""
    eq = next((e["text"] for e in tree if re.fullmatch(r"[-\dx]+ [-+] [-\dx]+ = -?\d+", e.get("text", ""))), None)
    if eq is None:
        return None
    left, op, right, _, total = eq.split()
    total = int(total)
    if left == "x":
        value = total - int(right) if op == "+" else total + int(right)
    else:
        value = total - int(left) if op == "+" else int(left) - total
    return fill_once(find_element(tree, "entry"), str(value), memo, "answer") or click_on(button_named(tree, "Submit"))


def copy_paste_2(instruction, tree, memo):
    """copy-paste over several text areas: the one the ordinal names."""
    areas = [e for e in tree if e.get("role") == "text"]
    k = _ordinal(instruction) - 1
    source, box = (areas[k] if k < len(areas) else None), find_element(tree, "entry")
    if source is None or box is None:
        return None
    return next_step(memo, "copy", [click_on(source), GuiAction("key", keys=("ctrl", "a")), GuiAction("key", keys=("ctrl", "c")),
                                 click_on(box), GuiAction("key", keys=("ctrl", "v"))]) or click_on(button_named(tree, "Submit"))


def read_table_2(instruction, tree, memo):
    """Each labelled field gets the table cell beside the cell that names its label."""
    cells = [e.get("text", "") for e in tree if e.get("role") == "table cell"]
    table = dict(zip(cells[::2], cells[1::2]))
    for lab in (e for e in tree if e.get("role") == "label" and e.get("text", "").endswith(":")):
        name = lab["text"][:-1].strip()
        y = (lab["bounds"][1] + lab["bounds"][3]) / 2
        field = next((e for e in tree if e.get("role") == "entry" and e["bounds"][1] <= y <= e["bounds"][3]), None)
        if name in table and field is not None:
            action = fill_once(field, table[name], memo, name)
            if action is not None:
                return action
    return click_on(button_named(tree, "Submit"))


def text_transform(instruction, tree, memo):
    """The distorted text is drawn one character per label, between the instruction and the field."""
    entry = find_element(tree, "entry")
    if entry is None:
        return None
    chars = [e for e in tree if e.get("role") == "label" and QUERY_BOTTOM <= e["bounds"][1] < entry["bounds"][1]
             and e["bounds"][0] < entry["bounds"][2]]          # not the reward panel to the right
    text = "".join(e["text"] for e in sorted(chars, key=lambda e: e["bounds"][0]))
    return fill_once(entry, text, memo, "answer") or click_on(button_named(tree, "Submit"))


def grid_coordinate(instruction, tree, memo):
    """The grid's points sorted into columns (x = -2..2, left to right) and rows (y = 2..-2, top down)."""
    m = re.search(r"\((-?\d+),\s*(-?\d+)\)", instruction)
    points = [e for e in tree if e.get("role") == "graphics-symbol" and e.get("clickable")]
    xs = sorted({e["bounds"][0] for e in points})
    ys = sorted({e["bounds"][1] for e in points})
    if m is None or not points:
        return None
    col, row = int(m.group(1)) + len(xs) // 2, len(ys) // 2 - int(m.group(2))
    if not (0 <= col < len(xs) and 0 <= row < len(ys)):
        return None
    return click_on(next((e for e in points if e["bounds"][0] == xs[col] and e["bounds"][1] == ys[row]), None))


def guess_number(instruction, tree, memo):
    """Halve the range 0-9 on the page's feedback ("The number is higher than 4."): each guess is
    typed into the field, then Submit; the next guess waits for the feedback that names this one.
    The first focuses the field by a click on its left end (clear of the spinner's arrows), the later
    ones by shift+tab back from Submit, which selects what the field holds, so the digits replace it
    (four guesses at three steps fit the 15-step budget)."""
    rng, k = memo.setdefault("range", [0, 9]), memo.setdefault("k", 0)
    guess = (rng[0] + rng[1]) // 2
    field = find_element(tree, "spin button")
    if field is None:
        return None
    focus = click_start(field) if k == 0 else GuiAction("key", keys=("shift", "tab"))
    action = next_step(memo, ("guess", k), [focus, GuiAction("type", text=str(guess)), click_on(button_named(tree, "Submit"))])
    if action is not None:
        return action
    feedback = " ".join(e.get("text", "") for e in tree if e.get("role") == "label" and e["bounds"][1] >= QUERY_BOTTOM
                        and e["bounds"][3] <= field["bounds"][1])
    m = re.search(rf"(higher|lower) than\s*{guess}\s*\.", feedback)
    if m is None:
        return None                                   # no feedback on this guess yet: wait
    rng[:] = [guess + 1, rng[1]] if m.group(1) == "higher" else [rng[0], guess - 1]
    memo["k"] = k + 1
    return guess_number(instruction, tree, memo)


def login_user_popup(instruction, tree, memo):
    """login-user, where focusing a field may raise a popup that disables the form: the popup's
    Cancel (its OK ends the episode), then both fields again, replaced, then the form's OK."""
    cancel = find_element(tree, "push button", "Cancel")
    if cancel is not None:
        memo.clear()
        memo["again"] = True
        return click_on(cancel)
    user, password = quoted(instruction)[:2]
    entry, secret = find_element(tree, "entry"), find_element(tree, "password text")
    if memo.get("again"):
        fields = _replace(entry, user, memo, "user") or _replace(secret, password, memo, "password")
    else:
        fields = fill_once(entry, user, memo, "user") or fill_once(secret, password, memo, "password")
    return fields or click_on(button_named(tree, "OK"))


def search_engine(instruction, tree, memo):
    """The query typed and searched once; the k-th result is on page (k - 1) // 3 + 1 (three results
    a page): that page's link under the results, then the result, counted among the links above it."""
    said, k = quoted(instruction), _ordinal(instruction)
    pager = find_element(tree, "list")
    action = next_step(memo, "search", [fill_once(find_element(tree, "entry"), said[0] if said else "", memo, "query"),
                                     click_on(button_named(tree, "Search"))])
    if action is not None or pager is None:
        return action
    page = (k - 1) // 3 + 1
    if page > 1 and memo.get("page") != page:
        memo["page"] = page
        return click_on(next((e for e in tree if e.get("role") == "link" and e.get("text") == str(page)
                            and e["bounds"][1] >= pager["bounds"][1]), None))
    results = [e for e in tree if e.get("role") == "link" and QUERY_BOTTOM <= e["bounds"][1] < pager["bounds"][1]]
    i = (k - 1) % 3
    return click_on(results[i]) if i < len(results) else None


def terminal(instruction, tree, memo):
    """``ls``, then ``rm`` of the listed file the instruction describes (no extension, or ``.ext``),
    read from the terminal's text between the ``ls`` line and the next prompt."""
    entry, screen = find_element(tree, "entry"), find_element(tree, "section")
    if entry is None or screen is None:
        return None
    listed = next_step(memo, "ls", [GuiAction("type", element=entry["index"], text="ls"), GuiAction("key", keys=("enter",))])
    if listed is not None:
        return listed
    m = re.search(r"user\$ ls (.*?) user\$", screen.get("text", ""))
    if m is None:
        return None
    ext = re.search(r"extension \.(\w+)", instruction)
    files = m.group(1).split()
    target = next((f for f in files if (f.endswith("." + ext.group(1)) if ext else "." not in f)), None)
    if target is None:
        return None
    return next_step(memo, "rm", [GuiAction("type", element=entry["index"], text=f"rm {target}"), GuiAction("key", keys=("enter",))])


TASK_AREA_BOTTOM = 210     # pixels: MiniWoB's task area ends here; a row below it is clipped out of sight


def email_row(tree, sender: str):
    return next((e for e in tree if e.get("role") == "section" and (e.get("text") or "").split(" ", 1)[0] == sender), None)


def email_compose(tree, memo, field, text: str) -> GuiAction | None:
    """In the reply or forward view: the field filled once, then its send icon (the rightmost
    icon above the field, across from the back arrow)."""
    typed = fill_once(field, text, memo, "body")
    if typed is not None:
        return typed
    icons = [e for e in tree if e.get("role") == "image" and e["bounds"][3] <= field["bounds"][1]]
    memo["sent"] = True
    return click_on(max(icons, key=lambda e: e["bounds"][0])) if icons else None


def email_inbox(instruction, tree, memo):
    """email-inbox's four subtasks. Trash and star are the row's two unnamed icons, in the page's
    order (trash, then star); reply and forward open the email, then its Reply or Forward, fill the
    text or the recipient, and send. For the versions whose inbox fits the task area."""
    m = re.search(r"email by (\S+) and (.*)", instruction)
    if m is None or memo.get("sent"):
        return None
    sender, rest = m.groups()
    reply, forward = re.search(r'with the text "(.*)"\.$', rest), re.search(r"forward that email to (\S+?)\.$", rest)
    if reply or forward:
        field = find_element(tree, "text" if reply else "entry")
        if field is not None and field.get("editable"):
            return email_compose(tree, memo, field, (reply or forward).group(1))
        button = find_element(tree, "section", "Reply" if reply else "Forward")
        if button is not None:
            return click_on(button)
    row = email_row(tree, sender)
    if row is None or row["bounds"][3] > TASK_AREA_BOTTOM:
        return None       # scrolled out of the list: email-inbox itself, left out (see the module doc)
    if reply or forward:
        return click_on(row)
    icons = [e for e in tree if e.get("role") == "image" and row["bounds"][1] <= (e["bounds"][1] + e["bounds"][3]) / 2 <= row["bounds"][3]]
    if len(icons) < 2:
        return None
    memo["sent"] = True
    return click_on(icons[0] if "trash" in rest else icons[1])


EXPERTS = {
    "click-button": click_button, "unicode-test": click_button, "click-link": click_link,
    "click-test": click_test, "click-test-2": click_test_2, "enter-text": enter_text,
    "enter-text-2": enter_text_2, "enter-password": enter_password, "login-user": login_user,
    "focus-text": focus_text, "focus-text-2": focus_text_2, "click-checkboxes": click_checkboxes,
    "click-option": click_option, "click-dialog": click_dialog, "click-dialog-2": click_dialog_2,
    "click-widget": click_widget, "click-tab": click_tab, "click-button-sequence": click_button_sequence,
    "click-collapsible": click_collapsible, "click-collapsible-nodelay": click_collapsible,
    "choose-list": choose_list, "enter-date": enter_date, "enter-time": enter_time,
    "simple-arithmetic": simple_arithmetic, "copy-paste": copy_paste, "click-checkboxes-large": click_checkboxes,
    "click-checkboxes-transfer": click_checkboxes, "enter-text-dynamic": enter_text, "odd-or-even": odd_or_even,
    "click-tab-2": click_tab_2, "click-tab-2-easy": click_tab_2, "click-tab-2-medium": click_tab_2,
    "read-table": read_table, "find-word": find_word, "sign-agreement": sign_agreement,
    "multi-layouts": movie_search, "multi-orderings": movie_search,
    # issue 37, second part
    "click-test-transfer": click_test_2, "button-delay": button_delay, "click-collapsible-2": click_tab_2,
    "click-collapsible-2-nodelay": click_tab_2, "scroll-text": scroll_text, "scroll-text-2": scroll_text_2,
    "simple-algebra": simple_algebra, "copy-paste-2": copy_paste_2, "read-table-2": read_table_2,
    "text-transform": text_transform, "grid-coordinate": grid_coordinate,
    "guess-number": guess_number, "login-user-popup": login_user_popup, "search-engine": search_engine,
    "terminal": terminal, "click-tab-2-hard": click_tab_2,
    "email-inbox-delete": email_inbox, "email-inbox-forward": email_inbox,
    "email-inbox-important": email_inbox, "email-inbox-noscroll": email_inbox, "email-inbox-reply": email_inbox,
    "email-inbox-star-reply": email_inbox,
}
