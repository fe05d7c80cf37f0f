"""The browser device drives a real headless Chromium on pages served from loopback: clicks land on
the element the tree names (its bounds checked against the DOM's own), typed text arrives exactly,
the gate refuses a risky button, a restless page ends with a one-line error, and closing leaves no
browser process behind. No network: pages come from a local http.server or files."""
import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from embodia.agent.loop.episode import run_episode
from embodia.agent.recording.gui_log import GuiRecorder, list_gui_episodes, read_gui_episode
from embodia.devices import ActionError, DeviceLost, GuiAction, open_device
from embodia.devices.browser import BrowserDevice, PageNotSettled, open_browser, page_url
from embodia.devices.cdp import find_chromium
from embodia.policies import GuiReplayPolicy

pytest_plugins = ("gui_fixtures",)         # the xvfb fixture
pytestmark = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (apt-get install chromium)")

FORM = """<!doctype html><html><head><meta charset="utf-8"><title>Account settings</title>
<style>body{font:16px sans-serif;margin:20px} li{padding:6px;cursor:pointer} #spacer{height:1500px}</style></head>
<body><h1>Account</h1>
<form id="form" onsubmit="event.preventDefault(); document.getElementById('out').textContent='submitted ' + document.getElementById('name').value">
  <label for="name">Name</label> <input id="name" placeholder="Your name">
  <label><input type="checkbox" id="agree"> I agree</label>
  <label for="pw">Password</label> <input type="password" id="pw">
  <textarea id="notes" rows="4" cols="40" aria-label="Notes"></textarea>
  <button id="save">Save</button>
</form>
<p id="out"></p>
<ul id="fruit"><li id="apple" onclick="pick(this)">Apple</li><li id="pear" onclick="pick(this)">Pear</li>
  <li id="plum" onclick="pick(this)">Plum</li></ul>
<p id="picked">nothing picked</p>
<button id="open" onclick="document.getElementById('dlg').showModal()">Remove items</button>
<dialog id="dlg"><p>Delete 3 items?</p><button id="ok" onclick="window.deleted=(window.deleted||0)+1; this.closest('dialog').close()">OK</button>
  <button id="cancel" onclick="this.closest('dialog').close()">Cancel</button></dialog>
<button id="delete" onclick="window.deleted=(window.deleted||0)+1">Delete account</button>
<a id="next" href="page2.html">Next page</a>
<button id="clock" onclick="setInterval(() => { this.textContent = performance.now(); }, 20)">Start clock</button>
<div id="spacer"></div><p id="bottom">The end</p>
<script>
window.clicks = [];
document.addEventListener('click', e => window.clicks.push([e.target.id, e.clientX, e.clientY, e.isTrusted]));
if (location.search === '?dialog=1') document.getElementById('dlg').showModal();
function pick(li) { document.getElementById('picked').textContent = 'picked ' + li.textContent; }
</script></body></html>"""
PAGE2 = """<!doctype html><html><head><title>Second</title></head><body><h1>Second page</h1>
<img src="slow.png" alt="late"></body></html>"""
RESTLESS = """<!doctype html><html><head><title>Clock</title></head><body><p id="t">0</p>
<script>setInterval(() => { document.getElementById('t').textContent = performance.now(); }, 20);</script></body></html>"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/slow.png"):
            time.sleep(0.4)           # an image that arrives late: the page is not settled before it
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Pages on a loopback HTTP server: its base URL."""
    root = tmp_path_factory.mktemp("site")
    (root / "form.html").write_text(FORM, encoding="utf-8")
    (root / "page2.html").write_text(PAGE2, encoding="utf-8")
    (root / "restless.html").write_text(RESTLESS, encoding="utf-8")
    (root / "slow.png").write_bytes(b"")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def web(site):
    dev = open_device(f"browser:{site}/form.html?size=1024x700")
    yield dev
    dev.close()


def element(obs, dom_id):
    return next(e for e in obs.ui_tree if e.get("id") == dom_id)


def dom_rect(dev, dom_id):
    return dev.evaluate(f"(r => [r.left, r.top, r.right, r.bottom])(document.getElementById({json.dumps(dom_id)})"
                        f".getBoundingClientRect())")


def test_tree_has_the_shared_schema_and_bounds_match_the_dom(web):
    obs = web.reset(0)
    assert obs.images["screen"].shape == (700, 1024, 3) and obs.screen.width == 1024
    tree = obs.ui_tree
    assert [e["index"] for e in tree] == list(range(len(tree)))
    assert all(set(e) <= web.element_fields for e in tree)
    roles = {e["id"]: e["role"] for e in tree if e["id"]}
    assert roles["name"] == "entry" and roles["notes"] == "text" and roles["pw"] == "password text"
    assert roles["agree"] == "check box" and roles["save"] == "push button" and roles["next"] == "link"
    assert element(obs, "pw")["password"] and "value" not in element(obs, "pw")
    assert element(obs, "apple")["clickable"] and element(obs, "apple")["text"] == "Apple"
    assert element(obs, "agree")["checked"] is False
    assert not any(e.get("id") == "bottom" for e in tree)            # below the fold: not on screen
    for dom_id in ("name", "agree", "notes", "save", "apple", "plum", "delete", "next"):
        x0, y0, x1, y1 = element(obs, dom_id)["bounds"]
        left, top, right, bottom = dom_rect(web, dom_id)
        assert abs(x0 - left) <= 1 and abs(y0 - top) <= 1 and abs(x1 - right) <= 1 and abs(y1 - bottom) <= 1, dom_id


def test_element_clicks_land_on_that_element_and_take_effect(web):
    obs = web.reset(0)
    for dom_id in ("pear", "agree", "name"):
        web.act(GuiAction("click", element=element(obs, dom_id)["index"]))
    clicks = web.evaluate("window.clicks")
    assert [c[0] for c in clicks] == ["pear", "agree", "name"] and all(c[3] for c in clicks)   # trusted events
    for (dom_id, x, y, _) in clicks:
        left, top, right, bottom = dom_rect(web, dom_id)
        assert left <= x < right and top <= y < bottom
    after = web.observe()
    assert web.evaluate("document.getElementById('picked').textContent") == "picked Pear"
    assert element(after, "agree")["checked"] is True and element(after, "name")["focused"] is True
    x, y = (c / d * 1000 for c, d in zip(element(after, "plum")["bounds"][:2], (1024, 700)))
    web.act(GuiAction("click", point=(x + 2, y + 2)))                 # a point, not an element
    assert web.evaluate("document.getElementById('picked').textContent") == "picked Plum"


def test_typing_is_literal(web):
    obs = web.reset(0)
    text = 'héllo "quoted" \'single\' `back` \\n ${x} <b>&amp; 你好 ✓ 🙂\nsecond line\n\ttab'
    web.act(GuiAction("type", element=element(obs, "notes")["index"], text=text))
    assert web.evaluate("document.getElementById('notes').value") == text
    web.act(GuiAction("type", element=element(obs, "name")["index"], text="Zoë O'Brien"))
    assert element(web.observe(), "name")["value"] == "Zoë O'Brien"
    web.act(GuiAction("key", keys=("ctrl", "a")))                      # a chord: select all, then replace
    web.act(GuiAction("type", text="Ann\n"))                           # the newline submits the form
    assert web.evaluate("document.getElementById('out').textContent") == "submitted Ann"


def test_scroll_navigate_and_back(web):
    obs = web.reset(0)
    web.scroll_px = 120              # the form stays in view
    web.act(GuiAction("scroll", point=(500, 500), direction="down"))
    assert web.evaluate("window.scrollY") == web.scroll_px
    scrolled = web.observe()
    x0, y0, _, _ = element(scrolled, "delete")["bounds"]
    assert (x0, y0) != tuple(element(obs, "delete")["bounds"][:2])
    left, top, _, _ = dom_rect(web, "delete")
    assert abs(x0 - left) <= 1 and abs(y0 - top) <= 1                  # bounds follow the scroll
    web.act(GuiAction("click", element=element(scrolled, "next")["index"]))
    assert web.last_settle >= 0.35                                     # it waited for the late image
    assert web.observe().ui_tree[0]["window"] == "Second"
    web.act(GuiAction("system_button", button="back"))
    assert web.evaluate("document.title") == "Account settings"
    with pytest.raises(ActionError, match="home"):
        web.act(GuiAction("system_button", button="home"))
    with pytest.raises(ActionError, match="unknown key"):
        web.act(GuiAction("key", keys=("hyper",)))


def test_delete_account_is_refused_by_default_and_not_clicked(web, tmp_path):
    obs = web.reset(0)
    rec = GuiRecorder(tmp_path / "rec", web.embodiment)
    plan = [GuiAction("click", element=element(obs, "pear")["index"]),
            GuiAction("click", element=element(obs, "delete")["index"])]
    r = run_episode(web, GuiReplayPolicy(plan), recorder=rec)
    assert r.error.startswith("RiskRefused") and "delete" in r.error
    assert web.evaluate("window.deleted || 0") == 0                    # the page never saw the click
    assert web.evaluate("document.getElementById('picked').textContent") == "picked Pear"
    last = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])["steps"][-1]
    assert last["executed"] is False and last["safety"]["by"] == "default-no"
    assert "Delete account" in last["safety"]["evidence"]


def test_a_dialog_confirming_a_delete_is_refused_too(web):
    obs = web.reset(0)
    web.act(GuiAction("click", element=element(obs, "open")["index"]))   # the page opens its dialog
    shown = web.observe()
    dialog = next(e for e in shown.ui_tree if e["role"] == "dialog")
    ok = element(shown, "ok")
    assert all(dialog["bounds"][k] <= ok["bounds"][k] for k in (0, 1)) and \
        all(dialog["bounds"][k] >= ok["bounds"][k] for k in (2, 3))
    web.url += "?dialog=1"                          # an episode starts on the page with its dialog open
    r = run_episode(web, GuiReplayPolicy([GuiAction("click", element=ok["index"])]))
    assert r.error.startswith("RiskRefused") and "Delete 3 items" in r.error
    assert web.evaluate("window.deleted || 0") == 0


def test_a_page_that_never_settles_times_out_with_one_line(site):
    t0 = time.monotonic()
    with pytest.raises(PageNotSettled) as e:
        open_browser(f"{site}/restless.html", settle="1.5")
    assert time.monotonic() - t0 < 15
    msg = str(e.value)
    assert "\n" not in msg and "did not settle within 1.5 s" in msg and "DOM changed" in msg
    with open_browser(f"{site}/restless.html", settle="0") as dev:     # settle=0: the caller's choice
        assert dev.observe().images["screen"].shape == (800, 1280, 3) and dev.evaluate("document.title") == "Clock"


def test_the_loop_ends_a_page_turned_restless_with_its_record_saved(site, tmp_path):
    with open_browser(f"{site}/form.html", settle="1") as dev:
        rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
        clock = element(dev.observe(), "clock")["index"]
        r = run_episode(dev, GuiReplayPolicy([GuiAction("click", element=clock)] * 3), recorder=rec)
    assert r.error.startswith("PageNotSettled") and "DOM changed" in r.error and r.steps == 0   # the first click
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])
    assert ep["end"]["info"]["error"] == r.error


def test_cli_names_a_page_that_never_settles_in_one_line(site):
    cmd = [sys.executable, "-m", "embodia", "run", "-d", f"browser:{site}/restless.html?settle=1",
           "--policy", "random", "--no-record"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "did not settle within 1 s" in lines[0], lines


def _alive(pgid: int) -> list[str]:
    """Processes of the group that still run (zombies are dead; PID 1 reaps them)."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split()[1][0] != "Z"]


def test_close_ends_chromium_and_its_helpers(site):
    dev = open_browser(f"{site}/form.html")
    pgid = dev.chrome.pid
    profile = dev.chrome.profile
    assert len(_alive(pgid)) >= 2                    # the browser and its renderer, zygote, GPU helpers
    dev.close()
    deadline = time.monotonic() + 5
    while _alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(pgid) == [] and not os.path.exists(profile)


def test_a_killed_browser_is_a_lost_device_and_the_episode_is_saved(site, tmp_path):
    with open_browser(f"{site}/form.html") as dev:
        pear = element(dev.observe(), "pear")["index"]
        rec = GuiRecorder(tmp_path / "rec", dev.embodiment)

        def kill(step):                  # the browser dies after the first step
            os.killpg(dev.chrome.pid, signal.SIGKILL)
            assert dev.chrome.why_gone(5)

        r = run_episode(dev, GuiReplayPolicy([GuiAction("click", element=pear)] * 3), recorder=rec, on_step=kill)
        assert r.error.startswith("DeviceLost") and "Chromium exited" in r.error and r.steps == 1
        with pytest.raises(DeviceLost, match="Chromium exited"):
            dev.observe()
    ep = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])
    assert len(ep["steps"]) == 1 and ep["end"]["info"]["error"] == r.error


def test_uri_options_and_page_query():
    assert page_url("http://127.0.0.1:8000/p", {"id": "3", "q": "a b"}) == "http://127.0.0.1:8000/p?id=3&q=a%20b"
    assert page_url("", {}) == "about:blank"
    with pytest.raises(ValueError, match="neither a URL"):
        page_url("no/such/file.html", {})
    with pytest.raises(ValueError, match="size"):
        open_browser("about:blank", size="12x")


def test_embodia_run_with_an_actions_policy_records_the_episode(site, tmp_path):
    page = tmp_path / "form.html"
    page.write_text(FORM, encoding="utf-8")
    actions = tmp_path / "actions.jsonl"
    with BrowserDevice(page.as_uri()) as dev:         # find the elements' indices as a policy would
        tree = dev.observe().ui_tree
    idx = {e["id"]: e["index"] for e in tree if e["id"]}
    steps = [{"type": "click", "element": idx["plum"]},
             {"type": "type", "element": idx["name"], "text": "Zoë \"Z\""},
             {"type": "terminate", "status": "success"}]
    actions.write_text("\n".join(json.dumps(s) for s in steps), encoding="utf-8")
    out = tmp_path / "rec"
    cmd = [sys.executable, "-m", "embodia", "run", "-d", f"browser:{page.as_uri()}",
           "--policy", f"actions:{actions}", "--record", str(out), "--success", 'check:element(id=name, value~"Zoë")']
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "success in 3 steps" in said, said
    ep = read_gui_episode(list_gui_episodes(out)[0], load_images=True)
    assert [s["action"]["type"] for s in ep["steps"]] == ["click", "type", "terminate"]
    assert ep["steps"][0]["ui_tree"] and ep["header"]["embodiment"]["kind"] == "gui-browser"
    view = subprocess.run([sys.executable, "-m", "embodia", "view", str(out), "-o", str(tmp_path / "view")],
                          capture_output=True, text=True, timeout=120)
    assert view.returncode == 0 and (tmp_path / "view" / "index.html").exists(), view.stdout + view.stderr


def test_mcp_client_drives_a_page_and_the_gate_refuses_delete_account(tmp_path):
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters
    page = tmp_path / "form.html"
    page.write_text(FORM, encoding="utf-8")
    server = StdioServerParameters(command=sys.executable, args=["-m", "embodia", "mcp", "--record", str(tmp_path / "rec"),
                                                                 "--file-root", str(tmp_path)],      # pages it may open
                                   env=dict(os.environ))

    async def main():
        async with Client(server) as c:
            opened = await c.call_tool("open_device", {"uri": f"browser:{page.as_uri()}"})
            assert not opened.is_error, opened.content[0].text
            obs = await c.call_tool("observe", {})
            tree = json.loads(obs.content[-1].text)["ui_tree"]
            assert obs.content[0].type == "image"
            idx = {e["id"]: e["index"] for e in tree if e.get("id")}
            refused = await c.call_tool("act", {"action": {"type": "click", "element": idx["delete"]}})
            assert refused.is_error and "refused 'delete'" in refused.content[0].text
            done = await c.call_tool("act", {"action": {"type": "click", "element": idx["pear"]}})
            assert not done.is_error, done.content[0].text
            closed = json.loads((await c.call_tool("close_device", {})).content[-1].text)
            return closed["record_dir"]

    ep = read_gui_episode(list_gui_episodes(anyio.run(main))[0])
    assert [s["executed"] for s in ep["steps"]] == [False, True] and ep["end"] is not None


def test_take_over_records_the_persons_own_clicks_and_keys(site, tmp_path):
    """A person takes the tab over: their input (here sent by a second DevTools client, as trusted
    as a person's in a browser window) is recorded as intervention steps tied to tree elements."""
    from embodia.agent.loop.takeover import DevicePerson, Takeover, person_for
    from embodia.devices.cdp import Page
    with open_browser(f"{site}/form.html") as dev:
        assert isinstance(person_for(dev), DevicePerson)
        rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
        takeover = Takeover(person=person_for(dev), say=lambda m: None)
        takeover.take()
        obs = dev.observe()
        pear, name = element(obs, "pear"), element(obs, "name")

        def person():
            assert takeover.person_active.wait(20)
            import urllib.request
            with urllib.request.urlopen(f"http://127.0.0.1:{dev.chrome.port}/json/list") as r:
                url = next(t for t in json.loads(r.read()) if t["type"] == "page")["webSocketDebuggerUrl"]
            hands = Page(url)
            for box in (pear["bounds"], name["bounds"]):
                x, y = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
                for kind in ("mousePressed", "mouseReleased"):
                    hands.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
            for ch in "Zoë":
                hands.call("Input.dispatchKeyEvent", type="keyDown", key=ch, text=ch)
                hands.call("Input.dispatchKeyEvent", type="keyUp", key=ch)
            hands.call("Input.dispatchKeyEvent", type="rawKeyDown", key="a", code="KeyA", modifiers=2,
                       windowsVirtualKeyCode=65)
            hands.close()
            time.sleep(1.0)
            takeover.done()

        helper = threading.Thread(target=person)
        helper.start()
        r = run_episode(dev, GuiReplayPolicy([GuiAction("wait", duration_ms=10)] * 50), recorder=rec,
                        takeover=takeover, max_steps=50)
        helper.join(30)
        assert dev.evaluate("document.getElementById('picked').textContent") == "picked Pear"
    steps = read_gui_episode(list_gui_episodes(tmp_path / "rec")[0])["steps"]
    mine = [s["action"] for s in steps if s.get("intervention")]
    assert [(a["type"], a.get("element"), a.get("text"), tuple(a.get("keys", ()))) for a in mine] == [
        ("click", pear["index"], None, ()), ("click", name["index"], None, ()), ("type", None, "Zoë", ()),
        ("key", None, None, ("ctrl", "a")), ("terminate", None, None, ())]
    assert r.info["person_steps"] == 5


def test_a_window_on_an_x_display_when_not_headless(site, xvfb):
    """headless=0: a real Chromium window on the display; the page is driven the same way, and the
    window shows on the X screen (Xvfb's root is black where nothing is drawn)."""
    import mss
    with open_browser(f"{site}/form.html", headless="0", size="800x600") as dev:
        obs = dev.reset(0)
        assert obs.images["screen"].shape == (600, 800, 3)
        dev.act(GuiAction("click", element=element(obs, "pear")["index"]))
        assert dev.evaluate("document.getElementById('picked').textContent") == "picked Pear"
        with mss.MSS(display=xvfb.display) as sct:
            shot = sct.grab({"left": 0, "top": 0, "width": xvfb.width, "height": xvfb.height})
        assert len(set(shot.raw[::4 * 97])) > 1                     # something is drawn on the screen
