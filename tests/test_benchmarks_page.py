"""BENCHMARKS.md is a front page a newcomer can read: at most 300 lines, whose first table holds the
headline results, each row linking to the section of a history page under docs/benchmarks/ that
holds its runs. The README quotes benchmark figures only in a paragraph that links BENCHMARKS.md,
and every figure such a paragraph quotes is in that table. Every figure of the table is on the
history page its row links to (taken from the record, never rounded again), each interval written
as the record writes it. Every link of the front page and the history pages resolves, and every
history page is listed on the front page."""
from __future__ import annotations

import re
from pathlib import Path

from test_docs import broken_links, headings, slug

ROOT = Path(__file__).resolve().parents[1]
FRONT = ROOT / "BENCHMARKS.md"
PAGES = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
MAX_LINES = 300
COLUMNS = ["claim", "figure (95% interval)", "command", "seeds", "machine", "date", "history"]
# a figure: a number, signed or not, a count k/n or a thousands-separated one, a share (0.5%) or a
# ratio (0.73x); not part of a name (mt50, sha256, 96x96), a version or a longer number
FIGURE = re.compile(r"(?<![\w.])[+-]?\d+(?:[.,/]\d+)*(?:%|x)?(?!\w|\.\d)")
INTERVAL = re.compile(r"\[[+-]?\d[^\]]*\]")           # an interval, as the record writes it: [0.761, 0.867]
HISTORY = re.compile(r"\]\((docs/benchmarks/[\w-]+\.md)#([\w-]+)\)")


def first_table(text: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows (cells stripped) of the first markdown table of the text."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    block = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        block.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return block[0], block[2:]


def without_code(text: str) -> str:
    """Text with its code spans and link targets dropped: `embodia-mt50` and link targets hold no figure."""
    return re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`\n]*`", "", text))


def figures(text: str) -> list[str]:
    return FIGURE.findall(without_code(text))


def quoted(figure: str, text: str) -> bool:
    """Whether the text states this figure as it is written (+0.04 is not +0.043 nor 0.644's 44)."""
    return re.search(rf"(?<![\w.]){re.escape(figure)}(?!\d)", without_code(text)) is not None


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks, a list item each its own block."""
    return [b for block in re.split(r"\n\s*\n", text) for b in re.split(r"\n(?=\s*- )", block)]


def readme_figures(readme: str) -> list[str]:
    """The figures of every README paragraph that links BENCHMARKS.md."""
    return [f for p in paragraphs(readme) if "](BENCHMARKS.md" in p for f in figures(p)]


def missing_from_table(readme: str, front: str) -> list[str]:
    table = "\n".join(" | ".join(row) for row in first_table(front)[1])
    return [f for f in readme_figures(readme) if not quoted(f, table)]


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in headings(path.read_text(encoding="utf-8"))}


def test_the_front_page_is_short():
    n = FRONT.read_text(encoding="utf-8").count("\n")
    assert n <= MAX_LINES, f"BENCHMARKS.md is {n} lines: a front page holds at most {MAX_LINES}; move detail to docs/benchmarks/"


def test_the_first_table_is_the_headline_results_and_each_row_links_its_history():
    header, rows = first_table(FRONT.read_text(encoding="utf-8"))
    assert header == COLUMNS
    assert len(rows) >= 30, "the headline table lost its rows"
    bad = []
    for row in rows:
        links = HISTORY.findall(row[-1])
        if len(row) != len(COLUMNS) or not links:
            bad.append(f"{row[0][:60]}: {len(row)} cells, history links {links}")
        for page, anchor in links:
            if not (ROOT / page).is_file():
                bad.append(f"{row[0][:60]}: no {page}")
            elif anchor not in anchors(ROOT / page):
                bad.append(f"{row[0][:60]}: {page} has no section #{anchor}")
    assert not bad, "\n".join(bad)


def test_every_figure_of_the_table_is_on_its_history_page():
    bad = []
    for row in first_table(FRONT.read_text(encoding="utf-8"))[1]:
        pages = {page for page, _ in HISTORY.findall(row[-1])}
        record = "\n".join((ROOT / p).read_text(encoding="utf-8") for p in pages)
        lost = [f for f in figures(row[1]) if not quoted(f, record)]
        lost += [i for i in INTERVAL.findall(without_code(row[1])) if i not in record]
        if lost:
            bad.append(f"{row[0][:60]}: {lost} not in {sorted(pages)}")
    assert not bad, "\n".join(bad)


def test_every_figure_the_readme_quotes_is_in_the_headline_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_figures(readme), "the README links BENCHMARKS.md from no paragraph with a figure"
    missing = missing_from_table(readme, FRONT.read_text(encoding="utf-8"))
    assert not missing, f"README quotes {missing} beside a BENCHMARKS.md link, not in its headline table"


def test_a_readme_figure_missing_from_the_table_is_caught():
    front = ("# B\n\n| claim | figure |\n|---|---|\n| memory | +0.043 [+0.003, +0.083]; one of 44 cells |\n\n"
             "Below the table: +0.05\n")
    readme = ("Intro 3.11.\n\n- **Memory** (`embodia-mt50`): safe ([BENCHMARKS.md](BENCHMARKS.md#x)): seed recall\n"
              "  +0.04; one of 44 cells; 0.5% overhead.\n- Other: 0.9 and +0.05.\n")
    assert readme_figures(readme) == ["+0.04", "44", "0.5%"]
    assert missing_from_table(readme, front) == ["+0.04", "0.5%"]
    assert missing_from_table(readme.replace("+0.04", "+0.043").replace(" 0.5% overhead", ""), front) == []


def test_every_history_page_is_listed_and_every_link_resolves():
    front = FRONT.read_text(encoding="utf-8")
    unlisted = [p.name for p in PAGES if f"](docs/benchmarks/{p.name})" not in front]
    assert len(PAGES) >= 10 and not unlisted, f"history pages BENCHMARKS.md does not list: {unlisted}"
    bad = [b for page in [FRONT, *PAGES] for b in broken_links(page)]
    assert not bad, "\n".join(bad)
