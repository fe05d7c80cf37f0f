"""`embodia run --device gui-sim:settings --policy openai:test --base-url ...` completes a task end to
end against a scripted OpenAI-compatible loopback server: the simulator verifies success from its
state, the episode is recorded, and a reply that does not parse is sent back, retried and never
executed."""
import json

from typer.testing import CliRunner

from embodia.agent.cli.app import app
from embodia.agent.loop.episode import run_episode
from embodia.agent.recording.gui_log import list_gui_episodes, read_gui_episode
from embodia.devices import open_device

pytest_plugins = ("fake_openai",)


def expert_plan(uri: str, seed: int):
    """The actions the scripted expert takes on this instance (the simulator is deterministic)."""
    taken = []
    with open_device(uri) as dev:
        expert = dev.expert()

        class Spy:
            def reset(self, seed=None):
                expert.reset(seed)

            def act(self, obs, instruction):
                a = expert.act(obs, instruction)
                taken.append(a)
                return a
        r = run_episode(dev, Spy(), seed=seed)
        assert r.success, r
        return dev.instruction, [a.to_dict() for a in taken]


def test_a_served_model_completes_a_gui_sim_task_and_bad_replies_never_run(fake_openai, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    uri = "gui-sim:settings?task=open-turn-off"
    instruction, plan = expert_plan(uri, seed=3)
    assert len(plan) >= 2
    replies = ["I think I should toggle it.\nAction: toggle(the switch)"]          # not an action: refused
    replies += ["```json\n" + json.dumps(a) + "\n```" for a in plan]
    fake_openai.script(*replies)
    rec = tmp_path / "rec"
    r = CliRunner().invoke(app, ["run", "--device", uri, "--policy", "openai:test", "--base-url", fake_openai.url,
                                 "--seed", "3", "--record", str(rec), "--max-steps", "10"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "success" in r.output and fake_openai.left == 0
    first = fake_openai.chats[0]
    assert instruction in first.texts()[1] and "<embodiment>" in first.texts()[1]
    ep = read_gui_episode(list_gui_episodes(rec)[0])
    assert ep["end"]["success"] is True
    # the recorded actions are the replies' (element references resolved to points on the way)
    assert [(s["action"]["type"], s["action"].get("element")) for s in ep["steps"]] == \
        [(a["type"], a.get("element")) for a in plan]
    tries = ep["steps"][0]["policy_record"]["attempts"]
    assert len(tries) == 2 and tries[0]["error"] and tries[1]["error"] is None
    assert all(len(s["policy_record"]["attempts"]) == 1 for s in ep["steps"][1:])
