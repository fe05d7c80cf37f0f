"""Every benchmark command in BENCHMARKS.md and its history pages (docs/benchmarks/*.md) still runs,
as far as a cheap check can tell: the script exists, and its own argument parser (built by its
``main()``, as when the command runs) accepts the documented flags and values. Parsing is all that runs: the parser is stopped the moment it returns,
before the benchmark starts. A flag removed from a script, renamed, or given a type or choices the
documented value no longer meets fails here (argparse's own error, quoted)."""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import bench_module
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs" / "benchmarks").glob("*.md"))]
COMMAND = re.compile(r"python3? benchmarks/(\w+)\.py\b(.*)")
ENDS = {"|", "||", "&&", ";", "&"}        # the command line ends at a pipe or the next command


FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
# an inline span: a run of backticks, then text within one paragraph, closed by a run as long
SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n\n).)+?)(?<!`)\1(?!`)", re.S)


def fenced_and_inline(text: str) -> list[str]:
    """The document's code: each fenced block's lines (``\\`` continuations joined), then each
    inline code span outside the blocks (one may wrap over lines)."""
    lines = []
    for block in FENCE.findall(text):
        lines += block.replace("\\\n", " ").splitlines()
    lines += [m.group(2).replace("\n", " ") for m in SPAN.finditer(FENCE.sub("", text))]
    return lines


def commands(text: str) -> list[tuple[str, list[str]]]:
    """(script name, its arguments) of every ``python benchmarks/<script>.py ...`` in the code.
    Shell comments are dropped, as is a ``...`` (the document's "and so on")."""
    found = []
    for line in fenced_and_inline(text):
        m = COMMAND.search(line)
        if m is None:
            continue
        args = []
        for tok in shlex.split(m.group(2), comments=True):
            if tok in ENDS or tok.startswith((">", "2>")):
                break
            if tok != "...":
                args.append(tok)
        found.append((m.group(1), args))
    return found


class Parsed(Exception):
    """Raised by the stopped parser with what it parsed: the benchmark never starts."""


def parse_only(monkeypatch, script: str, args: list[str]) -> argparse.Namespace:
    """``benchmarks/<script>.py args`` up to its parsed arguments: its ``main()`` builds its parser
    and parses ``sys.argv`` as the command would, and the parse stops the run. A refused command is
    argparse's exit; the message it printed is in the failure."""
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise Parsed(real(self, args, namespace))
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{script}.py", *args])
    module = bench_module.load(script)
    with pytest.raises(Parsed) as got:
        module.main()
    return got.value.args[0]


# (page, script, arguments) of every documented command
DOCUMENTED = [(p.relative_to(ROOT).as_posix(), *c) for p in DOCS for c in commands(p.read_text(encoding="utf-8"))]


def test_the_commands_are_found_in_blocks_and_inline_spans():
    text = ("Run it:\n```bash\nOMP_NUM_THREADS=1 python benchmarks/a.py --x 1 \\\n    --y 'two words'  # why\n"
            "python benchmarks/b.py | tee out\n```\nand `python benchmarks/c.py\n--z` inline, or ``ls `x` ``;\n"
            "  ```json\n  {\"a\": 1}\n  ```\n\n`python benchmarks/d.py --w 2`\n")
    assert commands(text) == [("a", ["--x", "1", "--y", "two words"]), ("b", []), ("c", ["--z"]), ("d", ["--w", "2"])]
    scripts = {s for _, s, _ in DOCUMENTED}
    assert len(DOCUMENTED) >= 116 and {"metaworld_suite", "gate_corpus", "serve_hostile"} <= scripts
    pages = {p for p, _, _ in DOCUMENTED}
    assert "BENCHMARKS.md" in pages and len(pages) >= 10, f"commands were read from {sorted(pages)} only"


@pytest.mark.parametrize("page,script,args", DOCUMENTED,
                         ids=[f"{Path(p).stem}:{s}:{' '.join(a)[:60]}" for p, s, a in DOCUMENTED])
def test_a_documented_command_parses(monkeypatch, capsys, page, script, args):
    assert (ROOT / "benchmarks" / f"{script}.py").is_file(), f"{page} runs benchmarks/{script}.py: not there"
    try:
        parse_only(monkeypatch, script, args)
    except SystemExit as e:
        pytest.fail(f"{page}: benchmarks/{script}.py refuses the documented `{' '.join(args)}` (exit {e.code}): "
                    f"{capsys.readouterr().err.strip()}")


def test_a_removed_or_mistyped_flag_fails_the_check(monkeypatch, capsys):
    """What the check catches: a flag the script does not (or no longer) take, a value its type refuses."""
    assert parse_only(monkeypatch, "loop_overhead", ["--episodes", "20"]).episodes == 20
    with pytest.raises(SystemExit):
        parse_only(monkeypatch, "loop_overhead", ["--episodes", "20", "--no-such-flag"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_only(monkeypatch, "loop_overhead", ["--episodes", "twenty"])
    assert "invalid int value: 'twenty'" in capsys.readouterr().err
