"""One import name, a readable house: every module imports on its own, no two modules import each
other, the bare folder names are not packages, nothing cites a file outside the repository."""
from __future__ import annotations

import ast
import importlib.util
import os
import random
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("agent", "devices", "memory", "policies", "sim", "action_heads")


def package_modules() -> dict[str, Path]:
    """Every module of the installed package, by name, with its source file (found through the
    import system, so an installed copy is what is checked)."""
    out = {"embodia": Path(importlib.util.find_spec("embodia").origin)}
    for top in FOLDERS:
        root = Path(importlib.util.find_spec(f"embodia.{top}").origin).parent
        for path in sorted(root.rglob("*.py")):
            parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
            out[".".join([f"embodia.{top}", *parts])] = path
    return out


def imports_of(name: str, path: Path, known: dict) -> set[str]:
    """The package's modules that `name` imports anywhere in its source (at the top or inside a
    function): `from pkg import sub` counts as importing the module pkg.sub."""
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            out.update(f"{src}.{a.name}" if f"{src}.{a.name}" in known else src for a in node.names)
    return {m for m in out if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_two_modules_import_each_other():
    mods = package_modules()
    assert len(mods) > 60 and "embodia.agent.loop.core" in mods
    graph = {m: imports_of(m, p, mods) for m, p in mods.items()}
    assert cycles(graph) == []


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module is the first of the package imported in a fresh process (one fork per module,
    in random order, from a parent that loaded only the third-party libraries), so an import cycle
    that only shows when a particular module comes first cannot hide."""
    names = sorted(package_modules())
    random.Random(int(os.environ.get("EMBODIA_IMPORT_SEED", "0"))).shuffle(names)
    script = r"""
import importlib, os, sys, traceback
import numpy, torch, transformers, PIL.Image, pyarrow  # heavy third-party libraries, loaded once
failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(name)
print("FAILED", failed)
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    env.pop("DISPLAY", None)
    out = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, env=env,
                         timeout=600, cwd=ROOT.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "FAILED []" in out.stdout, out.stdout[-500:] + out.stderr[-5000:]


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_bare_folder_name_is_not_a_package(folder):
    """`import agent` fails with ModuleNotFoundError, from anywhere: outside the repository nothing
    by that name is installed, and in its root the folder refuses to load under the wrong name."""
    for cwd in (ROOT.parent, ROOT):
        out = subprocess.run([sys.executable, "-c", f"import {folder}"], capture_output=True, text=True, cwd=cwd,
                             timeout=120)
        assert out.returncode == 1 and "ModuleNotFoundError" in out.stderr, (cwd, out.stderr[-500:])


def test_the_public_names_resolve():
    import embodia
    for name in embodia.__all__:
        assert getattr(embodia, name) is not None, name
    with pytest.raises(AttributeError):
        embodia.not_a_name


# a cited document must be a file of the repository; a section number needs its file beside it
_OUTSIDE = re.compile(r"\.\./shared|shared/DESIGN|shared/reference")
_DOC = re.compile(r"[\w./-]*?([\w-]+\.md)\b")
_SECTION = re.compile(r"\b(?:spec|algorithms|design|section)\s*§?\s*\d+\.\d+", re.I)


def _texts():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") or rel.parts[0] in ("build", "dist", "runs", "data"):
            continue
        if path.is_file() and (path.suffix in (".py", ".md", ".toml", ".txt") or path.name == "run"):
            yield rel, path.read_text(errors="replace")


def test_nothing_points_outside_the_repository():
    docs = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
    bad = []
    for rel, text in _texts():
        if rel == Path("tests/test_packaging.py"):
            continue
        # the safety gate's corpora quote real window titles ("*notes.md - Mousepad"): a user's file, no citation
        quotes_titles = re.fullmatch(r"tests/gate_\w+\.py", rel.as_posix()) is not None
        for i, line in enumerate(text.splitlines(), 1):
            where = f"{rel}:{i}: {line.strip()[:100]}"
            if _OUTSIDE.search(line):
                bad.append(where)
            bad += [f"{where} (no {m.group(1)} in the repository)" for m in _DOC.finditer(line)
                    if m.group(1) not in docs and not quotes_titles]
            m = _SECTION.search(line)
            if m and "ARCHITECTURE.md" not in line and rel != Path("ARCHITECTURE.md"):
                bad.append(f"{where} (section {m.group(0)!r} without its file)")
    assert not bad, "\n".join(bad)


def test_architecture_doc_exists_and_the_readme_links_it():
    doc = ROOT / "ARCHITECTURE.md"
    assert doc.is_file()
    readme = (ROOT / "README.md").read_text()
    assert "ARCHITECTURE.md" in readme and "How the code is laid out" in readme
    text = doc.read_text()
    for folder in FOLDERS:
        assert f"{folder}/" in text, folder


@pytest.mark.slow
def test_the_wheel_holds_only_the_embodia_package(tmp_path):
    """A built wheel installs one top-level name (plus its dist-info), with the bundled checkpoint."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = next(tmp_path.glob("embodia-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"embodia", next(t for t in tops if t.endswith(".dist-info"))}, sorted(tops)
    assert "embodia/policies/checkpoints/embodia-tiny/model.safetensors" in names
    assert "embodia/agent/loop/core.py" in names and "embodia/__main__.py" in names


def test_the_files_the_readme_names_exist():
    docs = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", *sorted(p.relative_to(ROOT).as_posix()
                                                                 for p in (ROOT / "docs").rglob("*.md"))]
    assert len(docs) > 3, "the manual's pages under docs/ were not found"
    text = "".join((ROOT / f).read_text() for f in docs)
    named = set(re.findall(r"`((?:agent|devices|memory|policies|sim|action_heads|benchmarks|tests)/[\w/.-]*)", text))
    named |= {m.replace(".", "/") + ".py" for m in re.findall(r"python -m embodia\.((?:agent|sim|policies)\.[\w.]+)", text)}
    assert len(named) > 5
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, missing


def test_every_package_folder_is_listed_in_pyproject():
    """A wheel holds only the packages pyproject lists: a new subpackage must be added there."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"embodia"} | {".".join(i.parent.relative_to(ROOT).parts) for i in (ROOT / "embodia").rglob("*/__init__.py")}
    for top in FOLDERS:
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(["embodia", *init.parent.relative_to(ROOT).parts]))
    assert found == listed, (sorted(found - listed), sorted(listed - found))
