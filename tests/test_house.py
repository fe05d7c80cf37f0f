"""The house keeps its declared doors: the runtime asks a device or a policy only what `Device` and
`Policy` declare (no `getattr`/`hasattr` probes outside the adapters of foreign objects, no
`isinstance` against a concrete device or policy class outside the factory), and the docs' hook
lists name every member the two classes declare."""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from embodia.devices import Device
from embodia.policies import Policy

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("agent", "devices", "policies", "sim", "embodia", "memory", "action_heads", "benchmarks")

# the last name of an expression that holds a device or a policy (``device``, ``self.policy``,
# ``s.device``, ``run.policy``...); adapters call what they wrap ``inner`` or ``obj``
HOLDERS = {"device", "dev", "body", "policy", "pol", "steered", "expert", "teacher", "base_policy", "loop_dev",
           "inner", "obj"}

# the only functions allowed to probe: the adapters of foreign objects (a duck-typed policy or
# device seen through the declared members) and the wrappers that forward every other attribute
ALLOWED = {
    ("policies/base.py", "_Adapted.__init__"),
    ("policies/base.py", "_Adapted.__getattr__"),
    ("policies/base.py", "as_policy"),
    ("devices/base.py", "_AdaptedDevice.__init__"),
    ("devices/base.py", "_AdaptedDevice.__getattr__"),
    ("devices/base.py", "_read_through"),
    ("devices/base.py", "as_device"),
    ("agent/evaluation/memory_eval.py", "NoisyLabels.__getattr__"),
    ("agent/evaluation/memory_eval.py", "NoOracle.__getattr__"),
    ("benchmarks/metaworld_noise_share.py", "NoiseSeed.__getattr__"),
}


def probes(source: str) -> list[tuple[str, int, str]]:
    """(enclosing function's qualified name, line, call text) of every ``getattr``/``hasattr`` whose
    first argument names a device or a policy."""
    found = []

    def visit(node, scope: list[str]):
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = [*scope, child.name]
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                    and child.func.id in ("getattr", "hasattr") and child.args):
                target = ast.unparse(child.args[0])
                if target.rsplit(".", 1)[-1] in HOLDERS:
                    found.append((".".join(scope) or "<module>", child.lineno, ast.unparse(child)))
            visit(child, inner)
    visit(ast.parse(source), [])
    return found


def test_the_probe_finder_finds_probes():
    src = ("def f(device, run):\n    return getattr(device, 'max_steps', None), hasattr(run.policy, 'x')\n"
           "class C:\n    def g(self):\n        return getattr(self.dev, 'done', False), getattr(self, 'x', 1)\n")
    assert [(q, n) for q, n, _ in probes(src)] == [("f", 2), ("f", 2), ("C.g", 5)]


def test_no_probe_of_a_device_or_a_policy_outside_the_adapters():
    seen, bad = set(), []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for qual, line, text in probes(path.read_text()):
                if (rel, qual) in ALLOWED:
                    seen.add((rel, qual))
                else:
                    bad.append(f"{rel}:{line} in {qual}: {text}")
    assert bad == [], "ask the declared members of Device / Policy instead:\n" + "\n".join(bad)
    assert seen, "the adapters probe: the finder must see them (else it finds nothing at all)"


# where the concrete classes are chosen: the factory turns --device/--policy strings into objects
MAY_NAME_CLASSES = {"agent/loop/factory.py"}


def subclasses(sources: dict[str, str], roots=("Device", "Policy")) -> set[str]:
    """The names of every class that derives, directly or not, from ``roots`` in ``sources``
    ({path: text}), read from the class statements' bases (the roots themselves excluded)."""
    bases: dict[str, set[str]] = {}
    for text in sources.values():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                         if isinstance(b, (ast.Name, ast.Attribute))}
                bases.setdefault(node.name, set()).update(names)
    found, grew = set(), True
    while grew:
        new = {c for c, bs in bases.items() if c not in found and bs & (found | set(roots))}
        found |= new
        grew = bool(new)
    return found - set(roots)


def class_tests(source: str, concrete: set[str]) -> list[tuple[int, str]]:
    """(line, call text) of every ``isinstance(x, C)`` whose class argument names one of ``concrete``
    (a tuple of classes and ``module.C`` included)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                and len(node.args) == 2):
            named = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.args[1])
                     if isinstance(n, (ast.Name, ast.Attribute))}
            if named & concrete:
                found.append((node.lineno, ast.unparse(node)))
    return found


def runtime_sources() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text()
            for folder in SOURCES for path in sorted((ROOT / folder).rglob("*.py"))}


def test_the_class_test_finder_finds_tests_of_concrete_classes():
    src = ("class Arm(SimDevice):\n    pass\nclass Vla(base.Policy):\n    pass\nclass Other:\n    pass\n"
           "def f(d, p, vlm):\n    return isinstance(d, Arm), isinstance(p, (Other, *([vlm.Vla] if vlm else []))), "
           "isinstance(d, Device), isinstance(p, Other)\n")
    concrete = subclasses({"x.py": src}, roots=("Device", "SimDevice", "Policy"))
    assert concrete == {"Arm", "Vla"}
    assert [n for n, _ in class_tests(src, concrete)] == [8, 8]


def test_no_isinstance_on_a_concrete_device_or_policy_outside_the_factory():
    """The runtime asks what a device or a policy declares (capabilities, facts, hooks) instead of
    testing its class; only the factory, which makes them from strings, names the classes."""
    sources = runtime_sources()
    concrete = subclasses(sources)
    assert {"MujocoDevice", "DesktopDevice", "VLAPolicy", "GuiHeadPolicy", "LocalVLMPolicy"} <= concrete
    bad = [f"{rel}:{line}: {text}" for rel, text in sources.items() if rel not in MAY_NAME_CLASSES
           for line, text in class_tests(text, concrete)]
    assert bad == [], "declare a capability on Device / Policy and ask it instead:\n" + "\n".join(bad)


def hooks(cls) -> set[str]:
    """The public members a base class declares: its methods and its annotated or assigned facts."""
    names = {n for n, v in vars(cls).items() if not n.startswith("_")}
    names |= {n for n in inspect.get_annotations(cls) if not n.startswith("_")}
    return names


def hook_list(doc: Path, name: str) -> str | None:
    """The text of the doc's ``- **<name>**`` bullet (its continuation lines included), or None."""
    m = re.search(rf"^- \*\*{name}\*\*.*?(?=^\S|^- |\n\n|\Z)", doc.read_text(), re.MULTILINE | re.DOTALL)
    return m.group(0) if m else None


@pytest.mark.parametrize("cls", [Device, Policy], ids=lambda c: c.__name__)
@pytest.mark.parametrize("doc", ["ARCHITECTURE.md", "README.md"])
def test_the_docs_hook_lists_name_every_declared_member(cls, doc):
    text = hook_list(ROOT / doc, cls.__name__)
    if text is None:
        assert doc != "ARCHITECTURE.md", f"ARCHITECTURE.md lost its **{cls.__name__}** entry"
        pytest.skip(f"{doc} has no **{cls.__name__}** hook list")
    named = set(re.findall(r"`([A-Za-z_]\w*)", text))
    assert {"act", "reset"} <= hooks(cls)
    missing = sorted(hooks(cls) - named)
    assert missing == [], f"{doc}'s **{cls.__name__}** list does not name {missing}"


# ARCHITECTURE.md section 1: who may import whom (a folder imports its own rank and those below)
RANK = {"action_heads": 0, "memory": 0, "devices": 1, "policies": 2, "sim": 3, "agent": 4}


def test_imports_point_down():
    """No folder imports one above it (lazy imports inside functions included): the Device base
    imports nothing of the policies, the policies nothing of the simulators or the runtime."""
    up = []
    for folder, rank in RANK.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "embodia" and len(parts) > 1 and RANK.get(parts[1], -1) > rank:
                        up.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert up == []
