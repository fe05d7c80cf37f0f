"""A house a newcomer can read: no function over 80 lines and no file over 600 lines in the
package folders, except the ones listed below, each with the reason it is still there. The lists
only shrink: an entry whose file or function is back under its limit fails too, so it is removed
when the split lands."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("agent", "devices", "memory", "policies", "sim", "action_heads", "embodia")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80

# path -> why it is still longer than MAX_FILE_LINES
LONG_FILES = {
}
# (path, function name) -> why it is still longer than MAX_FUNCTION_LINES
LONG_FUNCTIONS = {
}


def line_count(text: str) -> int:
    """Lines as ``wc -l`` counts them."""
    return text.count("\n")


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function or method, nested ones included, longer than
    ``limit`` lines (from ``def`` to its last line; decorators not counted)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                out.append((node.name, node.lineno, n))
    return out


def package_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_the_measure_finds_a_long_function():
    body = "\n".join(f"        x{i} = {i}" for i in range(85))
    src = f"def short():\n    return 1\n\n\nclass A:\n    def long(self):\n{body}\n"
    assert long_functions(src) == [("long", 6, 86)]
    assert long_functions(src, limit=90) == []


def test_no_file_over_600_lines_outside_the_list():
    over = {str(p.relative_to(ROOT)): line_count(p.read_text()) for p in package_files()}
    over = {k: n for k, n in over.items() if n > MAX_FILE_LINES}
    new = {k: n for k, n in over.items() if k not in LONG_FILES}
    assert not new, (f"files over {MAX_FILE_LINES} lines: {new}; split them along their seams "
                     "(or list one in LONG_FILES with the reason it is one unit)")
    done = sorted(set(LONG_FILES) - set(over))
    assert not done, f"{done} are {MAX_FILE_LINES} lines or fewer now: remove them from LONG_FILES"


def test_no_function_over_80_lines_outside_the_list():
    found = {(str(p.relative_to(ROOT)), name): (line, n)
             for p in package_files() for name, line, n in long_functions(p.read_text())}
    new = {f"{k[0]}:{v[0]} {k[1]}": v[1] for k, v in found.items() if k not in LONG_FUNCTIONS}
    assert not new, (f"functions over {MAX_FUNCTION_LINES} lines: {new}; split them along their seams "
                     "(or list one in LONG_FUNCTIONS with the reason)")
    done = sorted(set(LONG_FUNCTIONS) - set(found))
    assert not done, f"{done} are {MAX_FUNCTION_LINES} lines or fewer now: remove them from LONG_FUNCTIONS"
