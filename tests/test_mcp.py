"""`embodia mcp`, driven by the MCP SDK's own client: over stdio (a subprocess), over streamable HTTP
on loopback, and on a desktop under Xvfb."""
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
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
        async with Client(_stdio(tmp_path / "rec", "--memory-root", str(tmp_path))) as c:
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


@contextmanager
def _http(tmp_path: Path, *extra, env: dict | None = None, log_name: str = "server.log"):
    """`embodia mcp --transport http` on a free loopback port (``extra``: more options); yields its URL."""
    port = _free_port()
    log = open(tmp_path / log_name, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "embodia", "mcp", "--transport", "http", "--port", str(port),
                             "--record", str(tmp_path / "rec"), *extra], env={**_env(), **(env or {})},
                            cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError((tmp_path / log_name).read_text())
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def http_server(tmp_path):
    """`embodia mcp --transport http` on a free loopback port, memories allowed under tmp_path."""
    with _http(tmp_path, "--memory-root", str(tmp_path)) as url:
        yield url


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
    from embodia.agent.serving.mcp_session import Hub
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


# -- who may connect, and what a client may take and name (issue 34) ---------------------------------
def _authed(url: str, token: str | None, source: str = "127.0.0.1"):
    """The SDK's streamable HTTP transport with a bearer token, from loopback address ``source``."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300),
                                transport=httpx2.AsyncHTTPTransport(local_address=source))
    return streamable_http_client(url, http_client=client)


def test_http_beyond_loopback_without_a_credential_is_refused(tmp_path):
    env = {k: v for k, v in _env().items() if k != "EMBODIA_MCP_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "embodia", "mcp", "--transport", "http", "--host", "0.0.0.0",
                          "--record", str(tmp_path / "rec")], env=env, cwd=str(REPO), capture_output=True,
                         text=True, timeout=60)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "credential" in lines[0], out
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    out = subprocess.run([sys.executable, "-m", "embodia", "mcp", "--transport", "http", "--host", "0.0.0.0",
                          "--token-file", str(empty)], env=env, cwd=str(REPO), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "is empty" in out.stdout + out.stderr


def test_http_with_a_token_refuses_requests_without_it(tmp_path):
    import httpx2
    token = "tok-" + os.urandom(8).hex()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    hdrs = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with _http(tmp_path, env={"EMBODIA_MCP_TOKEN": token}) as url:
        for sent in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
            r = httpx2.post(url, json=init, headers={**hdrs, **sent}, timeout=10)
            assert r.status_code == 401 and "bearer token" in r.text, (sent, r.status_code)
        r = httpx2.post(url, json=init, headers={**hdrs, "Authorization": f"Bearer {token}"}, timeout=10)
        assert r.status_code == 200, r.text
        r = httpx2.post(url, json=init, headers={**hdrs, "Authorization": f"Bearer {token}",
                                                 "Host": "192.168.1.20:8797"}, timeout=10)
        assert r.status_code == 421                                  # the Host check stays on

        async def main():
            async with Client(_authed(url, token)) as c:            # the SDK's own client, with the token
                assert TOOLS <= {t.name for t in (await c.list_tools()).tools}
                opened = _json(await c.call_tool("open_device", {"uri": "gui-sim:settings"}))
                _json(await c.call_tool("close_device", {"session": opened["session"]}))
            with pytest.raises(Exception):                          # and without it: refused
                with anyio.fail_after(30):
                    async with Client(_authed(url, None)) as c:
                        await c.list_tools()
        anyio.run(main)


def test_http_security_beyond_loopback_is_an_allow_list():
    from embodia.agent.serving.mcp import http_security
    with pytest.raises(ValueError, match="--allow-host"):
        http_security("0.0.0.0")
    s = http_security("0.0.0.0", ["lab-pc", "10.0.0.5:8765"], ["https://ui.example"])
    assert s.enable_dns_rebinding_protection and "lab-pc:*" in s.allowed_hosts and "10.0.0.5:8765" in s.allowed_hosts
    assert "https://ui.example" in s.allowed_origins and "null" not in s.allowed_origins


def test_devices_past_the_caps_are_refused(tmp_path):
    with _http(tmp_path, "--max-devices", "3", "--max-devices-per-client", "2", "--max-pixels", "10000",
               "--max-steps", "50") as url:
        async def main():
            async with Client(url) as a:                 # stateless: each open_device is a new session
                s1 = _json(await a.call_tool("open_device", {"uri": "gui-sim:settings"}))["session"]
                _json(await a.call_tool("open_device", {"uri": "gui-sim:settings"}))
                r = await a.call_tool("open_device", {"uri": "gui-sim:settings"})
                assert r.is_error and "this client has 2 devices open" in r.content[0].text
                async with Client(_authed(url, None, source="127.0.0.2")) as b:     # another address
                    _json(await b.call_tool("open_device", {"uri": "gui-sim:contacts"}))
                    r = await b.call_tool("open_device", {"uri": "gui-sim:contacts"})
                    assert r.is_error and "this server has 3 devices open" in r.content[0].text
                _json(await a.call_tool("close_device", {"session": s1}))
                s2 = _json(await a.call_tool("open_device", {"uri": "gui-sim:settings"}))["session"]   # a place is free again
                r = await a.call_tool("open_device", {"uri": "sim:twogap-push", "size": "128x128"})
                assert r.is_error and "this server allows 10000" in r.content[0].text     # --max-pixels
                r = await a.call_tool("run_task", {"session": s2, "policy": "random", "max_steps": 51})
                assert r.is_error and "max_steps must be in 1..50" in r.content[0].text     # --max-steps
        anyio.run(main)


def test_what_a_client_may_name_is_the_operators_allow_list(tmp_path):
    roots, outside = tmp_path / "roots", tmp_path / "outside"
    roots.mkdir(), outside.mkdir()
    (roots / "link").symlink_to(outside, target_is_directory=True)
    (roots / "afile").write_text("not a memory")
    closed_port = _free_port()

    async def refused(c, args, words):
        r = await c.call_tool("run_task", args)
        text = r.content[0].text
        assert r.is_error and words in text and "\n" not in text, text

    async def strict():
        async with Client(_stdio(tmp_path / "rec", "--memory-root", str(roots))) as c:
            _json(await c.call_tool("open_device", {"uri": "sim:twogap-push"}))
            await refused(c, {"policy": f"remote:ws://127.0.0.1:{closed_port}"}, "not allowed")
            await refused(c, {"policy": str(outside)}, "--checkpoint-root")
            await refused(c, {"max_steps": 0}, "max_steps must be in 1..")
            await refused(c, {"max_steps": 10 ** 9}, "max_steps must be in 1..")
            _json(await c.call_tool("close_device", {}))
            _json(await c.call_tool("open_device", {"uri": "gui-sim:settings"}))
            for mem in (outside / "m", roots / ".." / "outside" / "m", roots / "link" / "m"):
                await refused(c, {"memory": str(mem)}, "not under the server's --memory-root")
            await refused(c, {"memory": str(roots / "afile")}, "exists and is not a folder")
            r = await c.call_tool("memory_stats", {"path": str(outside)})
            assert r.is_error and "--memory-root" in r.content[0].text
            for bad in ({"type": "type", "text": "x" * 2 ** 20}, {"type": "type", "text": "a\x00b"}):
                r = await c.call_tool("act", {"action": bad})
                assert r.is_error and "nothing executed" in r.content[0].text
            assert json.loads((await c.call_tool("observe", {})).content[-1].text)["steps"] == 0
    anyio.run(strict)
    assert not (outside / "m").exists()

    async def allowed():
        async with Client(_stdio(tmp_path / "rec2", "--memory-root", str(outside), "--allow-policy", "remote:")) as c:
            _json(await c.call_tool("open_device", {"uri": "sim:twogap-push"}))
            r = await c.call_tool("run_task", {"policy": f"remote:ws://127.0.0.1:{closed_port}"})
            assert r.is_error and "not allowed" not in r.content[0].text     # tried: nobody listens there
            _json(await c.call_tool("close_device", {}))
            _json(await c.call_tool("open_device", {"uri": "gui-sim:settings", "seed": 3}))
            run = _json(await c.call_tool("run_task", {"policy": "expert", "memory": str(outside / "m")}))
            assert run["successes"] == 1
    anyio.run(allowed)
    assert (outside / "m" / "meta.json").exists()


def test_a_failing_tool_is_a_one_line_error_and_no_traceback(tmp_path):
    (tmp_path / "afile").write_text("x")
    with _http(tmp_path, "--memory-root", str(tmp_path)) as url:
        async def main():
            async with Client(url, mode="legacy") as c:
                _json(await c.call_tool("open_device", {"uri": "gui-sim:settings"}))
                r = await c.call_tool("run_task", {"policy": "expert", "memory": str(tmp_path / "afile")})
                assert r.is_error and r.content[0].text.strip() and "\n" not in r.content[0].text
                assert "not a folder" in r.content[0].text
                r = await c.call_tool("memory_stats", {"path": str(tmp_path)})        # no meta.json
                assert r.is_error and r.content[0].text.strip() and "\n" not in r.content[0].text
                _json(await c.call_tool("close_device", {}))
        anyio.run(main)
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log, log[-3000:]


def test_hub_caps_devices_per_server_and_per_client(tmp_path):
    from embodia.agent.serving.mcp_session import Hub, McpLimits, SessionError
    hub = Hub(None, stateful=False, limits=McpLimits(max_devices=2, max_devices_per_client=1))
    hub.open("a", "gui-sim:settings", client="10.0.0.1")
    with pytest.raises(SessionError, match="this client has 1"):
        hub.open("b", "gui-sim:settings", client="10.0.0.1")
    hub.open("c", "gui-sim:settings", client="10.0.0.2")
    with pytest.raises(SessionError, match="this server has 2"):
        hub.open("d", "gui-sim:settings", client="10.0.0.3")
    hub.close("c")
    with pytest.raises(ValueError):                    # a device that fails to open frees its place
        hub.open("e", "gui-sim:nonesuch", client="10.0.0.4")
    hub.open("f", "gui-sim:settings", client="10.0.0.4")
    hub.close_all()
    assert not hub.sessions and not hub.clients


def test_an_unexpected_exception_becomes_a_tool_error_with_its_message():
    from mcp.server.mcpserver.exceptions import ToolError

    from embodia.agent.serving.mcp_tools import one_line_errors

    def boom():
        raise FileExistsError(17, "File exists", "/tmp/x\nsecond line")

    async def aboom():
        boom()
    for fn, call in ((boom, lambda f: f()), (aboom, lambda f: anyio.run(f))):
        with pytest.raises(ToolError) as e:
            call(one_line_errors(fn))
        assert str(e.value).startswith(f"{fn.__name__} failed: FileExistsError: [Errno 17] File exists")
        assert "\n" not in str(e.value)
