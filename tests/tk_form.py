"""A small real Tk form that desktop-device tests drive: run it as a subprocess on an X display.

    DISPLAY=:99 python tests/tk_form.py --state state.json --geometry geometry.json [--at 100,80]

It runs in its own process so Tk's mainloop never competes with the test's input calls.

- At startup, once the window is mapped and drawn, it writes ``--geometry`` (JSON): the screen size
  and the screen rectangle of the window and of each widget, ``{"screen": [w, h], "window": rect,
  "widgets": {"entry": rect, "check": rect, "submit": rect, "status": rect}}`` with
  ``rect = {"x", "y", "width", "height"}`` in screen pixels (``winfo_rootx`` ...), so a test computes
  its 0..1000 points from real geometry.
- Every press of Submit writes ``--state`` (JSON): ``{"entry": text, "checked": bool, "submits": n,
  "events": [...]}``; with ``--live`` the state is written after every logged event instead.
  The event log records mouse presses and releases (root coordinates, button: 4/5 are the wheel),
  key presses, focus changes of the entry, pastes, checkbox toggles and submits.

Both files are written atomically (temporary file, then rename), so a reader never sees half a file.
The window does not force the keyboard focus: clicking the entry focuses it, as Tk does anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import tkinter as tk

WIDGETS = ("entry", "check", "submit", "status")


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    os.replace(tmp, path)


class Form:
    def __init__(self, root: tk.Tk, state_path: str, live: bool):
        self.root, self.state_path, self.live = root, state_path, live
        self.t0 = time.monotonic()
        self.submits = 0
        self.events: list[dict] = []
        self.checked = tk.IntVar(root, value=0)

        root.title("embodia test form")
        frame = tk.Frame(root, padx=16, pady=16, bg="#e8e8e8")
        frame.pack(fill="both", expand=True)
        tk.Label(frame, text="Name", bg="#e8e8e8").grid(row=0, column=0, sticky="w")
        # No blinking insertion cursor: a static screen lets the device's settle wait end at once.
        self.entry = tk.Entry(frame, width=32, insertofftime=0, font=("TkDefaultFont", 14))
        self.entry.grid(row=0, column=1, sticky="ew", pady=8)
        self.check = tk.Checkbutton(frame, text="Subscribe", variable=self.checked, bg="#e8e8e8",
                                    command=lambda: self.log("check", value=bool(self.checked.get())))
        self.check.grid(row=1, column=1, sticky="w", pady=8)
        self.submit = tk.Button(frame, text="Submit", width=12, command=self.on_submit)
        self.submit.grid(row=2, column=1, sticky="w", pady=8)
        self.status = tk.Label(frame, text="not submitted", bg="#e8e8e8")
        self.status.grid(row=3, column=1, sticky="w")

        self.entry.bind("<FocusIn>", lambda e: self.log("focus_in", widget="entry"), add="+")
        self.entry.bind("<FocusOut>", lambda e: self.log("focus_out", widget="entry"), add="+")
        self.entry.bind("<<Paste>>", lambda e: self.log("paste", widget="entry"), add="+")
        root.bind_all("<ButtonPress>", lambda e: self.log_pointer("press", e), add="+")
        root.bind_all("<ButtonRelease>", lambda e: self.log_pointer("release", e), add="+")
        root.bind_all("<KeyPress>", lambda e: self.log("key", keysym=e.keysym, char=e.char,
                                                       widget=self.name_of(e.widget)), add="+")

    def name_of(self, widget) -> str:
        for name in WIDGETS:
            if widget is getattr(self, name):
                return name
        return str(widget)

    def log(self, kind: str, **fields) -> None:
        self.events.append({"type": kind, "t": round(time.monotonic() - self.t0, 4), **fields})
        if self.live:
            self.write_state()

    def log_pointer(self, kind: str, e) -> None:
        self.log(kind, button=e.num, x=e.x_root, y=e.y_root, widget=self.name_of(e.widget))

    def on_submit(self) -> None:
        self.submits += 1
        self.status.configure(text=f"submitted {self.submits}")
        self.log("submit", entry=self.entry.get(), checked=bool(self.checked.get()))
        self.write_state()

    def write_state(self) -> None:
        write_json(self.state_path, {"entry": self.entry.get(), "checked": bool(self.checked.get()),
                                     "submits": self.submits, "events": self.events})

    def geometry(self) -> dict:
        def rect(w):
            return {"x": w.winfo_rootx(), "y": w.winfo_rooty(), "width": w.winfo_width(),
                    "height": w.winfo_height()}
        return {"screen": [self.root.winfo_screenwidth(), self.root.winfo_screenheight()],
                "window": rect(self.root), "widgets": {n: rect(getattr(self, n)) for n in WIDGETS},
                "pid": os.getpid()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="JSON file written on Submit")
    ap.add_argument("--geometry", required=True, help="JSON file with widget rectangles, written at startup")
    ap.add_argument("--at", default="100,80", help="window position x,y in screen pixels")
    ap.add_argument("--size", default="520x260", help="window size WxH in screen pixels")
    ap.add_argument("--live", action="store_true", help="write the state after every event")
    args = ap.parse_args(argv)

    root = tk.Tk()
    form = Form(root, args.state, args.live)
    x, y = (int(v) for v in args.at.split(","))
    root.geometry(f"{args.size}+{x}+{y}")
    root.resizable(False, False)

    def report():
        root.update_idletasks()
        write_json(args.geometry, form.geometry())

    # Report once the window is mapped and its first frame drawn (no window manager moves it later).
    root.wait_visibility(root)
    root.update()
    root.after_idle(report)
    root.mainloop()


if __name__ == "__main__":
    main()
