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
# embodia.shared (embodia/shared/) ranks below every folder: any may import it, it imports none of them
RANK = {"shared": -1, "action_heads": 0, "memory": 0, "devices": 1, "policies": 2, "sim": 3, "agent": 4}


def test_imports_point_down():
    """No folder imports one above it (lazy imports inside functions included): the Device base
    imports nothing of the policies, the policies nothing of the simulators or the runtime."""
    up = []
    for folder, rank in RANK.items():
        for path in sorted((ROOT / ("embodia/shared" if folder == "shared" else folder)).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "embodia" and len(parts) > 1 and RANK.get(parts[1], -1) > rank:
                        up.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert up == []


# -- one implementation per job, and no seams left by splits (issue 55) ------------------------------
# The rules below read the package's own folders; tests may import a module's private names (they are
# white-box tests of that module) and keep their fixtures' re-exports, so tests/ is not checked.
PACKAGE_DIRS = {"agent": "agent", "devices": "devices", "memory": "memory", "policies": "policies", "sim": "sim",
                "action_heads": "action_heads"}
LEAF = "embodia/shared"


def py_files(root: Path, folders=SOURCES):
    for folder in folders:
        yield from sorted((root / folder).rglob("*.py"))


def module_file(root: Path, module: str) -> Path | None:
    """The file of ``embodia.<...>`` in the tree at ``root`` (the package-dir mapping of pyproject.toml)."""
    parts = module.split(".")
    if parts[0] != "embodia":
        return None
    base, rest = ((root / PACKAGE_DIRS[parts[1]], parts[2:]) if len(parts) > 1 and parts[1] in PACKAGE_DIRS
                  else (root / "embodia", parts[1:]))
    p = base.joinpath(*rest)
    return p / "__init__.py" if (p / "__init__.py").is_file() else p.with_suffix(".py") if p.with_suffix(".py").is_file() else None


def defined_and_imported(path: Path) -> tuple[set, set]:
    """The names a module defines at its top level (``if``/``try`` blocks included) and those it imports."""
    defined, imported = set(), set()
    for top in ast.parse(path.read_text()).body:
        for n in ast.walk(top) if isinstance(top, (ast.If, ast.Try)) else [top]:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    defined |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                imported |= {a.asname or a.name.split(".")[0] for a in n.names}
    return defined, imported


def reexports(root: Path) -> list[str]:
    """Old import paths kept alive: an embodia import marked ``noqa: F401`` or never used in its module
    (outside package ``__init__.py`` files, the front doors), and an import of a name from a module that
    only imports it itself."""
    found = []
    for path in py_files(root):
        rel, src = path.relative_to(root).as_posix(), path.read_text()
        tree, lines = ast.parse(src), src.splitlines()
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("embodia") and not node.level):
                continue
            if path.name != "__init__.py":
                if "noqa: F401" in " ".join(lines[node.lineno - 1:node.end_lineno]):
                    found.append(f"{rel}:{node.lineno} re-exports with noqa: F401")
                elif node in tree.body and [a.name for a in node.names if (a.asname or a.name) not in used]:
                    found.append(f"{rel}:{node.lineno} imports names it never uses (a silent re-export)")
            target = module_file(root, node.module)
            if target is None or target.name == "__init__.py":
                continue
            defined, imported = defined_and_imported(target)
            for a in node.names:
                if a.name in imported and a.name not in defined and module_file(root, f"{node.module}.{a.name}") is None:
                    found.append(f"{rel}:{node.lineno} imports {a.name} from {node.module}, which only imports it")
    return found


def private_imports(root: Path) -> list[str]:
    """``from embodia.x import _name`` and ``module._name`` of an imported embodia module."""
    found = []
    for path in py_files(root):
        rel, tree = path.relative_to(root).as_posix(), ast.parse(path.read_text())
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("embodia") and not node.level:
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        found.append(f"{rel}:{node.lineno} from {node.module} import {a.name}")
                    elif module_file(root, f"{node.module}.{a.name}"):
                        modules[a.asname or a.name] = node.module
            elif isinstance(node, ast.Import):
                modules.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("embodia")})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{rel}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def second_writers(root: Path) -> list[str]:
    """PNG encoders and atomic file writers outside the leaf: ``cv2.imencode``/``imwrite``, an image's
    ``save``, PNG chunks built by hand, and ``os.replace``/``os.rename``/``Path.rename``/``.replace`` of a temp."""
    found = []
    for path in py_files(root):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(LEAF + "/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes) and (b"IDAT" in node.value or b"\x89PNG" in node.value):
                found.append(f"{rel}:{node.lineno} builds PNG bytes by hand")
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner, name = ast.unparse(node.func.value), node.func.attr
            if owner == "cv2" and name in ("imencode", "imwrite"):
                found.append(f"{rel}:{node.lineno} cv2.{name}")
            elif name == "save" and re.search(r"(^|[._])(img|im|image|Image\..*)$", owner):
                found.append(f"{rel}:{node.lineno} {owner}.save(...)")
            elif owner == "os" and name in ("replace", "rename") and node.args and re.search(r"tmp|temp", ast.unparse(node.args[0])):
                found.append(f"{rel}:{node.lineno} os.{name}({ast.unparse(node.args[0])}, ...)")
            elif name in ("replace", "rename") and len(node.args) == 1 and re.search(r"tmp|temp", owner):
                found.append(f"{rel}:{node.lineno} {owner}.{name}(...)")
    return found


def test_no_reexports_for_old_import_paths():
    bad = reexports(ROOT)
    assert bad == [], "import each name from the module that defines it:\n" + "\n".join(bad)


def test_no_private_name_crosses_a_module():
    bad = private_imports(ROOT)
    assert bad == [], "a name another module uses is public where it is defined:\n" + "\n".join(bad)


def test_one_png_encoder_and_one_atomic_writer():
    bad = second_writers(ROOT)
    assert bad == [], f"encode images and write files atomically through {LEAF} (embodia.shared):\n" + "\n".join(bad)


def test_the_shared_leaf_imports_nothing_of_embodia():
    up = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in sorted((ROOT / LEAF).rglob("*.py"))
          for n in ast.walk(ast.parse(p.read_text()))
          if isinstance(n, (ast.Import, ast.ImportFrom)) and any(
              m.startswith("embodia") for m in ([a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]))]
    assert up == [] and (ROOT / LEAF / "images.py").is_file()


def test_the_rules_find_what_they_forbid(tmp_path):
    """Each finder on a tiny tree that breaks its rule once (so an empty answer above means something)."""
    (tmp_path / "embodia" / "shared").mkdir(parents=True)
    mem = tmp_path / "memory"
    mem.mkdir()
    (mem / "a.py").write_text("import os\nimport zlib\n_X = 1\ndef f(tmp, p):\n    os.replace(tmp, p)\n"
                              "    return zlib.compress(b'IDAT')\n")
    (mem / "b.py").write_text("from embodia.memory.a import _X  # noqa: F401\nfrom embodia.memory.a import os\n"
                              "import cv2\ndef g(img):\n    return cv2.imencode('.png', img)\n")
    assert len(reexports(tmp_path)) == 3 and len(private_imports(tmp_path)) == 1
    assert [s.split(" ", 1)[1] for s in second_writers(tmp_path)] == [
        "os.replace(tmp, ...)", "builds PNG bytes by hand", "cv2.imencode"]
