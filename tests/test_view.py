"""`embodia view`, rendered in a real headless Chromium (Debian's package): every step's action is
drawn on its screen, success labels and plots are on the page, and episodes load only when opened."""
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embodia.agent.cli.app import app
from embodia.agent.evaluation.evaluate import write_json
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.safety import SafetyGate
from embodia.agent.recording.gui_log import GuiRecorder, list_gui_episodes, read_gui_episode
from embodia.agent.viewing import ViewError, build_view
from embodia.devices import open_device

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


class Dom(HTMLParser):
    """Elements of a dumped DOM as (tag, attrs, ancestors' (tag, attrs)) rows."""

    def __init__(self, html: str):
        super().__init__()
        self.rows, self.stack, self.html = [], [], html
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.rows.append((tag, a, list(self.stack)))
        if tag not in ("img", "input", "meta", "br", "line", "circle", "rect", "path", "polyline"):
            self.stack.append((tag, a))

    def handle_startendtag(self, tag, attrs):
        self.rows.append((tag, dict(attrs), list(self.stack)))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def find(self, tag=None, cls=None, inside=None):
        """Rows with this tag and class word, optionally inside an element with class ``inside``."""
        def has(a, c):
            return c is None or c in (a.get("class") or "").split()
        return [r for r in self.rows if (tag is None or r[0] == tag) and has(r[1], cls)
                and (inside is None or any(has(a, inside) for _, a in r[2]))]


def render(index: Path, fragment: str = "") -> Dom:
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                          "--dump-dom", index.resolve().as_uri() + fragment],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "<body" in out.stdout, out.stderr[-2000:]
    return Dom(out.stdout)


@pytest.fixture(scope="module")
def gui_run(tmp_path_factory):
    """Three gui-sim episodes recorded by the expert; the messages app's Send passes the gate."""
    root = tmp_path_factory.mktemp("gui") / "run"
    with open_device("gui-sim:all") as dev:
        rec = GuiRecorder(root, dev.embodiment)
        for seed in (0, 1, 2):
            run_episode(dev, dev.expert(), seed=seed, recorder=rec, gate=SafetyGate(allow=("send",)),
                        episode_meta={"device": "gui-sim:all", "policy": "expert"})
    return root


@needs_chromium
def test_gui_run_draws_every_action_on_its_screen(gui_run, tmp_path):
    index = build_view(gui_run, tmp_path / "view")
    episodes = [read_gui_episode(p) for p in list_gui_episodes(gui_run)]
    dom = render(index, "#open=all")
    for i, ep in enumerate(episodes):
        prefix = f"ep-{i}-s-"
        cards = [a for _, a, _ in dom.find("figure", "step") if a.get("id", "").startswith(prefix)]
        assert [int(a["data-step"]) for a in cards] == [s["t"] for s in ep["steps"]]
        overlays = [(a, anc) for _, a, anc in dom.find("svg", "overlay")
                    if any(x.get("id", "").startswith(prefix) for _, x in anc)]
        assert [a["data-action"] for a, _ in overlays] == [s["action"]["type"] for s in ep["steps"]]
        for s in ep["steps"]:                       # a mark inside each step's overlay: circle for a click
            marks = [(tag, a) for tag, a, anc in dom.find(cls="mark", inside="overlay")
                     if any(x.get("id") == f"{prefix}{s['t']}" for _, x in anc)]
            assert marks, f"episode {i} step {s['t']} has no action overlay"
            if s["action"]["type"] == "click":
                assert any(tag == "circle" for tag, _ in marks)
            if s["action"].get("element") is not None:        # the chosen tree element is highlighted
                assert [r for r in dom.find("rect", "element")
                        if any(x.get("id") == f"{prefix}{s['t']}" for _, x in r[2])]
        imgs = [a for _, a, anc in dom.find("img") if any(x.get("id") == f"ep-{i}" for _, x in anc)]
        assert len(imgs) == len(ep["steps"]) + 1 and all(a.get("loading") == "lazy" for a in imgs)
    ok = [r for r in dom.find("span", "success-label") if "ok" in r[1]["class"]]
    assert len(ok) >= 2 * sum(bool(ep["end"]["success"]) for ep in episodes) > 0   # list row + episode header
    gated = [s for ep in episodes for s in ep["steps"] if s.get("safety")]
    assert gated                                  # seed 2 sends a message: the gate's decision is shown
    assert "gate: send - allowed by allow-list" in dom.html


@needs_chromium
def test_episodes_load_only_when_opened(gui_run, tmp_path):
    index = build_view(gui_run, tmp_path / "view")
    page = index.read_text()
    assert "<img" not in page and "base64" not in page          # no frame is inlined
    dom = render(index)                                          # default: the first episode opens
    loaded = {a["id"] for _, a, _ in dom.find("script") if a.get("id", "").startswith("script-ep-")}
    assert loaded == {"script-ep-0"}
    assert not [a for _, a, _ in dom.find("figure", "step") if not a.get("id", "").startswith("ep-0-")]


@needs_chromium
def test_eval_report_plots(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "-d", "sim:twogap-push", "-p", "expert", "-n", "6", "--json",
                                 str(tmp_path / "eval.json")])
    assert result.exit_code == 0, result.output
    rep = json.loads((tmp_path / "eval.json").read_text())
    result = runner.invoke(app, ["view", str(tmp_path / "eval.json"), "-o", str(tmp_path / "view")])
    assert result.exit_code == 0, result.output
    dom = render(tmp_path / "view" / "index.html")
    assert dom.find("svg", "plot-overall") and len(dom.find("path", "ci", inside="plot-overall")) == 1
    splits = dom.find("svg", "plot-splits")
    assert len(splits) == len(rep["by"]) >= 1
    n_cells = sum(len(c) for c in rep["by"].values())
    assert len(dom.find("rect", "bar", inside="plot-splits")) == len(dom.find("path", "ci", inside="plot-splits")) == n_cells
    labels = dom.find("span", "success-label")
    assert len(labels) == 6 and all("ok" in a["class"] for _, a, _ in labels) == (rep["successes"] == 6)


@needs_chromium
def test_memory_eval_report_plots_learning_curve_per_quarter(tmp_path):
    from embodia.agent.evaluation.memory_eval import evaluate_memory, screen_arm_factory
    with open_device("gui-sim:settings") as dev:
        rep = evaluate_memory(dev, screen_arm_factory(dev.expert(), dev), arms=["off", "online"], streams=1,
                              episodes=8, seed=0)
    rep.update(device="gui-sim:settings", policy="expert")
    write_json(rep, tmp_path / "mem.json")
    dom = render(build_view(tmp_path / "mem.json", tmp_path / "view"))
    series = [a["data-series"] for _, a, _ in dom.find("polyline", "series", inside="plot-quarters")]
    assert series == ["off", "online"]
    assert len(dom.find("rect", "bar", inside="plot-arms")) == 2


def test_view_refuses_what_it_cannot_read(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ViewError, match="not an `embodia eval` report"):
        build_view(tmp_path / "x.json", tmp_path / "v")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ViewError, match="not a GUI recording"):
        build_view(tmp_path / "empty", tmp_path / "v2")


def test_rerun_recording_of_a_gui_run(gui_run, tmp_path):
    pytest.importorskip("rerun", reason="rerun-sdk is not installed (pip install 'embodia[rerun]')")
    rrd = tmp_path / "run.rrd"
    result = CliRunner().invoke(app, ["view", str(gui_run), "-o", str(tmp_path / "v"), "--rerun", str(rrd)])
    assert result.exit_code == 0, result.output
    rerun_cli = shutil.which("rerun")
    if rerun_cli is None:
        pytest.skip("no rerun command to read the file back")
    assert subprocess.run([rerun_cli, "rrd", "verify", str(rrd)], capture_output=True).returncode == 0
    printed = subprocess.run([rerun_cli, "rrd", "print", str(rrd)], capture_output=True, text=True).stdout
    for i in range(3):
        for entity in ("screen", "screen/action", "log"):
            assert f"episode_{i:04d}/{entity}" in printed


@needs_chromium
def test_a_folder_of_gui_runs_and_datasets(gui_run, tmp_path):
    """What `embodia mcp --record` leaves: GUI recordings and robot datasets side by side."""
    folder = tmp_path / "mcp"
    shutil.copytree(gui_run, folder / "a-gui")
    result = CliRunner().invoke(app, ["record", "-d", "sim:twogap-push", "-p", "expert", "-n", "2",
                                      "-o", str(folder / "b-robot")])
    assert result.exit_code == 0, result.output
    dom = render(build_view(folder, tmp_path / "view"), "#open=all")
    n_gui = len(list_gui_episodes(gui_run))
    videos = [a for _, a, anc in dom.find("video") if any(x.get("id") in (f"ep-{n_gui}", f"ep-{n_gui + 1}")
                                                          for _, x in anc)]
    assert len(videos) == 2 and all(a["src"].endswith(".mp4") for a in videos)
    assert len(dom.find("polyline", "channel")) == 2 * 2          # vx, vy per robot episode
    assert {a["data-index"] for _, a, _ in dom.find("details", "episode")} == {str(i) for i in range(n_gui + 2)}


# -- a recording or report from someone else (issue 34) ----------------------------------------------
HTML = '<img src=x id=pwned onerror="document.title=\'pwned\'">"><svg id=pwned2 onload=alert(1)></script><!--'


def _tamper_gui(run: Path, secret: Path) -> None:
    """Every field of every episode holds HTML, and the screenshots point outside: an absolute path,
    a ``..`` path and a symlink out of the episode's folder."""
    for k, ep in enumerate(list_gui_episodes(run)):
        (ep / "screens" / "link.png").symlink_to(secret)
        outside = [str(secret), os.path.relpath(secret, ep), "screens/link.png"]
        recs = [json.loads(line) for line in (ep / "steps.jsonl").read_text().splitlines()]
        for rec in recs:
            if rec["type"] == "header":
                rec.update(task=HTML, seed=HTML, meta={"device": HTML, "policy": HTML})
            elif rec["type"] == "step":
                rec.update(action={"type": HTML, "text": HTML, "point": [HTML, HTML]}, executed=HTML,
                           timing={"policy_ms": HTML, "device_ms": HTML}, error=HTML,
                           safety={"risk": HTML, "allowed": HTML, "by": HTML, "evidence": HTML},
                           policy_record={"reply": HTML, "memory": {"mode": HTML, "source": HTML, "confidence": HTML}},
                           image={"file": outside[rec["t"] % 3], "width": HTML, "height": HTML}, ui_tree=HTML)
            elif rec["type"] == "end":
                rec.update(success=HTML, steps=HTML, info={"error": HTML, "success_source": HTML},
                           final_image={"file": outside[k % 3], "width": HTML, "height": HTML})
        (ep / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _no_injection(dom: Dom) -> None:
    """Nothing the files held became an element or an attribute, and no script of theirs ran."""
    assert not [r for r in dom.rows if (r[1].get("id") or "").startswith("pwned")]
    assert not [(tag, k) for tag, a, _ in dom.rows for k in a if k.startswith("on")]
    assert not [a for tag, a, _ in dom.rows if tag == "img" and a.get("src") == "x"]
    assert "<title>pwned" not in dom.html


def _outside_files_copied(folder: Path, secret: Path) -> list:
    return [p for p in folder.rglob("*") if p.is_symlink() or p.is_file() and (
        os.path.samefile(p, secret) or b"SECRET-MARKER" in p.read_bytes())]


@needs_chromium
def test_a_hostile_recording_neither_injects_nor_pulls_files_in(gui_run, tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG\r\n\x1a\nSECRET-MARKER")
    run = tmp_path / "shared" / "run"
    shutil.copytree(gui_run, run)
    _tamper_gui(run, secret)
    result = CliRunner().invoke(app, ["view", str(run), "-o", str(tmp_path / "view")])
    assert result.exit_code == 0, result.output
    assert "skipped" in result.output and str(secret) in result.output
    dom = render(tmp_path / "view" / "index.html", "#open=all")
    _no_injection(dom)
    steps = sum(len(read_gui_episode(p)["steps"]) for p in list_gui_episodes(run))
    assert len(dom.find("figure", "step")) >= steps > 0         # the episodes did render, as text
    assert HTML in dom.html.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    assert not _outside_files_copied(tmp_path / "view", secret)
    assert "files named by the source were not copied" in dom.html


@needs_chromium
def test_a_hostile_report_neither_injects_nor_breaks_the_page(tmp_path):
    rep = {"policy": HTML, "device": HTML, "shift": HTML, "seed": HTML, "episodes": HTML, "successes": HTML,
           "success_rate": 0.5, "wilson95": [0.2, 0.8], "verified_episodes": HTML, "mean_length": HTML,
           "streams": HTML, "episodes_per_stream": 2, "created": HTML,
           "by": {HTML: {HTML: {"success_rate": 0.5, "wilson95": [0.2, 0.8], "episodes": HTML}}},
           "per_episode": [{"episode": HTML, "seed": HTML, "success": HTML, "length": HTML, "error": HTML},
                           {"episode": 1, "seed": 3, "success": True, "length": 7, "error": None}]}
    (tmp_path / "r.json").write_text(json.dumps(rep))
    dom = render(build_view(tmp_path / "r.json", tmp_path / "view"))
    _no_injection(dom)
    assert dom.find("svg", "plot-overall") and len(dom.find("span", "success-label")) == 2
    rep["success_rate"] = HTML                                  # a number the plots need: refused
    (tmp_path / "bad.json").write_text(json.dumps(rep))
    with pytest.raises(ViewError, match="not what `embodia eval` writes"):
        build_view(tmp_path / "bad.json", tmp_path / "view2")


@needs_chromium
def test_a_dataset_whose_video_path_points_outside_is_not_copied(tmp_path):
    secret = tmp_path / "secret.mp4"
    secret.write_bytes(b"SECRET-MARKER" * 100)
    base = tmp_path / "ds"
    result = CliRunner().invoke(app, ["record", "-d", "sim:twogap-push", "-p", "expert", "-n", "1", "-o", str(base)])
    assert result.exit_code == 0, result.output
    for name, video_path in (("abs", str(secret)), ("dots", None), ("link", "videos/link.mp4")):
        ds = tmp_path / name
        shutil.copytree(base, ds)
        if name == "link":
            (ds / "videos" / "link.mp4").symlink_to(secret)
        info = json.loads((ds / "meta" / "info.json").read_text())
        info["video_path"] = video_path or os.path.relpath(secret, ds)
        (ds / "meta" / "info.json").write_text(json.dumps(info))
        # a dataset that names a file outside itself is refused whole (the dataset reader's check,
        # the same for every verb), before anything is copied
        with pytest.raises(ViewError, match="video"):
            build_view(ds, tmp_path / f"view-{name}", [])
        assert not (tmp_path / f"view-{name}").exists() or \
            not _outside_files_copied(tmp_path / f"view-{name}", secret)
        r = CliRunner().invoke(app, ["view", str(ds), "--out", str(tmp_path / f"cli-{name}")])
        assert r.exit_code == 2 and "Traceback" not in r.output, (name, r.output)


@needs_chromium
def test_a_nan_in_a_gui_recording_is_shown_marked_not_refused(gui_run, tmp_path):
    """Before: one NaN (a step's timing) refused the whole report with "Out of range float values are
    not JSON compliant". Now the report is written, every episode renders, and the value is marked."""
    run = tmp_path / "run"
    shutil.copytree(gui_run, run)
    ep = list_gui_episodes(run)[1]
    recs = [json.loads(line) for line in (ep / "steps.jsonl").read_text().splitlines()]
    step = next(r for r in recs if r["type"] == "step")
    step["timing"]["policy_ms"], step["action"]["point"] = float("nan"), [float("inf"), 500.0]
    (ep / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))        # bare NaN, Infinity
    result = CliRunner().invoke(app, ["view", str(run), "-o", str(tmp_path / "view")])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "not numbers (NaN or infinite)" in said and "episode 1 (2)" in said, said
    dom = render(tmp_path / "view" / "index.html", "#open=all")
    for i, p in enumerate(list_gui_episodes(run)):               # every episode rendered, the marked one too
        cards = [a for _, a, _ in dom.find("figure", "step") if a.get("id", "").startswith(f"ep-{i}-s-")]
        assert len(cards) == len(read_gui_episode(p)["steps"]) > 0, i
    marks = dom.find("span", "bad-value")
    assert len(marks) == 1 and "ep-1" in [a.get("id") for _, a in marks[0][2]], marks
    assert dom.find("details", "bad-value") and "nan (bad value)" in (tmp_path / "view" / "episodes" /
                                                                      "ep-000001.js").read_text()
