"""More scripted experts of the MiniWoB++ tasks (issue 54, part 3), written as those of
`embodia.sim.miniwob_experts` are: one plan per task, ``plan(instruction, tree, memo) -> GuiAction``,
reading only the instruction and the UI tree. `embodia.sim.miniwob` joins both modules' ``EXPERTS``.
"""
from __future__ import annotations

import re

from embodia.devices.actions import GuiAction
from embodia.sim.miniwob_experts import (QUERY_BOTTOM, button_named, click_on, email_compose, email_row, fill_once, find_element,
                                         next_step, quoted)

__all__ = ["EXPERTS"]

TASK_AREA_RIGHT = 160     # pixels: MiniWoB's task area ends here; its reward panel sits to the right
FEED = (50, 200)          # pixels: the top and bottom of a scrolled list's box (posts, a menu) in the task area
POST_ICONS = ("Reply", "Retweet", "Like")      # a post's first icons, in the page's order; then Share or More


def middle_y(e) -> float:
    return (e["bounds"][1] + e["bounds"][3]) / 2


def on_row(tree, y: float, role=None) -> list:
    """The elements whose vertical extent holds ``y`` (of that role), left to right."""
    row = [e for e in tree if e["bounds"][1] <= y <= e["bounds"][3] and (role is None or e.get("role") == role)]
    return sorted(row, key=lambda e: e["bounds"][0])


def minutes(text: str) -> int:
    """"11h 30m" -> 690."""
    h, m = re.search(r"(\d+)h", text), re.search(r"(\d+)m", text)
    return (int(h.group(1)) * 60 if h else 0) + (int(m.group(1)) if m else 0)


def offers(tree) -> list[tuple[int, int, dict]]:
    """(price, minutes, its button) per "Book ... $N" button, the length read from the nearest
    duration ("11h 30m") above it."""
    out = []
    for button in (e for e in tree if e.get("role") == "push button" and re.match(r"Book .*\$\d+", e.get("text", ""))):
        above = [e for e in tree if e.get("role") == "label" and re.fullmatch(r"(\d+h)? ?(\d+m)?", e.get("text", "").strip())
                 and e.get("text", "").strip() and e["bounds"][3] <= button["bounds"][1] + 2]
        length = minutes(max(above, key=lambda e: e["bounds"][1])["text"]) if above else 0
        out.append((int(button["text"].rsplit("$", 1)[1]), length, button))
    return out


BEST = {"cheapest": lambda o: o[0], "most expensive": lambda o: -o[0], "shortest": lambda o: o[1], "longest": lambda o: -o[1]}


def buy_ticket(instruction, tree, memo):
    """The offer the instruction ranks first (cheapest, most expensive, shortest, longest)."""
    found = offers(tree)
    order = next((f for words, f in BEST.items() if words in instruction), None)
    return click_on(min(found, key=order)[2]) if found and order else None


def generate_number(instruction, tree, memo):
    """Generate until the shown number meets the instruction's condition, then Submit."""
    generate = button_named(tree, "Generate")
    display = [e for e in tree if e.get("role") == "label" and re.fullmatch(r"-?\d+|-", e.get("text", "").strip())
               and generate is not None and e["bounds"][3] <= generate["bounds"][1]]
    value = display[0]["text"].strip() if display else "-"
    if value != "-" and memo.get("asked"):
        n = int(value)
        less, more = re.search(r"less than (-?\d+)", instruction), re.search(r"greater than (-?\d+)", instruction)
        ok = (n < int(less.group(1)) if less else n > int(more.group(1)) if more
              else n % 2 == 1 if "odd" in instruction else n % 2 == 0)
        if ok:
            return click_on(button_named(tree, "Submit"))
    memo["asked"] = True
    return click_on(generate)


def click_menu(instruction, tree, memo):
    """"Select A>B>C" with the menu's keys (a click on an item with a submenu selects it, and a
    submenu opens on hover): tab focuses the menu on its first item; per level, down to the named
    item, then right (its submenu opens on its first item) or, at the last level, enter."""
    m = re.match(r"Select (.*)$", instruction.strip())
    path = [p.strip() for p in m.group(1).split(">")] if m else []
    focus = next_step(memo, "focus", [GuiAction("key", keys=("tab",))])
    level = memo.setdefault("level", 0)
    if focus is not None or level >= len(path):
        return focus
    items = [e for e in tree if e.get("role") == "menu item"]
    columns = []                                 # the left edges of the open menus (the active item's is a pixel off)
    for x in sorted(e["bounds"][0] for e in items):
        if not columns or x - columns[-1] > 8:
            columns.append(x)
    column = sorted((e for e in items if level < len(columns) and abs(e["bounds"][0] - columns[level]) <= 8), key=middle_y)
    names = [(e.get("text") or "").strip() for e in column]
    if path[level] not in names:
        return None                              # the submenu is not shown yet: wait
    last = GuiAction("key", keys=("enter",) if level == len(path) - 1 else ("right",))
    action = next_step(memo, ("level", level), [GuiAction("key", keys=("down",))] * names.index(path[level]) + [last])
    if action is None:
        memo["level"] = level + 1
        return click_menu(instruction, tree, memo)
    return action


def form_sequence_2(instruction, tree, memo):
    """The k-th radio button, the number typed into the j-th text box, then Submit."""
    m = re.search(r"Check the (\d+)\w\w radio button and enter the number \"(-?\d+)\" into the (\d+)\w\w textbox", instruction)
    if m is None:
        return None
    radios = sorted((e for e in tree if e.get("role") == "radio button"), key=lambda e: e["bounds"][0])
    boxes = sorted((e for e in tree if e.get("role") == "entry"), key=lambda e: e["bounds"][0])
    k, number, j = int(m.group(1)), m.group(2), int(m.group(3))
    if k <= len(radios) and not radios[k - 1].get("checked"):
        return click_on(radios[k - 1])
    return (fill_once(boxes[j - 1] if j <= len(boxes) else None, number, memo, "number")
            or click_on(button_named(tree, "Submit")))


def form_sequence_3(instruction, tree, memo):
    """The dropdown opened, down to the option (its list scrolls, so keys rather than a click), enter,
    then the button the instruction labels."""
    m = re.search(r'Choose (.+?) from the dropdown, then click the button labeled "(.+?)"', instruction)
    if m is None:
        return None
    choice, label = m.groups()
    opened = next_step(memo, "open", [click_on(find_element(tree, "combo box"))])
    if opened is not None:
        return opened
    options = [(e.get("text") or "").strip() for e in tree if e.get("role") == "list item"]
    if choice in options:
        picked = next_step(memo, "pick", [GuiAction("key", keys=("down",))] * options.index(choice) + [GuiAction("key", keys=("enter",))])
        if picked is not None:
            return picked
    return click_on(button_named(tree, label)) if memo.get("pick") else None


def navigate_tree(instruction, tree, memo):
    """An open folder's item carries the names of all its rows (its own, then its children's, whose
    items then show none), so the names of the top-level items, in order, are the names of the rows
    top down. The named row is clicked (a folder's on its name, right of its toggle); while it is
    not shown, the next folder not opened yet."""
    target = quoted(instruction)[0] if quoted(instruction) else ""
    items = [e for e in tree if e.get("role") == "list item"]
    top = [e for e in items if not any(o is not e and o["bounds"][1] < e["bounds"][1] and e["bounds"][3] <= o["bounds"][3]
                                       for o in items)]
    names = [w for e in sorted(top, key=lambda e: e["bounds"][1]) for w in (e.get("text") or "").split()]
    rows = []
    for e in sorted(items, key=lambda e: (e["bounds"][1], -e["bounds"][0])):
        if not rows or e["bounds"][1] - rows[-1]["bounds"][1] > 3:
            rows.append(e)                                     # the innermost item starting on that row
    if len(names) != len(rows):
        return None

    def name_part(row):
        parts = on_row(tree, row["bounds"][1] + 8, "section")
        return parts[-1] if len(parts) >= 2 else None           # a folder: its toggle, then its name
    if target in names:
        row = rows[names.index(target)]
        return click_on(name_part(row) or row)
    opened = memo.setdefault("opened", set())
    for name, row in zip(names, rows):
        if name_part(row) is not None and name not in opened:
            opened.add(name)
            return click_on(name_part(row))
    return None


def find_greatest(instruction, tree, memo):
    """Each card turned over once (its number then shows), then the greatest turned over again, then
    Submit."""
    cards = sorted((e for e in tree if e.get("role") == "section" and e.get("clickable")
                    and e["bounds"][1] >= QUERY_BOTTOM), key=lambda e: e["bounds"][0])
    seen = memo.setdefault("seen", {})
    for i, card in enumerate(cards):
        if (card.get("text") or "").strip().lstrip("-").isdigit():
            seen[i] = int(card["text"])
    if memo.get("chosen") is not None:
        return click_on(button_named(tree, "Submit"))
    for i, card in enumerate(cards):
        if i not in seen:
            return click_on(card)
    if not seen:
        return None
    best = max(seen, key=seen.get)
    memo["chosen"] = best
    return click_on(cards[best]) if (cards[best].get("text") or "").strip() == "" else click_on(button_named(tree, "Submit"))


def phone_book(instruction, tree, memo):
    """The pager's next page until the named contact shows, then the link the instruction asks for,
    found by its label (Phone:, Email:, Address:) on its row."""
    m = re.search(r"Find (.+?) in the contact book and click on their (phone|email|address)", instruction)
    if m is None:
        return None
    name, field = m.groups()
    if find_element(tree, "heading", name) is None:
        return click_on(find_element(tree, "link", ">"))
    label = next((e for e in tree if e.get("role") == "label" and e.get("text", "").lower().startswith(field)), None)
    if label is None:
        return None
    return click_on(next((e for e in on_row(tree, middle_y(label), "link")), None))


def slide_to(tree, memo, target: int, track) -> GuiAction | None:
    """A jQuery slider to ``target`` when its range is not shown: its handle clicked (focused), home
    and end read the range off its value label, a click on the track where the target falls, then
    the arrows (right adds one, left takes one) until the label shows it. None once it does."""
    if track is None:
        return None
    x0, y0, x1, y1 = track["bounds"]
    numbers = [e for e in tree if e.get("role") == "label" and re.fullmatch(r"-?\d+", (e.get("text") or "").strip())
               and e["bounds"][1] >= QUERY_BOTTOM]
    label = min(numbers, key=lambda e: abs(e["bounds"][0] - x1) + abs(e["bounds"][1] - y1), default=None)
    value = int(label["text"]) if label is not None else None
    handle = next((e for e in tree if e.get("role") == "section" and e is not track and x0 - 4 <= e["bounds"][0] <= x1
                   and y0 - 4 <= e["bounds"][1] <= y1), None)
    phase = memo.setdefault("slider", "focus")
    if phase == "focus":
        memo["slider"] = "min"
        return click_on(handle or track)
    if phase == "min":
        memo["slider"] = "max"
        return GuiAction("key", keys=("home",))
    if phase == "max":
        memo["low"], memo["slider"] = value, "point"
        return GuiAction("key", keys=("end",))
    if phase == "point":
        low, high, memo["slider"] = memo["low"], value, "keys"
        f = (target - low) / max(1, high - low)
        bx0, by0, bx1, by1 = track["box"]
        tall = (y1 - y0) > (x1 - x0)
        point = ((bx0 + bx1) / 2, by1 - f * (by1 - by0)) if tall else (bx0 + f * (bx1 - bx0), (by0 + by1) / 2)
        return GuiAction("click", point=point)
    if value is None or value == target:
        return None
    return GuiAction("key", keys=("right",) if value < target else ("left",))


def sliders(tree) -> list:
    """The slider tracks (the elements whose id names a slider), top down."""
    return sorted((e for e in tree if (e.get("id") or "").startswith("slider")), key=middle_y)


def use_slider(instruction, tree, memo):
    m = re.search(r"Select (-?\d+) with the slider", instruction)
    track = next(iter(sliders(tree)), None)
    return (slide_to(tree, memo, int(m.group(1)), track) if m else None) or click_on(button_named(tree, "Submit"))


def form_sequence(instruction, tree, memo):
    """The slider to the number, the k-th checkbox, then Submit."""
    m = re.search(r"Select (-?\d+) with the slider, click the (\d+)\w\w checkbox", instruction)
    if m is None:
        return None
    moved = slide_to(tree, memo, int(m.group(1)), next(iter(sliders(tree)), None))
    if moved is not None:
        return moved
    boxes = sorted((e for e in tree if e.get("role") == "check box"), key=lambda e: e["bounds"][0])
    k = int(m.group(2))
    return next_step(memo, "box", [click_on(boxes[k - 1]) if k <= len(boxes) else None]) or click_on(button_named(tree, "Submit"))


def ascending_numbers(instruction, tree, memo):
    """Where each number stands is noted while the numbers show (a click on 1 hides them behind
    squares); then 1, and the square standing where 2, 3, ... stood."""
    if "at" not in memo:
        numbers = [e for e in tree if e.get("clickable") and re.fullmatch(r"\d+", (e.get("text") or "").strip())
                   and e["bounds"][1] >= QUERY_BOTTOM]
        memo["at"] = {int(e["text"]): ((e["bounds"][0] + e["bounds"][2]) / 2, middle_y(e)) for e in numbers}
        memo["next"] = 1
    n = memo["next"]
    if n not in memo["at"]:
        return None
    x, y = memo["at"][n]
    here = [e for e in tree if e.get("clickable") and e["bounds"][0] - 3 <= x <= e["bounds"][2] + 3
            and e["bounds"][1] - 3 <= y <= e["bounds"][3] + 3 and e["bounds"][1] >= QUERY_BOTTOM
            and e["bounds"][2] - e["bounds"][0] < 60]                  # a number or its square, not the drawing area
    memo["next"] = n + 1
    return click_on(min(here, key=lambda e: (e["bounds"][2] - e["bounds"][0]) * (e["bounds"][3] - e["bounds"][1]), default=None))


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def choose_date(instruction, tree, memo):
    """The date picker opened from its field, Prev or Next until its title names the month asked,
    that month's day, then Submit."""
    m = re.search(r"(\d\d)/(\d\d)/(\d{4})", instruction)
    if m is None:
        return None
    month, day, year = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if memo.get("picked"):
        return click_on(button_named(tree, "Submit"))
    title = next((e for e in tree if e.get("role") == "label" and (e.get("text") or "").strip() in MONTHS), None)
    year_label = next((e for e in on_row(tree, middle_y(title), "label") if re.fullmatch(r"\d{4}", e.get("text", "").strip())), None) \
        if title is not None else None
    if year_label is None:
        return click_on(find_element(tree, "entry"))
    delta = (year - int(year_label["text"])) * 12 + month - 1 - MONTHS.index(title["text"].strip())
    if delta:
        way = "Next" if delta > 0 else "Prev"
        return click_on(next((e for e in tree if e.get("clickable") and (e.get("text") or "").strip() == way), None))
    days = [e for e in tree if e.get("role") == "link" and (e.get("text") or "").strip() == str(day)]
    memo["picked"] = bool(days)
    return click_on(days[0] if days else None)


# Capitalized words of the requests that are not people's names (sentence starts, assistants' names, ...).
NOT_NAMES = frozenset("""Alexa Siri Answer Ask Automatically Can Copy Could Create Delete Email Find First Flag For Forward
    FOrward Foward Get Give Go Hi Highlight I If Important In Just Let Locate Look Make Mark May Navigate Open Please Primary Pull
    Put Remind Reply Replay Resend Respond Save Say Search Select Send Set Simply Star Tag Take Tell Text Thanks The There
    Throw To Trash Tuesday Will You""".split())


def email_request(instruction: str, senders: list[str]) -> tuple[str | None, str, str | None]:
    """A request in words as (sender, action, what to type): the reply text is quoted; the sender is
    the name after "from"/"by" (else before "'s", "sent", ...; else the one in the inbox's first
    rows); a forward's recipient is the other name."""
    if '"' in instruction:
        m = re.search(r'"+([^"]+)"', instruction)
        action, payload = "reply", (m.group(1) if m else "")
    elif re.search(r"delet|trash|remov|rid of|throw|discard|erase|\bbin\b|don't want|out of", instruction, re.I):
        action, payload = "delete", None
    elif re.search(r"star|important|flag|mark|highlight|\btag|priority", instruction, re.I) and \
            not re.search(r"forward|send", instruction, re.I):
        action, payload = "important", None
    else:
        action, payload = "forward", None
    bare = re.sub(r'"+[^"]*"+', " ", instruction)
    names = [w for w in re.findall(r"\b[A-Z][A-Za-z]+", bare) if w not in NOT_NAMES and not w.isupper()]
    names = list(dict.fromkeys(n[:-1] if n not in senders and n[:-1] in senders else n for n in names))   # "Coras email"

    def cue(n):
        return 2 * bool(re.search(rf"\b(from|by) {n}\b", bare)) - bool(re.search(rf"\bto {n}\b", bare)) + \
            bool(re.search(rf"\b(of|that|the) {n}\b|\b{n}('s\b|s\b| sent\b| wants h| wrote\b| e-?mail\b)", bare))
    sender = max(names, key=lambda n: (cue(n), n in senders), default=None) or next((n for n in senders if n in bare), None)
    if action == "forward":
        payload = next((n for n in names if n != sender), None)
    return sender, action, payload


def email_search(tree, memo, sender: str, action: str, payload) -> GuiAction | None:
    """Any inbox, however long: the search icon, the sender's name typed, its result opened; there
    the trash or the star icon (right of the back arrow, in that order, as on a row), or Reply or
    Forward, the text or the recipient filled, and the send icon."""
    if memo.get("sent"):
        return None
    if action in ("reply", "forward"):
        field = find_element(tree, "text" if action == "reply" else "entry", editable=True)
        if field is not None and field.get("id") != "search-input" and find_element(tree, "section", "Forward") is None:
            return email_compose(tree, memo, field, payload or "")
    opened = find_element(tree, "section", "Reply")
    if opened is not None:
        if action in ("reply", "forward"):
            return click_on(find_element(tree, "section", action.capitalize()))
        bar = [e for e in tree if e.get("role") == "image" and e["bounds"][3] <= opened["bounds"][1]
               and e["bounds"][1] < QUERY_BOTTOM + 30]
        icons = [e for e in bar if e is not min(bar, key=lambda e: e["bounds"][0])]      # right of the back arrow
        if len(icons) < 2:
            return None
        memo["sent"] = True
        return click_on(icons[0] if action == "delete" else icons[1])          # the page's order: trash, star
    search = next((e for e in tree if e.get("id") == "search-input"), None)
    if search is None:
        return click_on(next((e for e in tree if e.get("id") == "open-search"), None))
    typed = fill_once(search, sender, memo, "search")
    return typed or click_on(email_row(tree, sender))


def email_nl(instruction, tree, memo):
    """email-inbox's requests in free words (-nl, -nl-turk), read once from the first view's inbox."""
    if "request" not in memo:
        senders = [(e.get("text") or "").split(" ", 1)[0] for e in tree if e.get("role") == "section" and e.get("clickable")]
        memo["request"] = email_request(instruction, [s for s in senders if s])
    sender, action, payload = memo["request"]
    return email_search(tree, memo, sender, action, payload) if sender else None


def email_inbox_search(instruction, tree, memo):
    """email-inbox's templated requests ("Find the email by X and ...") through the search, which
    reaches the rows a scroll would have to."""
    m = re.search(r"email by (\S+) and (.*)", instruction)
    if m is None:
        return None
    sender, rest = m.groups()
    reply, forward = re.search(r'with the text "(.*)"\.$', rest), re.search(r"forward that email to (\S+?)\.$", rest)
    action = "reply" if reply else "forward" if forward else "delete" if "trash" in rest else "important"
    return email_search(tree, memo, sender, action, (reply or forward).group(1) if reply or forward else None)




def below_query(tree, memo) -> list:
    """The tree less the instruction bar's elements: those before the first element below the bar
    on the first view (a scrolled box's rows that pass under the bar stay in the tree, clipped)."""
    if "query_n" not in memo:
        memo["query_n"] = next((i for i, e in enumerate(tree) if e["bounds"][1] >= QUERY_BOTTOM), len(tree))
    return tree[memo["query_n"]:]


def posts(tree, memo) -> list[tuple[str, list]]:
    """(username, its icons) per post, top down: the unnamed icons between its "@name" and the next."""
    feed = below_query(tree, memo)
    names = sorted((e for e in feed if e.get("role") == "label" and (e.get("text") or "").startswith("@")), key=middle_y)
    out = []
    for i, name in enumerate(names):
        end = names[i + 1]["bounds"][1] if i + 1 < len(names) else float("inf")
        icons = [e for e in feed if e.get("role") == "image" and e.get("clickable") and name["bounds"][3] <= e["bounds"][1] < end]
        out.append((name["text"].strip(), sorted(icons, key=lambda e: e["bounds"][0])))
    return out


def shown(e) -> bool:
    return e is not None and FEED[0] + 2 <= middle_y(e) <= FEED[1] - 2


def feed_down(tree, memo) -> GuiAction | None:
    """One page down the feed: a click on a post's text first (the keys then scroll that box), then space."""
    if not memo.get("feed"):
        text = next((e for e in tree if e.get("role") == "label" and shown(e) and not (e.get("text") or "").startswith("@")), None)
        memo["feed"] = text is not None
        return click_on(text)
    return GuiAction("key", keys=("space",))


def scrolled(tree, memo) -> float:
    """How far the feed has scrolled since the first view, in pixels: the most common shift of the
    labels seen on both views (the tree only holds what lies on the screen, so a row leaves it when
    it scrolls out, and a row is known again by its position plus this)."""
    now: dict[str, float] = {}
    for e in tree:
        if e.get("role") == "label" and e.get("text"):
            now[e["text"]] = e["bounds"][1] if e["text"] not in now else float("nan")       # a repeated text tells nothing
    shifts = [round(memo["labels"][t] - y) for t, y in now.items() if t in memo.get("labels", {}) and y == y
              and memo["labels"][t] == memo["labels"][t] and abs(memo["labels"][t] - y) > 1]
    if shifts:
        memo["offset"] = memo.get("offset", 0) + max(set(shifts), key=shifts.count)
    memo["labels"] = now
    return memo.get("offset", 0)


def next_in_feed(tree, memo, targets: list, want: int, finish) -> GuiAction | None:
    """Click each target once, top down (each known by its place in the whole feed, so one clicked
    before a scroll is not clicked again), paging the feed down as they come, until ``want`` are
    done; then ``finish`` (the form's button), paged to as well."""
    offset, done = scrolled(tree, memo), memo.setdefault("clicked", [])
    todo = [e for e in sorted(targets, key=middle_y) if not any(abs(e["bounds"][1] + offset - y) < 4 for y in done)]
    if len(done) < want and todo:
        if not shown(todo[0]):
            return feed_down(tree, memo)
        done.append(todo[0]["bounds"][1] + offset)
        return click_on(todo[0])
    return click_on(finish) if shown(finish) else feed_down(tree, memo)      # the rest, or the button, further down


def order_food(instruction, tree, memo):
    """Each named dish's "+" once, or the first dish with the type's icon N times, top down as the
    menu is paged, then Order!."""
    by_name = re.match(r"Order one of each item: (.*)$", instruction.strip())
    by_type = re.match(r"Order (\d+) items that are (\S+)$", instruction.strip())
    dishes = sorted((e for e in below_query(tree, memo) if e.get("role") == "label" and e["bounds"][0] < TASK_AREA_RIGHT
                     and any(p.get("text") == "+" for p in on_row(tree, middle_y(e), "section"))), key=middle_y)
    plus = [next(p for p in on_row(tree, middle_y(d), "section") if p.get("text") == "+") for d in dishes]
    order = button_named(tree, "Order!")
    if by_name:
        names = [n.strip() for n in by_name.group(1).split(", ")]
        return next_in_feed(tree, memo, [p for d, p in zip(dishes, plus) if d.get("text", "").strip() in names], len(names), order)
    if by_type is None:
        return None
    n, kind = int(by_type.group(1)), by_type.group(2)
    if memo.get("more", 0) >= n:                    # the dish has its n
        return click_on(order) if shown(order) else feed_down(tree, memo)
    for i, (d, p) in enumerate(zip(dishes, plus)):
        end = dishes[i + 1]["bounds"][1] if i + 1 < len(dishes) else float("inf")
        if any(e.get("role") == "image" and e.get("text") == kind and d["bounds"][1] < e["bounds"][1] < end for e in tree):
            if not shown(p):
                return feed_down(tree, memo)
            return next_step(memo, "more", [click_on(p)] * n)
    return feed_down(tree, memo)


def social_media_all(instruction, tree, memo):
    """The named icon on every post by the user (or on N of them), top down as the feed is paged,
    then Submit."""
    m = re.search(r'Click the "(\w+)" button on (all|\d+) posts? by (@\S+?) and then click Submit', instruction)
    names = POST_ICONS + ("Share",)
    if m is None or m.group(1) not in names:
        return None
    k = names.index(m.group(1))
    targets = [icons[k] for name, icons in posts(tree, memo) if name == m.group(3) and len(icons) > k]
    return next_in_feed(tree, memo, targets, 99 if m.group(2) == "all" else int(m.group(2)), button_named(tree, "Submit"))


EXPERTS = {
    "buy-ticket": buy_ticket, "generate-number": generate_number, "click-menu": click_menu,
    "form-sequence-2": form_sequence_2, "form-sequence-3": form_sequence_3, "navigate-tree": navigate_tree,
    "find-greatest": find_greatest, "phone-book": phone_book, "choose-date": choose_date,
    "choose-date-easy": choose_date, "choose-date-medium": choose_date, "choose-date-nodelay": choose_date,
    "email-inbox-forward-nl": email_nl, "email-inbox-forward-nl-turk": email_nl, "email-inbox-nl-turk": email_nl,
    "email-inbox": email_inbox_search, "use-slider": use_slider, "form-sequence": form_sequence,
    "ascending-numbers": ascending_numbers, "order-food": order_food, "social-media-all": social_media_all,
    "social-media-some": social_media_all,
}
