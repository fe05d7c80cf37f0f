"""Take over and hand back: a person pauses the agent, acts themselves, and gives the device back.

A `Takeover` is consulted by the loop between two decisions (`embodia.agent.loop.episode`). Its
commands come from any thread: ``take()`` (the person takes the device), ``hand_back()`` (the agent
goes on from where the person left it) and ``done()`` (the person says the task is finished: the
episode ends). On a terminal, ``embodia run --takeover`` maps them to keys (`TerminalKeys`):
``t`` takes over, ``r`` resumes, ``d`` is done; Ctrl-C keeps its meaning (the episode is interrupted).
Without a terminal (a script, a test), ``listen_to_signals`` maps SIGUSR1 to take over / hand back
and SIGUSR2 to done: ``kill -USR1 <pid>``.

While a person holds the device, the agent decides nothing and executes nothing. What the person
does is recorded as steps flagged as interventions (``"intervention": true`` in the GUI step log,
the ``intervention`` column of a LeRobot dataset) and shown to the policy as executed steps, so a
success memory stores the person's actions like its own: a person-finished episode with a verified
label (``--success check:...`` or ``ask``) teaches the next run. How a person's actions are known
depends on the body (`person_for`):

- a desktop (X11): their clicks and keys, recorded with the RECORD extension and assembled into
  GuiActions (`embodia.devices.x_input`; the element under each click is looked up in the tree);
- a browser page (``browser:``): its own trusted input events, reported by the page
  (`DevicePerson`, `embodia.devices.browser_person`), the element under each click looked up too;
- simulated bodies (``gui-sim:``, ``sim:``, ``mujoco:``): a stand-in policy drives the device
  (`StandIn`: a scripted person, the simulator's expert); a continuous body under ``--takeover`` on
  a terminal is driven from its keys (`KeyboardStandIn`: i j k l, space stops);
- any other GUI device (an Android phone): the screens before and after the person's turn only
  (`ScreensOnly`: one step with the action unknown, which no memory stores).

``done()`` on a GUI device ends with a ``terminate`` step by the person, so a memory that replays
the person also learns where the task ends.

A person (here gui-sim's expert standing in) takes over at once and finishes the task:

>>> from embodia.agent.loop.episode import run_episode
>>> from embodia.devices import open_device
>>> from embodia.sim.gui import ChancePolicy
>>> dev = open_device("gui-sim:settings")
>>> takeover = Takeover(person=StandIn(dev.expert()), say=lambda m: None)
>>> takeover.take()                       # from any thread; threading.Timer(5, takeover.take) too
>>> r = run_episode(dev, ChancePolicy(dev), seed=0, takeover=takeover)
>>> r.success, r.info["person_steps"] == r.steps
(True, True)
>>> dev.close()
"""
from __future__ import annotations

import os
import queue
import select
import sys
import threading
import time
from typing import Callable

from embodia.devices import GuiAction
from embodia.policies.base import as_policy

TAKE, BACK, DONE = "take", "back", "done"
KEYS = {"t": TAKE, "r": BACK, "d": DONE}
POLL_S = 0.05            # how often a person's turn looks for their finished actions and commands


class Takeover:
    """Who holds the device: the agent, or a person (see the module doc). ``person``: how the
    person's actions are known (None: chosen per device by `person_for` at each turn);
    ``say``: where the messages for the person go."""

    def __init__(self, person=None, *, say: Callable[[str], None] | None = None, keys=False):
        self.person = person
        # keys: True for this process's terminal (stdin), or a terminal stream to read instead
        self.keys = (TerminalKeys(self, None if keys is True else keys) if keys else None)
        self.say = say or (lambda m: print(m, file=sys.stderr, flush=True))
        self._commands: queue.Queue = queue.Queue()
        self.person_active = threading.Event()     # set while a person holds the device
        self.turns = 0
        self.turn_ended = threading.Event()        # set when a turn ends (scripts wait on it)
        self.current: PersonInput | None = None    # who acts in the turn under way

    # -- commands, from any thread ---------------------------------------------------------------
    def take(self) -> None:
        self._commands.put(TAKE)

    def hand_back(self) -> None:
        self._commands.put(BACK)

    def done(self) -> None:
        self._commands.put(DONE)

    def toggle(self) -> None:
        """Take over while the agent drives; hand back while a person does."""
        self._commands.put(BACK if self.person_active.is_set() else TAKE)

    def listen_to_signals(self) -> Callable[[], None]:
        """SIGUSR1 toggles (take over / hand back), SIGUSR2 says done (main thread only); returns
        the function that puts the previous handlers back."""
        import signal
        before = {sig: signal.signal(sig, handler) for sig, handler in (
            (signal.SIGUSR1, lambda *_: self.toggle()), (signal.SIGUSR2, lambda *_: self.done()))}

        def restore() -> None:
            for sig, handler in before.items():
                signal.signal(sig, handler)
        return restore

    def key(self, ch: str) -> None:
        """A key that is not a command, for the person input of the turn under way (a keyboard
        stand-in); ignored while the agent drives."""
        person = self.current
        if person is not None and self.person_active.is_set():
            person.key(ch)

    def _next(self, timeout: float = 0.0) -> str | None:
        try:
            return self._commands.get(timeout=timeout) if timeout else self._commands.get_nowait()
        except queue.Empty:
            return None

    # -- the loop's side -------------------------------------------------------------------------
    def attach(self) -> None:
        """An episode starts: listen to the terminal's keys (when asked for and on a terminal)."""
        if self.keys is not None:
            self.keys.start()

    def detach(self) -> None:
        """The episode's steps are over: give the terminal back (an ``ask`` label may read it)."""
        if self.keys is not None:
            self.keys.stop()

    def between_steps(self, run) -> bool:
        """Called by the loop before each decision: runs a person's turn when one was asked for.
        True when the episode should end (the person said done, or the task succeeded)."""
        cmd = self._next()
        if cmd == DONE:
            return True
        if cmd != TAKE:
            return False                   # a stray "back" while the agent drives: nothing to do
        return self.person_turn(run)

    def person_turn(self, run) -> bool:
        """The person's turn: record their steps until they hand back (False) or are done (True)."""
        keyboard = self.keys is not None and self.keys.active
        person = self.person if self.person is not None else person_for(run.device, keyboard=keyboard)
        self.current = person
        self.turns += 1
        self.turn_ended.clear()
        person.start(run)
        self.person_active.set()
        self.say(f"taken over at step {run.steps}: {person.hint} then hand back, or say done when the task "
                 f"is finished")
        end = False
        try:
            while True:
                cmd = self._next(POLL_S)
                if cmd in (BACK, DONE):
                    end = cmd == DONE
                    break
                if _replay(run, person.poll(run)):
                    return True            # the task succeeded: what the person does after is not kept
                if person.finished:
                    break                  # a stand-in that ran out of actions hands back
        finally:
            self.person_active.clear()
            tail = person.stop(run)
            self.turn_ended.set()
        if _replay(run, tail):
            return True
        if end:
            if run.gui:
                run.execute(GuiAction("terminate", status="success"), person=True)
            self.say("the person finished the task")
            return True
        self.say(f"handed back at step {run.steps}")
        return False


DONE_BY_PERSON, EXECUTE, UNKNOWN = "done", "execute", "unknown"


def _replay(run, steps) -> bool:
    """Record a person's finished steps; True when the episode should stop."""
    for action, how in steps:
        if how == EXECUTE:
            stop = run.execute(action, person=True)
        else:
            stop = run.record_person(action, tell_policy=how == DONE_BY_PERSON,
                                     extra={"action_unknown": True} if how == UNKNOWN else None)
        if stop:
            return True
    return False


# -- how a person's actions are known --------------------------------------------------------------
class PersonInput:
    """A source of a person's steps during their turn: ``poll`` and ``stop`` return (action, how)
    pairs, ``how`` one of "done" (the person did it), "execute" (the loop executes it: a stand-in)
    or "unknown" (something happened, the action is not known)."""

    hint = "act on the device,"
    finished = False

    def start(self, run) -> None:
        pass

    def poll(self, run) -> list:
        return []

    def stop(self, run) -> list:
        return []

    def key(self, ch: str) -> None:
        """A key typed on the terminal during the turn (only a keyboard stand-in uses it)."""


class XPerson(PersonInput):
    """The person's clicks and keys on the desktop's X display (`embodia.devices.x_input`); each
    click is tied to the element under it in the tree observed before it."""

    hint = "use the mouse and keyboard on the desktop,"

    def __init__(self, display: str):
        self.display = display
        self._rec = None
        self._asm = None

    def start(self, run) -> None:
        from embodia.devices.desktop import x_env
        from embodia.devices.x_input import InputAssembler, XInputRecorder
        with x_env(self.display):
            self._rec = XInputRecorder(self.display)
        screen = run.device.embodiment.screen
        self._asm = InputAssembler((screen.width, screen.height))
        self._rec.start()

    def _take(self, run, flush: bool) -> list:
        for ev in self._rec.drain():
            self._asm.feed(ev)
        return [(with_element(a, run.obs), DONE_BY_PERSON)
                for a in self._asm.take(flush=flush, now_ms=self._rec.server_ms())]

    def poll(self, run) -> list:
        if self._rec.error is not None:
            raise RuntimeError(f"recording the person's input stopped: {self._rec.error}")
        out = self._take(run, flush=False)
        if out:
            run.device.wait_still()     # the step's "after" screen is the settled one, as for the agent's
        return out

    def stop(self, run) -> list:
        time.sleep(POLL_S)                  # the last events are still on their way from the server
        self._rec.stop()
        try:
            return self._take(run, flush=True)
        finally:
            self._rec.close()


class DevicePerson(PersonInput):
    """A device that reports the person's input itself (the "person_input" capability: a browser
    page's own input events, `embodia.devices.browser_person`); each pointer action is tied to
    the element under it, as on the desktop."""

    hint = "use the mouse and keyboard in the browser window,"

    def start(self, run) -> None:
        run.device.person_start()

    def poll(self, run) -> list:
        out = [(with_element(a, run.obs), DONE_BY_PERSON) for a in run.device.person_poll()]
        if out:
            run.device.wait_still()
        return out

    def stop(self, run) -> list:
        return [(with_element(a, run.obs), DONE_BY_PERSON) for a in run.device.person_stop()]


def with_element(action: GuiAction, obs) -> GuiAction:
    """A pointer action tied to the smallest element under its point in ``obs``'s tree (a person
    clicks a button, not a pixel); unchanged where there is no tree or no element there."""
    from embodia.memory.screen_refs import element_at
    if action.point is None or action.type in ("drag", "swipe") or not obs or not obs.ui_tree or not obs.screen:
        return action
    el = element_at(obs.ui_tree, action.point, (obs.screen.width, obs.screen.height),
                    scroll=action.type == "scroll")
    if el is None or not isinstance(el.get("index"), int):
        return action
    return GuiAction.from_dict({**action.to_dict(), "element": el["index"]})


class StandIn(PersonInput):
    """A stand-in for a person on a simulated body: ``policy`` (a scripted person, the device's
    expert, a teleoperator) decides and the loop executes, flagged as interventions. It hands back
    when the policy returns None or after ``max_steps`` steps."""

    hint = "a stand-in drives the device,"

    def __init__(self, policy, max_steps: int | None = None):
        self.policy, self.max_steps = as_policy(policy), max_steps
        self.finished, self._n = False, 0

    def start(self, run) -> None:
        self.finished, self._n = False, 0

    def poll(self, run) -> list:
        if self.max_steps is not None and self._n >= self.max_steps:
            self.finished = True
            return []
        action = self.policy.act(run.obs, run.instruction)
        if action is None or (not isinstance(action, GuiAction) and len(action) == 0):
            self.finished = True
            return []
        self._n += 1
        if isinstance(action, GuiAction):
            return [(action, EXECUTE)]
        rows = action if getattr(action, "ndim", 1) == 2 else [action]
        return [(rows[0], EXECUTE)]


class KeyboardStandIn(PersonInput):
    """A person at the terminal drives a continuous body: ``l`` / ``j`` push the first action channel
    up / down, ``i`` / ``k`` the second, at ``scale`` of half their range from the middle; space
    stops. A terminal reports no key release, so a direction holds until another key. One action
    per poll, executed by the loop (flagged as an intervention)."""

    hint = "drive with i j k l (space stops),"
    DIRECTIONS = {"l": (0, 1.0), "j": (0, -1.0), "i": (1, 1.0), "k": (1, -1.0)}

    def __init__(self, embodiment, scale: float = 0.5):
        import numpy as np
        low, high = (np.asarray(b, np.float32) for b in embodiment.action_bounds())
        self.mid, self.half, self.scale = (low + high) / 2, (high - low) / 2, float(scale)
        self.dim = len(self.mid)
        self._last: str | None = None
        self._push = np.zeros(self.dim, np.float32)

    def key(self, ch: str) -> None:
        self._last = ch

    def start(self, run) -> None:
        self._push[:] = 0.0
        self._last = None

    def poll(self, run) -> list:
        ch, self._last = self._last, None
        if ch == " ":
            self._push[:] = 0.0
        elif ch in self.DIRECTIONS and self.DIRECTIONS[ch][0] < self.dim:
            i, sign = self.DIRECTIONS[ch]
            self._push[:] = 0.0
            self._push[i] = sign
        return [(self.mid + self._push * self.scale * self.half, EXECUTE)]


class ScreensOnly(PersonInput):
    """Where the device cannot report the person's input: one step with the screens before and
    after the turn, its action unknown (a ``wait`` flagged ``action_unknown``), which is recorded
    but not shown to the policy, so no memory stores it."""

    hint = "act on the device (only the screens before and after are recorded),"

    def start(self, run) -> None:
        self._t0 = time.monotonic()

    def stop(self, run) -> list:
        ms = int((time.monotonic() - self._t0) * 1e3)
        return [(GuiAction("wait", duration_ms=min(ms, 60_000)), UNKNOWN)]


def person_for(device, *, keyboard: bool = False) -> PersonInput:
    """How a person's actions on ``device`` are known (see the module doc); ``keyboard``: a person
    is at a terminal whose keys reach the turn."""
    if device.display:          # an X screen: the X server reports the person's input
        return XPerson(device.display)
    if "person_input" in device.capabilities:
        return DevicePerson()
    if not device.embodiment.is_gui:
        if keyboard:
            return KeyboardStandIn(device.embodiment)
        if "expert" in device.capabilities:
            return StandIn(device.expert())
        raise ValueError(f"nobody can drive {device.embodiment.name!r} in a take-over here: no terminal "
                         f"for the keys and no scripted expert (pass Takeover(person=StandIn(policy)))")
    if "expert" in device.capabilities:
        return StandIn(device.expert())
    return ScreensOnly()


# -- the terminal --------------------------------------------------------------------------------
class TerminalKeys:
    """Reads single keys from the terminal while an episode runs (``t`` take over, ``r`` resume,
    ``d`` done) and sends them to a `Takeover`. Only on a real terminal (``active`` is False
    otherwise); the terminal is put in cbreak mode, so Ctrl-C still interrupts, and restored by
    ``stop``. Stopped between episodes: an ``ask`` question reads the same terminal."""

    def __init__(self, takeover: Takeover, stream=None):
        self.takeover = takeover
        self.stream = stream if stream is not None else sys.stdin
        self.active = bool(getattr(self.stream, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved = None

    def start(self) -> None:
        if not self.active or self._thread is not None:
            return
        import termios
        import tty
        fd = self.stream.fileno()
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        self._stop.clear()
        self._thread = threading.Thread(target=self._read, args=(fd,), name="embodia-takeover-keys", daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.1)
            if not ready:
                continue
            key = os.read(fd, 1).decode(errors="replace").lower()
            cmd = KEYS.get(key)
            if cmd == TAKE:
                self.takeover.toggle()       # t while holding the device gives it back
            elif cmd is not None:
                self.takeover._commands.put(cmd)
            else:
                self.takeover.key(key)       # a keyboard stand-in's driving keys

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(1.0)
        self._thread = None
        import termios
        termios.tcsetattr(self.stream.fileno(), termios.TCSADRAIN, self._saved)
