"""Laying out the current page of a `World` (`embodia.sim.gui.apps`) as widgets: the launcher,
Settings, Contacts, Messages, the Sign-up form and the distractor apps, in the world's look;
nothing here changes state or draws."""
from __future__ import annotations

from embodia.sim.gui.look import HOME, METRICS, slug
from embodia.sim.gui.widgets import Widget, hsv, text_width


class Layout:
    """Lays out the current page of a `World` as widgets (physical pixels)."""

    def __init__(self, world):
        """``world``: the `embodia.sim.gui.apps.World` whose current page is laid out."""
        self.w, self.look, self.pal = world, world.look, world.look.palette
        self.out: list[Widget] = []

    def add(self, kind: str, bounds, **kw) -> Widget:
        x0, y0, x1, y1 = (int(round(v)) for v in bounds)
        W, H = self.look.width, self.look.height
        wdg = Widget(kind, (max(0, x0), max(0, y0), min(W, x1), min(H, y1)), **kw)
        self.out.append(wdg)
        return wdg

    def build(self) -> list[Widget]:
        page = self.w.page
        home = page == HOME
        self.top, self.bottom = self.look.content_y(home)
        W = self.look.width
        col = min(W - 2 * self.look.m("pad"), self.look.dp(METRICS[self.look.form]["column"]))
        self.x0, self.x1 = (0, W) if self.look.form == "phone" else ((W - col) // 2, (W + col) // 2)
        title, actions = self.chrome_spec(page)
        self.chrome(title, actions)
        getattr(self, "page_" + page[0].replace("-", "_"))(*page[1:])
        return self.out

    # -- chrome: status bar, app bar / top bar, navigation --------------------------------------------
    def chrome_spec(self, page) -> tuple[str, list[tuple[str, str, str, tuple]]]:
        """The page's title and its icon-only actions (id, glyph, description, command)."""
        kind = page[0]
        actions = []
        if kind == "contacts":
            actions = [("search_button", "search", "Search", ("search",))]
        elif kind == "messages":
            actions = [("more_options", "more", "Message settings", ("push", ("msettings",)))]
        titles = {"home": "Home", "settings": "Settings", "contacts": "Contacts", "messages": "Messages",
                  "compose": "New message", "msettings": "Message settings", "form": "Sign-up",
                  "form-done": "Sign-up"}
        return titles.get(kind) or page[1], actions

    def chrome(self, title: str, actions) -> None:
        L, pal, W, H = self.look, self.pal, self.look.width, self.look.height
        home = self.w.page == HOME
        if L.form == "phone":
            s = L.m("status")
            self.add("panel", (0, 0, W, s), fill=pal.bar, in_tree=False)
            self.add("text", (L.m("pad"), 0, W // 2, s), text="12:30", fg=pal.on_bar, font=L.font("small"),
                     in_tree=False)
            if not home:
                self.add("panel", (0, s, W, s + L.m("appbar")), fill=pal.appbar, in_tree=False)
                self.title_box = (L.m("pad"), s, W - L.m("pad") - len(actions) * L.m("icon"), s + L.m("appbar"))
                self.title(title)
                self.action_icons(actions, s, s + L.m("appbar"), W - L.dp(4))
            n = L.m("nav")
            self.add("panel", (0, H - n, W, H), fill=pal.bar, in_tree=False)
            for frac, glyph, desc in ((0.3, "back", "Back"), (0.5, "home", "Home")):
                self.add("icon", (W * frac - n / 2, H - n, W * frac + n / 2, H), glyph=glyph, desc=desc,
                         id="nav_" + glyph, clickable=True, on_tap=(glyph,), fg=pal.on_bar)
        else:
            t, i = L.m("topbar"), L.m("icon")
            self.add("panel", (0, 0, W, t), fill=pal.appbar, in_tree=False)
            for k, (glyph, desc) in enumerate((("home", "Home"), ("back", "Back"))):
                x = L.dp(6) + k * (i + L.dp(4))
                self.add("icon", (x, (t - i) // 2, x + i, (t + i) // 2), glyph=glyph, desc=desc,
                         id="nav_" + glyph, clickable=True, on_tap=(glyph,), fg=pal.on_appbar)
            x = L.dp(6) + 2 * (i + L.dp(4)) + L.dp(8)
            self.title_box = (x, 0, W - L.dp(8) - len(actions) * i, t)
            self.title(title)
            self.action_icons(actions, 0, t, W - L.dp(8))

    def title(self, text: str) -> None:
        if self.w.page[0] == "contacts" and self.w.search_open:
            x0, y0, x1, y1 = self.title_box
            inset = (y1 - y0 - self.look.m("field")) // 2
            self.field("search", "Search contacts", (x0, y0 + inset, x1 - self.look.dp(4), y1 - inset))
            return
        self.add("title", self.title_box, text=text, id="title", fg=self.pal.on_appbar,
                 font=self.look.font("title"), align="centre" if self.look.title_centre else "left")

    def action_icons(self, actions, y0, y1, right) -> None:
        i = self.look.m("icon")
        for k, (wid, glyph, desc, cmd) in enumerate(actions):
            x1 = right - k * i
            cy = (y0 + y1) / 2
            # icon-only buttons without a content description: absent from the tree on purpose
            self.add("icon", (x1 - i, cy - i / 2, x1, cy + i / 2), glyph=glyph, desc=desc, id=wid,
                     clickable=True, in_tree=False, on_tap=cmd, fg=self.pal.on_appbar)

    # -- building blocks -------------------------------------------------------------------------------
    def field(self, wid: str, label: str, bounds) -> Widget:
        L, pal = self.look, self.pal
        return self.add("edit", bounds, text=self.w.fields.get(wid, ""), desc=label, id=wid, hint=label,
                        clickable=True, focused=self.w.focus == wid, on_tap=("focus", wid),
                        fill=pal.field, fg=pal.text, muted=pal.muted, accent=pal.accent,
                        font=L.font("body"), pad=L.dp(10))

    def button(self, wid: str, text: str, bounds, cmd: tuple) -> Widget:
        return self.add("button", bounds, text=text, id=wid, clickable=True, on_tap=cmd,
                        fill=self.pal.accent, fg=self.pal.on_accent, font=self.look.font("body"))

    def text(self, text: str, bounds, wid: str = "", size: str = "body", colour=None) -> Widget:
        return self.add("text", bounds, text=text, id=wid, fg=colour or self.pal.text,
                        font=self.look.font(size))

    def listing(self, wid: str, items: list, row_h: int, row, top=None, bottom=None) -> None:
        """A vertical list; only rows wholly inside the viewport are drawn (and in the tree)."""
        top = self.top if top is None else top
        bottom = self.bottom if bottom is None else bottom
        max_scroll = max(0, len(items) * row_h - (bottom - top))
        off = min(self.w.scroll.get(wid, 0), max_scroll)
        self.add("list", (self.x0, top, self.x1, bottom), id=wid, max_scroll=max_scroll)
        for i, item in enumerate(items):
            y0 = top + i * row_h - off
            if y0 >= top and y0 + row_h <= bottom:
                row(item, y0, y0 + row_h)

    def switch_row(self, name: str, y0: int, y1: int) -> None:
        L = self.look
        self.add("switch", (self.x0, y0, self.x1, y1), text=name, id="setting_" + slug(name),
                 clickable=True, checked=self.w.settings[name], on_tap=("toggle", name), fg=self.pal.text,
                 accent=self.pal.accent, muted=self.pal.line, font=L.font("body"), pad=L.m("pad"))

    def avatar(self, name: str, x0, y0, size) -> None:
        self.add("image", (x0, y0, x0 + size, y0 + size), glyph=name[:1], in_tree=False,
                 fill=self.look.colours.get(name, self.pal.accent))

    def compose_bar(self) -> None:
        L = self.look
        h, pad, bw = L.m("field"), L.dp(8), L.dp(84)
        y1 = self.bottom - pad
        self.field("compose_text", "Message", (self.x0 + pad, y1 - h, self.x1 - 2 * pad - bw, y1))
        self.button("send", "Send", (self.x1 - pad - bw, y1 - h, self.x1 - pad, y1), ("send",))

    # -- pages -----------------------------------------------------------------------------------------
    def page_home(self) -> None:
        L = self.look
        cols, cell = L.cols, L.m("cell")
        self.x0, self.x1 = 0, L.width          # the launcher uses the whole screen, desktops too
        cw = (self.x1 - self.x0) / cols
        margin = L.dp(8)
        top = self.top + L.dp(8)
        for k, app in enumerate(self.w.apps[:L.launcher_capacity()]):
            r, c = divmod(k, cols)
            dx, dy = (L.dp(v) for v in L.offsets.get(app, (0, 0)))
            x0, y0 = self.x0 + c * cw + margin + dx, top + r * cell + margin + dy
            self.add("app", (x0, y0, x0 + cw - 2 * margin, y0 + cell - 2 * margin), text=app,
                     id="app_" + slug(app), clickable=True, on_tap=("open", app), glyph=app[:1],
                     fill=L.colours.get(app, self.pal.accent), fg=self.pal.text, font=L.font("small"))

    def page_app(self, name: str) -> None:
        self.text("Nothing here yet", (self.x0 + self.look.m("pad"), self.top + self.look.dp(16),
                                       self.x1, self.top + self.look.dp(56)), wid="empty")

    def page_settings(self) -> None:
        L = self.look

        def row(entry, y0, y1):
            kind, name = entry
            if kind == "setting":
                return self.switch_row(name, y0, y1)
            self.add("row", (self.x0, y0, self.x1, y1), text=name, id="category_" + slug(name),
                     clickable=True, on_tap=("push", ("category", name)), fg=self.pal.text,
                     muted=self.pal.line, font=L.font("body"), pad=L.m("pad"))
        self.listing("settings_list", self.w.main_rows, L.m("row"), row)

    def page_category(self, name: str) -> None:
        self.listing("settings_list", self.w.categories[name], self.look.m("row"), self.switch_row)

    def page_msettings(self) -> None:
        self.listing("settings_list", self.w.message_settings, self.look.m("row"), self.switch_row)

    def page_contacts(self) -> None:
        L = self.look
        q = self.w.fields.get("search", "").lower() if self.w.search_open else ""
        shown = [c for c in self.w.contacts if q in c.name.lower()]
        size = L.dp(40)

        def row(c, y0, y1):
            self.add("row", (self.x0, y0, self.x1, y1), text=c.name, id="contact_" + slug(c.name),
                     clickable=True, on_tap=("contact", c.name), fg=self.pal.text, muted=self.pal.line,
                     font=L.font("body"), pad=L.m("pad") + size + L.dp(16))
            self.avatar(c.name, self.x0 + L.m("pad"), (y0 + y1 - size) // 2, size)
        self.listing("contacts_list", shown, L.m("row"), row)
        if not shown:
            self.text("No contacts found", (self.x0 + L.m("pad"), self.top + L.dp(16),
                                            self.x1, self.top + L.dp(56)), wid="empty", colour=self.pal.muted)

    def page_contact(self, name: str) -> None:
        L, c = self.look, self.w.contact(name)
        pad, size = L.m("pad"), L.dp(72)
        y = self.top + L.dp(16)
        self.avatar(c.name, (self.x0 + self.x1 - size) // 2, y, size)
        y += size + L.dp(12)
        for wid, line in (("phone", "Mobile " + c.phone), ("email", c.email)):
            self.text(line, (self.x0 + pad, y, self.x1 - pad, y + L.dp(32)), wid=wid)
            y += L.dp(32)
        y += L.dp(12)
        bw, h = (self.x1 - self.x0 - 3 * pad) // 2, L.m("field")
        self.button("call", "Call", (self.x0 + pad, y, self.x0 + pad + bw, y + h), ("call",))
        self.button("message", "Message", (self.x1 - pad - bw, y, self.x1 - pad, y + h),
                    ("push", ("thread", c.name)))

    def page_messages(self) -> None:
        L, pal = self.look, self.pal
        size, pad = L.dp(44), L.m("pad")

        def row(conv, y0, y1):
            name, msgs = conv
            mid = (y0 + y1) // 2
            x = self.x0 + pad + size + L.dp(16)
            # the name sits in the row's upper half, the last message's snippet below it
            self.add("row", (self.x0, y0, self.x1, y1), text=name, id="conv_" + slug(name), clickable=True,
                     on_tap=("push", ("thread", name)), fg=pal.text, muted=pal.line,
                     font=L.font("body"), pad=x - self.x0, dy=-(y1 - y0) // 5)
            self.add("text", (x, mid, self.x1 - pad, y1 - L.dp(6)), text=msgs[-1][1], id="snippet",
                     fg=pal.muted, font=L.font("small"))
            self.avatar(name, self.x0 + pad, (y0 + y1 - size) // 2, size)
        self.listing("conversations_list", self.w.conversations, L.m("row2"), row)
        fab = L.dp(56)
        fx = self.x0 + L.dp(16) if L.mirror else self.x1 - L.dp(16) - fab
        fy = self.bottom - L.dp(16) - fab
        # icon-only compose button: absent from the tree on purpose
        self.add("icon", (fx, fy, fx + fab, fy + fab), glyph="plus", desc="New conversation", id="compose_fab",
                 clickable=True, in_tree=False, on_tap=("push", ("compose",)), fill=pal.accent,
                 fg=pal.on_accent)

    def page_thread(self, name: str) -> None:
        L, pal = self.look, self.pal
        conv = self.w.conversation(name)
        msgs = conv[1][-3:] if conv else []
        pad, h, f = L.m("pad"), L.dp(40), L.font("body")
        y = self.top + L.dp(12)
        maxw = int((self.x1 - self.x0) * 0.75)
        for mine, text in msgs:
            bw = min(maxw, int(text_width(text, f)) + 2 * L.dp(12))
            x0 = self.x1 - pad - bw if mine else self.x0 + pad
            self.add("bubble", (x0, y, x0 + bw, y + h), text=text, id="bubble",
                     fill=pal.accent if mine else pal.bubble, fg=pal.on_accent if mine else pal.text,
                     font=f, pad=L.dp(12))
            y += h + L.dp(8)
        self.compose_bar()

    def page_compose(self) -> None:
        L = self.look
        y = self.top + L.dp(12)
        self.field("to_field", "To", (self.x0 + L.dp(8), y, self.x1 - L.dp(8), y + L.m("field")))
        self.compose_bar()

    def page_form(self) -> None:
        L, pal = self.look, self.pal
        pad = L.m("pad")
        parts = [("label", "Name"), ("field", "form_name"), ("label", "Email"), ("field", "form_email"),
                 ("label", "Options")] + [("option", o) for o in self.w.options] + [("submit", "Submit")]
        r = L.row_scale
        heights = {"label": L.dp(30 * r), "field": L.m("field"), "option": L.dp(42 * r), "submit": L.m("field")}
        gap = L.dp(8)
        need = sum(heights[k] + gap for k, _ in parts)
        room = self.bottom - self.top - L.dp(8)
        s = min(1.0, room / need)               # squeeze on short screens
        y = self.top + L.dp(8) * s
        for kind, name in parts:
            h = heights[kind] * s
            box = (self.x0 + pad, y, self.x1 - pad, y + h)
            if kind == "label":
                self.text(name, box, size="small", colour=pal.muted)
            elif kind == "field":
                self.field(name, {"form_name": "Name", "form_email": "Email"}[name], box)
            elif kind == "option":
                self.add("checkbox", box, text=name, id="option_" + slug(name), clickable=True,
                         checked=name in self.w.ticked, on_tap=("tick", name), fg=pal.text,
                         accent=pal.accent, muted=pal.muted, font=L.font("body"))
            else:
                x = self.x1 - pad - L.dp(128) if L.mirror else self.x0 + pad
                self.button("submit", "Submit", (x, y, x + L.dp(128), y + h), ("submit",))
            y += h + gap * s

    def page_form_done(self) -> None:
        L = self.look
        self.text("Thanks for signing up", (self.x0 + L.m("pad"), self.top + L.dp(16), self.x1,
                                            self.top + L.dp(56)), wid="done")


def grid_jitter(rng, apps, amplitude: float) -> dict:
    """Per-icon (dx, dy) in dp, uniform in +-amplitude (kept below the cell margin: no overlap)."""
    return {a: (rng.uniform(-amplitude, amplitude), rng.uniform(-amplitude, amplitude)) for a in apps}


def tile_colours(rng, labels) -> dict:
    """A random colour per label, drawn afresh for every instance: colour never names an app."""
    return {x: hsv(rng.random(), rng.uniform(0.35, 0.9), rng.uniform(0.35, 0.9)) for x in labels}
