"""The docs a newcomer reads: README.md is a front door (what it is, the Quickstart, the concepts, the
layout, in its first 150 lines) and the manual lives in docs/, one page per surface.

These tests keep the two honest: every public name of ``embodia`` is in the README's layout table,
defined where the table says and explained where it points; every link resolves; every command
shown in a ``bash`` block of README.md or docs/*.md parses (an ``embodia`` command line by the real
CLI's own parser, a ``python -m``/script by the file it names, ``python -c`` as Python), every
``python`` block compiles and every ``json`` block loads. Commands are parsed, not run: most of them
train, evaluate for minutes or need a display, a phone or a model server.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
FRONT = ("Quickstart", "Concepts", "How the code is laid out")


def sections(text: str) -> dict[str, tuple[int, str]]:
    """`## Title` -> (1-based line of the heading, the section's text up to the next `## `), code
    blocks skipped so that a `# comment` in a bash block is not a heading."""
    out, title, start, body, fence = {}, None, 0, [], False
    for i, line in enumerate(text.splitlines() + ["## (end)"], 1):
        fence ^= line.startswith("```")
        if not fence and line.startswith("## "):
            if title is not None:
                out[title] = (start, "\n".join(body))
            title, start, body = line[3:].strip(), i, []
        else:
            body.append(line)
    return out


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def headings(text: str) -> list[str]:
    """Every markdown heading's title, code blocks skipped (a `# comment` in one is no heading)."""
    out, fence = [], False
    for line in text.splitlines():
        fence ^= line.startswith("```")
        if not fence and re.match(r"#+ ", line):
            out.append(line.lstrip("#").strip())
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_front_door_comes_first():
    """Quickstart, concepts and layout start, and the layout ends, within the README's first 150
    lines; the manual comes after them."""
    secs = sections(README.read_text())
    missing = [t for t in FRONT if t not in secs]
    assert not missing, f"README lacks the sections {missing}"
    starts = {t: secs[t][0] for t in FRONT}
    assert all(line <= 150 for line in starts.values()), starts
    after = [line for line in (s for s, _ in secs.values()) if line > starts[FRONT[-1]]]
    assert after and min(after) <= 151, f"the layout section runs to line {min(after, default='end')}"


# | `Name` | `embodia.module` (path/inside/repo) | [where](a docs page or a README anchor) |
_ROW = re.compile(r"^\| `(\w+)` \| `([\w.]+)` \(([\w./-]+)\) \| \[[^\]]+\]\(([^)]+)\) \|$", re.M)


def layout_rows() -> dict[str, tuple[str, str, str]]:
    return {m[1]: (m[2], m[3], m[4]) for m in _ROW.finditer(sections(README.read_text())[FRONT[-1]][1])}


def explained_text(target: str) -> str:
    """The text a row's "explained in" link leads to: a README section or a docs page."""
    if target.startswith("#"):
        by_anchor = {slug(t): body for t, (_, body) in sections(README.read_text()).items()}
        assert target[1:] in by_anchor, f"README has no section {target}"
        return by_anchor[target[1:]]
    return (ROOT / target).read_text()


def test_every_public_name_is_documented_where_the_layout_says():
    """A newcomer looks a name up in the layout table: it must be there, defined in the module and
    file the row names, and explained (in backticks or bold) where the row points."""
    import embodia
    rows = layout_rows()
    assert set(rows) == set(embodia.__all__), (
        f"public names without a row: {sorted(set(embodia.__all__) - set(rows))}; "
        f"rows for no public name: {sorted(set(rows) - set(embodia.__all__))}")
    bad = []
    for name, (module, path, target) in sorted(rows.items()):
        obj = getattr(embodia, name)
        if getattr(importlib.import_module(module), name, None) is not obj:
            bad.append(f"{name}: not {module}.{name}")
        where = (ROOT / path).resolve()
        source = Path(inspect.getsourcefile(obj)).resolve()
        if not (source == where or where in source.parents):
            bad.append(f"{name}: defined in {source.relative_to(ROOT)}, the table says {path}")
        if not re.search(rf"`{name}\b|\*\*{name}\*\*", explained_text(target)):
            bad.append(f"{name}: not explained in {target}")
    assert not bad, "\n".join(bad)


def test_the_layout_check_fails_on_an_undocumented_name(monkeypatch):
    """The check above is not vacuous: a public name with no row, and a row pointing at a page that
    never mentions its name, are both caught."""
    import embodia
    monkeypatch.setattr(embodia, "__all__", [*embodia.__all__, "brand_new_name"])
    with pytest.raises(AssertionError, match="brand_new_name"):
        test_every_public_name_is_documented_where_the_layout_says()
    assert not re.search(r"`LocalDataset\b", explained_text("docs/viewer.md"))


def broken_links(page: Path) -> list[str]:
    """The page's relative links whose file or heading anchor is not there."""
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"\w+://", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.is_file():
            bad.append(f"{page.name}: {target} (no such file)")
        elif anchor and anchor not in {slug(h) for h in headings(dest.read_text())}:
            bad.append(f"{page.name}: {target} (no such heading)")
    return bad


def test_every_docs_page_is_linked_and_every_link_resolves():
    readme = README.read_text()
    unlinked = [p.name for p in DOCS if f"](docs/{p.name})" not in readme]
    assert DOCS and not unlinked, f"docs pages the README does not link: {unlinked}"
    bad = [b for page in [README, *DOCS] for b in broken_links(page)]
    assert not bad, "\n".join(bad)


# programs the docs show that are not ours: named here, so that a new kind of command is a decision
_OTHERS = {"pip", "python3", ".", "galculator", "vllm", "Xvfb", "rerun", "kill", "dbus-run-session", "adb", "cd", "ray"}
_OPS = {"&&", "||", "|", ";", "&"}
FOLDERS_OF_MODULES = {"policies"}


def command_lines(text: str):
    """Each simple command of every bash block: continuations joined, `$(...)` replaced by a word,
    comments and redirections dropped, leading VAR=value assignments skipped."""
    for block in blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\$\([^)]*\)", "SUBST", line)
            lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;<>")
            lexer.whitespace_split, lexer.commenters = True, "#"
            words = []
            for tok in [*lexer, ";"]:
                if tok not in _OPS:
                    words.append(tok)
                    continue
                while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
                    words.pop(0)
                cut = next((i for i, w in enumerate(words) if w in ("<", ">")), len(words))
                if words[:cut]:
                    yield words[:cut]
                words = []


def clicks():
    """The click that typer uses: it vendors its own, whose exceptions are not click's."""
    import typer
    return sys.modules[typer.BadParameter.__module__]


def parse_embodia(argv: list[str]) -> None:
    """Parse argv as the `embodia` command would, down to the verb's own options, without running
    it: make_context converts and validates every option and argument, as the real command does."""
    import typer.main

    from embodia.agent.cli import app
    cmd = typer.main.get_command(app)
    ctx = cmd.make_context("embodia", list(argv))
    # a group: go down to the verb (`embodia train --data ...` is a group that runs without one)
    while hasattr(cmd, "resolve_command") and (ctx._protected_args or ctx.args or not cmd.invoke_without_command):
        name, cmd, rest = cmd.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        ctx = cmd.make_context(name, rest, parent=ctx)


class Parsed(Exception):
    """Raised right after a module's argparse parser accepted its arguments: nothing runs."""


def parse_module(module: str, argv: list[str]) -> str | None:
    """Call the module's main(argv) with argparse stopped after parsing: the options the docs show
    are the ones its parser takes. A module without main(argv) is only checked to exist."""
    import argparse
    from unittest import mock
    main = getattr(importlib.import_module(module), "main", None)
    if main is None:
        return None
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        real(self, args, namespace)
        raise Parsed
    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop):
        try:
            main(argv)
        except Parsed:
            return None
        except SystemExit as e:
            return f"python -m {module}: its parser refused {argv} (exit {e.code})"
    return f"python -m {module}: main() ran without parsing its arguments"


def check_python(args: list[str]) -> str | None:
    """python -m <module> / python <script> / python -c <code>: the module or script exists, the code
    compiles and what it imports from embodia is there."""
    if args[:2] == ["-m", "pytest"]:
        return None
    if args[0] == "-m":
        if not args[1].startswith("embodia."):
            return f"python -m {args[1]}: not ours"
        path = ROOT / (args[1].removeprefix("embodia.").replace(".", "/") + ".py")
        if not path.is_file():
            return f"python -m {args[1]}: no {path.relative_to(ROOT)}"
        return parse_module(args[1], args[2:])
    if args[0] == "-c":
        tree = ast.parse(args[1])
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("embodia"):
                mod = importlib.import_module(node.module)
                lost = [a.name for a in node.names if not hasattr(mod, a.name)]
                if lost:
                    return f"python -c: {node.module} has no {lost}"
        return None
    script = ROOT / args[0]
    if not script.is_file():
        return f"python {args[0]}: no such script"
    if script.parent.name in FOLDERS_OF_MODULES:       # a module of ours run by path: its parser checks the options
        return parse_module(f"embodia.{script.parent.name}.{script.stem}", args[1:])
    return None


def doc_commands() -> list[tuple[str, list[str]]]:
    return [(p.relative_to(ROOT).as_posix(), words) for p in [README, *DOCS]
            for words in command_lines(p.read_text())]


def test_every_command_in_the_docs_parses():
    cmds = doc_commands()
    assert sum(w[0] == "embodia" for _, w in cmds) > 60, "the docs' embodia commands were not found"
    bad = []
    for page, words in cmds:
        where = f"{page}: {shlex.join(words)[:120]}"
        if words[0] == "embodia":
            try:
                parse_embodia(words[1:])
            except clicks().ClickException as e:
                bad.append(f"{where}\n    {' '.join(e.format_message().split())}")
        elif words[0] == "python" or words[0].endswith("/bin/python"):     # ours, or another environment's
            err = check_python(words[1:])
            if err:
                bad.append(f"{where}\n    {err}")
        elif words[0] not in _OTHERS and not words[0].endswith("/bin/pip"):
            bad.append(f"{where}\n    a command this test does not know: add it to _OTHERS or check it")
    assert not bad, "\n".join(bad)


def test_a_wrong_command_in_the_docs_would_be_caught():
    exc = clicks()
    with pytest.raises(exc.NoSuchOption):
        parse_embodia(["eval", "--device", "sim:twogap-push", "--episodez", "3"])
    with pytest.raises(exc.UsageError, match="No such command"):
        parse_embodia(["evaluate", "--device", "sim:twogap-push"])
    with pytest.raises(exc.BadParameter):
        parse_embodia(["run", "--episodes", "three"])
    with pytest.raises(exc.NoSuchOption):
        parse_embodia(["train", "tiny", "--no-such-option"])
    with pytest.raises(exc.UsageError, match="No such command"):
        parse_embodia(["train", "no-such-recipe"])
    assert check_python(["-m", "embodia.agent.no_such"]) is not None
    assert check_python(["-c", "from embodia.memory import NoSuchMemory"]) is not None


def test_every_python_block_compiles_and_every_json_block_loads():
    bad = []
    for page in [README, *DOCS]:
        text = page.read_text()
        for code in blocks(text, "python"):
            try:
                compile(code, str(page), "exec")
            except SyntaxError as e:
                bad.append(f"{page.name}: {e}")
        for doc in blocks(text, "json"):
            try:
                json.loads(doc)
            except json.JSONDecodeError as e:
                bad.append(f"{page.name}: {e}: {doc[:80]!r}")
    assert not bad, "\n".join(bad)


def test_the_quickstart_is_what_ci_runs():
    """The two Quickstart commands stand in the README as .ci/run runs them (CI adds only pip's -q)."""
    quick = blocks(sections(README.read_text())["Quickstart"][1] + "\n", "bash")
    assert quick, "the Quickstart has no bash block"
    commands = [line for line in quick[0].splitlines() if line.strip()]
    ci = (ROOT / ".ci" / "run").read_text().replace("pip install -q ", "pip install ").splitlines()
    assert len(commands) == 2 and all(c in ci for c in commands), (commands, "not lines of .ci/run")
