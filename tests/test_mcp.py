"""`embodia mcp`, driven by the MCP SDK's own client: over stdio (a subprocess), over streamable HTTP
on loopback, and on a desktop under Xvfb."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.types import ElicitResult  # noqa: E402

from embodia.agent.recording.gui_log import list_gui_episodes, read_gui_episode  # noqa: E402

pytest_plugins = ("gui_fixtures",)         # the xvfb and tk_form fixtures

REPO = Path(__file__).resolve().parents[1]
TOOLS = {"list_devices", "open_device", "observe", "act", "run_task", "memory_stats", "close_device"}
RISKY = {"type": "key", "keys": ["shift", "delete"]}      # the gate classes it "delete" on any body


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def _stdio(record: Path, *extra) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "embodia", "mcp", "--record", str(record), *extra],
                                 env=_env(), cwd=str(REPO))


def _answer(decision: str):
    async def elicit(ctx, params):
        elicit.asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": decision == "yes"})
    elicit.asked = []
    return elicit


def _json(result) -> dict:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[-1].text)


async def _drive_gui_sim(c: Client, tmp: Path, stateless: bool = False) -> None:
    """The acceptance walk: tools, open, observe, invalid and risky actions, an action, a task, memory.
    ``stateless``: the connection has no MCP session, so the tools get the one open_device named."""
    assert TOOLS <= {t.name for t in (await c.list_tools()).tools}
    opened = _json(await c.call_tool("open_device", {"uri": "gui-sim:settings", "seed": 0}))
    session = {"session": opened["session"]} if stateless else {}
    assert opened["instruction"] and "gui-phone" in opened["embodiment"]

    obs = await c.call_tool("observe", session)
    assert [b.type for b in obs.content] == ["image", "text"] and obs.content[0].mime_type == "image/png"
    facts = json.loads(obs.content[1].text)
    assert facts["ui_tree"] and facts["screen"]["width"] == 540 and "<embodiment>" in facts["embodiment_prompt"]

    bad = await c.call_tool("act", {"action": {"type": "click", "point": [2000, 5]}, **session})
    assert bad.is_error and "nothing executed" in bad.content[0].text
    bad = await c.call_tool("act", {"action": "I think I should click somewhere", **session})
    assert bad.is_error and "nothing executed" in bad.content[0].text
    risky = await c.call_tool("act", {"action": RISKY, **session})
    assert risky.is_error and "refused 'delete' action" in risky.content[0].text
    assert json.loads((await c.call_tool("observe", session)).content[1].text)["steps"] == 0   # nothing ran

    row = next(e for e in facts["ui_tree"] if e.get("clickable") and e.get("text"))
    done = _json(await c.call_tool("act", {"action": {"type": "click", "element": row["index"]}, **session}))
    assert done["executed"] == 1 and done["steps"] == 1

    progress = []

    async def on_progress(p, total, message):
        progress.append((p, total, message))
    memory = tmp / "memory"
    run = _json(await c.call_tool("run_task", {"policy": "expert", "seed": 3, "memory": str(memory), **session},
                                  progress_callback=on_progress))
    assert run["successes"] == 1 and run["episodes"][0]["success"] is True and not run["cancelled"]
    assert len(progress) == run["episodes"][0]["steps"] and progress[-1][0] == run["episodes"][0]["steps"]
    stats = _json(await c.call_tool("memory_stats", {"path": str(memory)}))
    assert sum(ns["episodes"] for ns in stats["namespaces"].values()) == 1

    closed = _json(await c.call_tool("close_device", session))
    episodes = [read_gui_episode(p) for p in list_gui_episodes(closed["record_dir"])]
    manual, by_policy = episodes                     # the client's own steps, then the expert's episode
    assert [s["executed"] for s in manual["steps"]] == [False, True]   # the refused risky action, the click
    assert manual["steps"][0]["safety"]["by"] == "default-no" and manual["end"] is not None
    assert by_policy["end"]["success"] is True and by_policy["header"]["meta"]["policy"] == "expert"
    assert (await c.call_tool("observe", session)).is_error          # nothing open any more


def test_stdio_client_drives_gui_sim(tmp_path):
    async def main():
        async with Client(_stdio(tmp_path / "rec")) as c:
            await _drive_gui_sim(c, tmp_path)
    anyio.run(main)


def test_stdio_risky_action_asks_the_client(tmp_path):
    async def main():
        no, yes = _answer("no"), _answer("yes")
        async with Client(_stdio(tmp_path / "a"), elicitation_callback=no) as c:
            _json(await c.call_tool("open_device", {"uri": "gui-sim:settings"}))
            r = await c.call_tool("act", {"action": RISKY})
            assert r.is_error and "refused 'delete'" in r.content[0].text and len(no.asked) == 1
            assert "shift+delete" in no.asked[0]
            r = await c.call_tool("act", {"action": {"type": "wait"}})     # not risky: nobody is asked
            assert not r.is_error and len(no.asked) == 1
        async with Client(_stdio(tmp_path / "b"), elicitation_callback=yes) as c:
            _json(await c.call_tool("open_device", {"uri": "gui-sim:settings"}))
            r = await c.call_tool("act", {"action": RISKY})
            # the person said yes: the gate let it through, and the simulator itself has no such key
            assert r.is_error and "device refused" in r.content[0].text and len(yes.asked) == 1
    anyio.run(main)


def test_a_client_that_leaves_gets_its_device_closed_and_episode_saved(tmp_path):
    async def main():
        async with Client(_stdio(tmp_path / "rec")) as c:
            _json(await c.call_tool("open_device", {"uri": "gui-sim:settings", "seed": 1}))
            _json(await c.call_tool("act", {"action": {"type": "wait"}}))
            _json(await c.call_tool("act", {"action": "Action: click(start_box='(500,500)')"}))
    anyio.run(main)
    deadline = time.time() + 10
    while time.time() < deadline:
        eps = [read_gui_episode(p) for d in (tmp_path / "rec").iterdir() for p in list_gui_episodes(d)]
        if eps and eps[0]["end"] is not None:
            break
        time.sleep(0.1)
    assert len(eps) == 1 and eps[0]["end"] is not None and len(eps[0]["steps"]) == 2
    assert eps[0]["steps"][1]["action"] == {"type": "click", "point": [500.0, 500.0]}


# -- streamable HTTP on loopback --------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(tmp_path):
    """`embodia mcp --transport http` on a free loopback port; yields its URL."""
    port = _free_port()
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "embodia", "mcp", "--transport", "http", "--port", str(port),
                             "--record", str(tmp_path / "rec")], env=_env(), cwd=str(REPO), stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError((tmp_path / "server.log").read_text())
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_http_client_drives_gui_sim(http_server, tmp_path):
    async def main():
        async with Client(http_server) as c:          # 2026-07-28: stateless, the session travels in arguments
            await _drive_gui_sim(c, tmp_path / "modern", stateless=True)
        async with Client(http_server, mode="legacy") as c:     # an MCP session id names the device session
            assert c.protocol_version < "2026"
            await _drive_gui_sim(c, tmp_path / "legacy")
    anyio.run(main)


def test_http_sessions_are_per_client(http_server, tmp_path):
    async def main():
        async with Client(http_server, mode="legacy") as a, Client(http_server, mode="legacy") as b:
            _json(await a.call_tool("open_device", {"uri": "gui-sim:settings", "seed": 0}))
            assert (await b.call_tool("observe", {})).is_error          # b has opened nothing
            _json(await b.call_tool("open_device", {"uri": "gui-sim:contacts", "seed": 0}))
            fa = json.loads((await a.call_tool("observe", {})).content[-1].text)
            fb = json.loads((await b.call_tool("observe", {})).content[-1].text)
            assert (fa["device"], fb["device"]) == ("gui-sim:settings", "gui-sim:contacts")
        async with Client(http_server) as c:             # stateless: an unknown session is an error
            r = await c.call_tool("observe", {"session": "nobody"})
            assert r.is_error and "open_device" in r.content[0].text
    anyio.run(main)


# -- a desktop under Xvfb, over HTTP ----------------------------------------------------------------
@pytest.mark.parametrize("tk_form", [{"live": True}], indirect=True)
def test_http_client_drives_the_desktop(xvfb, tk_form, http_server):
    yes = _answer("yes")

    async def main():
        async with Client(http_server, mode="legacy", elicitation_callback=yes) as c:
            _json(await c.call_tool("open_device", {"uri": f"desktop:{xvfb.display}?settle=0.2"}))
            obs = await c.call_tool("observe", {})
            facts = json.loads(obs.content[-1].text)
            assert obs.content[0].type == "image" and facts["screen"]["width"] == 1280
            point = tk_form.point("check", (facts["screen"]["width"], facts["screen"]["height"]))
            _json(await c.call_tool("act", {"action": {"type": "click", "point": list(point)}}))
            state = tk_form.wait_state(lambda s: any(e["type"] == "release" for e in s["events"]))
            presses = [e for e in state["events"] if e["type"] == "press"]
            assert presses and tk_form.contains("check", presses[-1]["x"], presses[-1]["y"])
            bad = await c.call_tool("act", {"action": {"type": "open_app", "app": "x", "point": [1, 2, 3]}})
            assert bad.is_error and "nothing executed" in bad.content[0].text
            done = _json(await c.call_tool("act", {"action": RISKY}))           # asked, and the person said yes
            assert done["safety"]["by"] == "user" and done["safety"]["allowed"] and len(yes.asked) == 1
            _json(await c.call_tool("close_device", {}))
    anyio.run(main)


def test_run_task_reports_progress_and_stops_when_cancelled(tmp_path):
    from embodia.agent.recording.dataset import LocalDataset

    async def main():
        async with Client(_stdio(tmp_path / "rec")) as c:
            _json(await c.call_tool("open_device", {"uri": "sim:twogap-push", "seed": 0}))
            second = anyio.Event()

            async def on_progress(p, total, message):
                if message.startswith("episode 2/"):
                    second.set()
            async with anyio.create_task_group() as tg:
                async def call():
                    await c.call_tool("run_task", {"policy": "expert", "episodes": 1000}, progress_callback=on_progress)
                    raise AssertionError("1000 episodes ran: the cancel never arrived")
                tg.start_soon(call)
                with anyio.fail_after(20):
                    await second.wait()
                tg.cancel_scope.cancel()
            # the server is free again (the episode loop stopped), and both episodes are on disk
            with anyio.fail_after(10):
                return _json(await c.call_tool("close_device", {}))
    closed = anyio.run(main)
    ds = LocalDataset(closed["record_dir"])
    # cancelled during the second episode: it stops at its next step (a loaded machine may let it
    # finish, or start one more), is saved, and nothing near the 1000 asked for ran
    assert 2 <= ds.num_episodes <= 4 and ds.episodes[0]["success"] is True


def test_robot_chunks_are_checked_before_they_run(tmp_path):
    async def main():
        async with Client(_stdio(tmp_path / "rec")) as c:
            _json(await c.call_tool("open_device", {"uri": "sim:twogap-push", "seed": 0}))
            obs = await c.call_tool("observe", {})
            assert obs.content[0].type == "image" and len(json.loads(obs.content[-1].text)["state"]) == 10
            for bad in ([[0.1, 0.2, 0.3]], [[0.1]], "[[0.1, NaN]]", "push left"):
                r = await c.call_tool("act", {"action": bad})
                assert r.is_error and "nothing executed" in r.content[0].text, bad
            done = _json(await c.call_tool("act", {"action": [[0.5, 0.0], [5.0, -0.2]]}))   # 5.0 is clipped to 1
            assert done["executed"] == 2 and done["steps"] == 2 and done["success"] is False
            return _json(await c.call_tool("close_device", {}))
    closed = anyio.run(main)
    from embodia.agent.recording.dataset import LocalDataset
    ep = LocalDataset(closed["record_dir"]).episode(0)
    assert ep["action"].tolist() == [[0.5, 0.0], [1.0, pytest.approx(-0.2)]]


def test_an_http_client_that_leaves_gets_its_device_closed_and_episode_saved(http_server, tmp_path):
    async def main():
        async with Client(http_server, mode="legacy") as c:
            opened = _json(await c.call_tool("open_device", {"uri": "gui-sim:settings", "seed": 1}))
            _json(await c.call_tool("act", {"action": {"type": "wait"}}))
        return opened["record_dir"]
    record_dir = anyio.run(main)
    deadline = time.time() + 10                   # the session ends with the client's DELETE, not 15 min later
    while time.time() < deadline:
        eps = [read_gui_episode(p) for p in list_gui_episodes(record_dir)] if Path(record_dir).exists() else []
        if eps and eps[0]["end"] is not None:
            break
        time.sleep(0.1)
    assert len(eps) == 1 and eps[0]["end"] is not None and len(eps[0]["steps"]) == 1


def test_devices_left_unused_are_closed_and_saved(tmp_path):
    from embodia.agent.loop.safety import SafetyGate
    from embodia.agent.serving.mcp import Hub
    from embodia.devices import GuiAction
    hub = Hub(tmp_path / "rec", stateful=False)
    old, _fresh = hub.open("old", "gui-sim:settings", seed=0), hub.open("fresh", "gui-sim:settings", seed=1)
    old.executor.submit(old.act, GuiAction("wait"), SafetyGate()).result()
    old.used -= 3600
    assert hub.close_idle(900) == ["old"] and list(hub.sessions) == ["fresh"]
    eps = [read_gui_episode(p) for p in list_gui_episodes(old.record_dir)]
    assert len(eps) == 1 and eps[0]["end"] is not None and len(eps[0]["steps"]) == 1
    hub.close_all()
    assert not hub.sessions
