"""The core's shape: every mmcore module imports on its own, without torch, and no import circle."""
import ast
import json
import subprocess
import sys

from mmcore.base.paths import ROOT

CORE = ROOT / "mmcore"


def core_modules():
    return sorted(f"mmcore.{p.stem}" for p in CORE.glob("*.py") if p.stem != "__init__")


def core_imports(module):
    """The mmcore modules `module` imports anywhere in its source (a function-level import counts)."""
    tree = ast.parse((CORE / f"{module.split('.')[1]}.py").read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mmcore.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "mmcore":
                found |= {f"mmcore.{a.name}" for a in node.names}
            elif node.module.startswith("mmcore."):
                found.add(node.module)
    return found & set(core_modules())


def find_circle(graph):
    """One import circle as a list of modules (first == last), or None."""
    done, path = set(), []

    def visit(node):
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        path.append(node)
        for nxt in sorted(graph[node]):
            circle = visit(nxt)
            if circle:
                return circle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        circle = visit(node)
        if circle:
            return circle
    return None


def test_no_import_circle_in_the_core():
    graph = {m: core_imports(m) for m in core_modules()}
    assert len(graph) >= 15 and graph["mmcore.jobs.runner"]  # the walk sees the modules and their imports
    assert find_circle(graph) is None, f"import circle: {' -> '.join(find_circle(graph))}"


def test_the_circle_finder_finds_circles():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_every_core_module_imports_alone_without_torch():
    """Each module in a fresh interpreter: it must not lean on another having been imported first."""
    code = ("import importlib, json, sys; importlib.import_module(sys.argv[1]); "
            "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))")
    for module in core_modules():
        result = subprocess.run([sys.executable, "-c", code, module], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, f"{module}: {result.stderr}"
        assert json.loads(result.stdout) == [], f"{module} imports {result.stdout.strip()}"
