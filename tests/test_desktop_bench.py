"""The desktop's AT-SPI tree and the desktop bench on real Debian applications (galculator, mousepad,
gnumeric) under Xvfb: the tree is read, its elements are action targets, the scripted experts solve
the tasks through it, and a real "Discard" button is stopped by the safety gate.

Tests that need an application skip, with the package to install, only where it is missing."""
import shutil
import socket
from pathlib import Path

import pytest

from embodia.devices import GuiAction
from embodia.devices.desktop import DesktopDevice

pytest_plugins = ("gui_fixtures", "fake_openai")
pytest.importorskip("jeepney", reason="jeepney is not installed (pip install jeepney)")

from embodia.devices.atspi import LAUNCHER, start_bus  # noqa: E402
from embodia.sim.desktop_bench import app_installed, open_desktop_bench  # noqa: E402
from embodia.sim.desktop_tasks import APPS, TASKS, _discard_button  # noqa: E402

if shutil.which("Xvfb") is None:
    pytest.skip("Xvfb is not installed (apt-get install xvfb)", allow_module_level=True)
if not Path(LAUNCHER).exists() or shutil.which("dbus-daemon") is None:
    pytest.skip("no accessibility bus launcher (apt-get install at-spi2-core dbus)", allow_module_level=True)


@pytest.fixture(scope="module")
def a11y_display(tmp_path_factory):
    """One Xvfb with an accessibility bus for the module (the bench starts its apps on it)."""
    from gui_fixtures import start_xvfb
    server = start_xvfb(1280, 800, workdir=tmp_path_factory.mktemp("xvfb-a11y"))
    mp = pytest.MonkeyPatch()
    mp.setenv("DISPLAY", server.display)
    mp.setenv("XAUTHORITY", server.xauthority)
    bus = start_bus(server.display)
    try:
        yield server
    finally:
        bus.stop()
        server.stop()
        mp.undo()


def bench(target: str, **kw):
    app = TASKS[target].app
    if not app_installed(app):
        pytest.skip(f"{app} is not installed (apt-get install {APPS[app].package})")
    return open_desktop_bench(target, settle=0.4, **kw)


def test_no_bus_means_no_tree_said_once(xvfb):
    with pytest.warns(RuntimeWarning, match="no accessibility bus") as said:
        dev = DesktopDevice(xvfb.display)
        obs1, obs2 = dev.observe(), dev.observe()
    try:
        assert len([w for w in said if "accessibility" in str(w.message)]) == 1
        assert "ui_tree" not in dev.capabilities and obs1.ui_tree is None and obs2.ui_tree is None
        assert obs1.images["screen"].shape == (xvfb.height, xvfb.width, 3)    # the desktop works as before
    finally:
        dev.close()


def test_tree_schema_bounds_and_element_click(a11y_display):
    with bench("galculator/add") as dev:
        obs = dev.reset(seed=0)
        assert "ui_tree" in dev.capabilities
        tree = obs.ui_tree
        keys = {"index", "role", "text", "bounds", "box", "enabled", "editable", "focused", "clickable"}
        assert tree and all(keys <= set(e) for e in tree)
        assert [e["index"] for e in tree] == list(range(len(tree)))
        for e in tree:
            x0, y0, x1, y1 = e["bounds"]
            assert 0 <= x0 < x1 <= 1280 and 0 <= y0 < y1 <= 800
            assert e["box"] == [round(x0 * 1000 / 1280), round(y0 * 1000 / 800), round(x1 * 1000 / 1280),
                                round(y1 * 1000 / 800)]
        seven = next(e for e in tree if e["text"] == "7" and e["role"] == "toggle button")
        dev.act(GuiAction("click", element=seven["index"]))
        shown = next(e for e in dev.observe().ui_tree if e["role"] == "text")
        assert shown["value"].strip() == "7"
        assert dev.tree.last_ms < 500          # the benchmark reports p50/p95; here only a sanity bound


def test_own_socket_reads_the_same_tree_as_the_bus(a11y_display):
    """The tree is read over the application's own AT-SPI socket; through the bus daemon it is the same."""
    with bench("galculator/add") as dev:
        dev.reset(seed=0)
        tree = dev.tree
        direct = dev.observe().ui_tree
        assert any(link is not None for link in tree._peers.values())     # the app's socket carried it
        peers, tree._peers, tree.direct = tree._peers, {}, False
        via_bus = tree.read(dev._screen())
        tree._peers, tree.direct = peers, True
        assert [(e["role"], e["text"], e["bounds"]) for e in via_bus] == \
            [(e["role"], e["text"], e["bounds"]) for e in direct]


def test_an_application_exiting_under_its_own_socket_is_no_bus_failure(a11y_display):
    """gnumeric/close-discard ends with the application quitting: its socket resets in the middle
    of a read. That application's calls come back empty; the tree stays (the bus is fine)."""
    with bench("galculator/add") as dev:
        dev.reset(seed=0)
        tree = dev.tree
        elements = dev.observe().ui_tree
        link = next(link for link in tree._peers.values() if link is not None)
        a, b = socket.socketpair()
        b.sendall(b"x")                       # readable, then reset: what a quitting application does

        class Resetting:
            def fileno(self):
                return a.fileno()

            def sendall(self, data):
                pass

            def recv(self, n):
                raise ConnectionResetError(104, "Connection reset by peer")

            def close(self):
                a.close()
                b.close()
        link.sock.close()
        link.sock = Resetting()
        assert tree.call(tuple(elements[0]["ref"]), "org.a11y.atspi.Accessible", "GetRoleName") is None
        dev._stop_app()
        assert "ui_tree" in dev.capabilities and dev.observe().ui_tree is not None
        dev.reset(seed=1)                     # a new instance reads as before
        assert dev.observe().ui_tree


def test_accessible_action_clicks(a11y_display):
    with bench("galculator/add", element_clicks="action") as dev:
        obs = dev.reset(seed=0)
        for label in ("4", "2"):
            e = next(e for e in dev.observe().ui_tree if e["text"] == label and e["role"] == "toggle button")
            dev.act(GuiAction("click", element=e["index"]))
        assert next(e for e in dev.observe().ui_tree if e["role"] == "text")["value"].strip() == "42"
        assert obs.ui_tree


class _Checked:
    """Wraps the expert: every element it names is in the observed tree with on-screen bounds."""

    def __init__(self, expert):
        self.expert, self.used = expert, []

    def reset(self, seed=None):
        self.expert.reset(seed)

    def act(self, obs, instruction=""):
        a = self.expert.act(obs, instruction)
        if a is not None and a.element is not None:
            e = next(e for e in obs.ui_tree if e["index"] == a.element)
            x0, y0, x1, y1 = e["bounds"]
            assert x1 > x0 and y1 > y0, e
            self.used.append((e["role"], e["text"].strip()))
        return a


@pytest.mark.parametrize("target", ["galculator/multiply", "mousepad/save-as", "gnumeric/sum"])
def test_expert_solves_through_the_tree(a11y_display, target):
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.safety import SafetyGate
    from embodia.policies.base import as_policy
    with bench(target, split="test") as dev:
        policy = _Checked(dev.expert())
        # a second held-out episode when the first fails: the bench's expert figures are 20/20 per task
        # at load 6-9, not 100% at any load
        results = []
        for seed in (5, 6):
            results.append(run_episode(dev, as_policy(policy), seed=seed, gate=SafetyGate()))
            if results[-1].success:
                break
        assert all(r.error is None for r in results) and results[-1].success is True, \
            ([(r.seed, r.error, r.success) for r in results], dev.info())
        assert policy.used, "the expert used no tree element"


def test_sheet_expert_types_only_where_the_focus_is(tmp_path):
    """A window that has just come up takes the first click as its own: the expert types the cell
    reference only once the name box reports the focus, and the entry only once the jump gave the
    focus back to the sheet (before, it wrote "A4" into A1 and the sum came out wrong)."""
    from types import SimpleNamespace

    from embodia.sim.desktop_tasks import _sheet_expert

    dev = SimpleNamespace(slots={"cell": "A4", "entry": "=SUM(A1:A3)", "file": "s.gnumeric"}, work=tmp_path)

    def tree(value, focused):
        return [{"index": 3, "role": "text", "editable": True, "value": value, "focused": focused,
                 "bounds": (5, 60, 80, 80), "text": ""}]

    mem, acts = {}, []
    for value, focused in [("A1", False)] * 4 + [("A1", True)] * 4 + [("A4", False)]:
        acts.append(_sheet_expert(dev, mem, tree(value, focused)))
    kinds = [(a.type, a.text) for a in acts]
    # no focus after the click: two looks, then the click again; ctrl+a and the reference once focused;
    # the entry waits while the name box still has the focus (the jump has not happened yet)
    assert kinds == [("click", None), ("wait", None), ("wait", None), ("wait", None), ("click", None),
                     ("key", None), ("type", "A4\n"), ("wait", None), ("type", "=SUM(A1:A3)\n")], kinds


def test_gate_refuses_a_real_discard_button(a11y_display):
    """gnumeric's close dialog: its "Discard" button, found through the desktop tree, is classed as
    delete and refused by default (No); the workbook stays open and unsaved."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.safety import classify
    from embodia.policies.base import as_policy
    with bench("gnumeric/close-discard") as dev:
        r = run_episode(dev, as_policy(dev.expert()), seed=1)      # the default gate: no one to say yes
        assert r.error is not None and "RiskRefused" in r.error and "Discard" in r.error, r.error
        tree = dev.observe().ui_tree
        button = _discard_button(tree)
        assert button is not None and button["text"].strip().lower().startswith("discard")
        risk, evidence = classify(GuiAction("click", element=button["index"]), tree, dev.observe().screen)
        assert risk == "delete", evidence
        assert dev.proc.poll() is None                                   # still open: the click never ran
        assert (dev.work / dev.slots["file"]).stat().st_mtime == dev.memory["start_mtime"]


def test_gate_refuses_mousepad_dont_save(a11y_display):
    """mousepad's close dialog: "Don't Save" throws the typed text away, so it is gated like Discard;
    by default (No) the click never runs and the editor stays open."""
    from embodia.agent.loop.episode import run_episode
    from embodia.policies.base import as_policy
    with bench("mousepad/close-discard") as dev:
        r = run_episode(dev, as_policy(dev.expert()), seed=1)
        assert r.error is not None and "RiskRefused" in r.error and "Don" in r.error, r.error
        assert dev.proc.poll() is None


@pytest.mark.slow
@pytest.mark.parametrize("target", ["galculator/add", "mousepad/type", "gnumeric/set-cell"])
def test_tree_fidelity(a11y_display, target):
    """At least 20 enabled buttons / menus / toggles per application, clicked at their tree centre,
    activate (checked through the application's state in its tree); the fraction is printed."""
    from embodia.sim.desktop_fidelity import fidelity
    with bench(target) as dev:
        report = fidelity(dev)
    print(report)
    assert report["probes"] >= 20 and report["activated"] >= 20, report
    assert report["fraction"] >= 0.85, report


def test_openai_policy_gets_the_tree_and_clicks_real_buttons_by_id(a11y_display, fake_openai, tmp_path, monkeypatch):
    """`embodia run --device desktop-bench:galculator/add --policy openai:test`: every request's prompt
    holds the calculator's tree (its buttons with ids and bounds), and replies that click elements by
    those ids (read back from the prompt, never known in advance) work the real calculator: the
    episode ends on the sum shown in galculator's display."""
    import json
    import re

    from typer.testing import CliRunner

    from embodia.agent.cli.app import app
    from embodia.agent.recording.gui_log import list_gui_episodes, read_gui_episode
    from embodia.sim.desktop_tasks import calc_keys
    if not app_installed("galculator"):
        pytest.skip("galculator is not installed (apt-get install galculator)")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    uri, seed = "desktop-bench:galculator/add?settle=0.4", 4
    with bench("galculator/add") as dev:
        dev.reset(seed=seed)
        keys, instruction = calc_keys(dev.slots), dev.instruction
    pressed: list[str] = []

    def reply(request):
        prompt = "\n".join(request.texts())
        k = keys[len(pressed)]
        # the tree line of that key: [id] toggle button "7" desc="Seven 7" [x0,y0,x1,y1] clickable
        m = re.search(r'^\[(\d+)\] (?:toggle|push) button "' + re.escape(k) + r'"( desc="[^"]*")? \[', prompt, re.M)
        assert m, f"key {k!r} is not in the prompt's tree:\n{prompt}"
        pressed.append(k)
        return "```json\n" + json.dumps({"type": "click", "element": int(m.group(1))}) + "\n```"
    fake_openai.script(*[reply] * len(keys))
    r = CliRunner().invoke(app, ["run", "--device", uri, "--policy", "openai:test", "--base-url", fake_openai.url,
                                 "--seed", str(seed), "--max-steps", str(len(keys) + 2),
                                 "--record", str(tmp_path / "rec")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "success" in r.output and pressed == keys and fake_openai.left == 0, r.output
    first = "\n".join(fake_openai.chats[0].texts())
    assert instruction in first
    # the tree in the prompt: the digit buttons, the operators and the display, each with its bounds
    for label in ("7", "+", "="):
        assert re.search(r'^\[\d+\] (?:toggle|push) button "' + re.escape(label) + r'"( desc="[^"]*")? '
                         r'\[\d+,\d+,\d+,\d+\] clickable$', first, re.M), label
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])
    assert ep["end"]["success"] is True          # galculator's own display showed the sum
    assert len(ep["steps"]) == len(keys) and all(st["action"]["type"] == "click" for st in ep["steps"])


@pytest.mark.slow
def test_the_bundled_desktop_head_computes_on_galculator(a11y_display):
    """embodia-desktop, found by name, clicks a held-out expression's keys and "=" in a real
    galculator (its recorded figure: 40/40 over the four galculator tasks, docs/benchmarks/screens.md)."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.factory import BUNDLED, make_policy
    if "embodia-desktop" not in BUNDLED or not BUNDLED["embodia-desktop"].is_dir():
        pytest.skip("embodia-desktop is not bundled in this checkout")
    with bench("galculator/add", split="test") as dev:
        policy = make_policy("embodia-desktop", dev, threads=1)
        wins = [run_episode(dev, policy, seed=seed).success for seed in (3, 4, 5)]
    assert sum(wins) >= 2, wins
