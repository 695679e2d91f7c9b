"""trainer.rules (and dataset.formats) are the rules the dashboard shares with the trainers: each module
imports on its own where torch and transformers cannot be imported at all, and the rules' modules
import one another without a circle, not even through an import inside a function."""
import ast
import json
import subprocess
import sys

from mmcore.base.paths import ROOT

RULES = ROOT / "trainer" / "rules"


def rules_modules():
    return [f"trainer.rules.{path.stem}" for path in sorted(RULES.glob("*.py")) if path.stem != "__init__"]


# Each module in a fresh interpreter in which `import torch` (and transformers) raises ImportError.
BLOCKED = """
import importlib, json, sys
sys.modules["torch"] = None
sys.modules["transformers"] = None
failed = {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.startswith(("trainer", "dataset"))]:
        del sys.modules[loaded]  # each module on its own, not helped by one imported before it
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
print(json.dumps(failed))
"""


def test_every_rules_module_imports_with_torch_and_transformers_blocked():
    modules = rules_modules() + ["dataset.formats"]
    assert {"trainer.rules.args", "trainer.rules.specs", "trainer.rules.roots", "trainer.rules.messages",
            "trainer.rules.parsing", "trainer.rules.job_paths", "trainer.rules.records"} <= set(modules)
    run = subprocess.run([sys.executable, "-c", BLOCKED, *modules], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {}


def test_the_block_works():
    """The same interpreter set-up refuses a module that needs torch (so the test above can fail)."""
    run = subprocess.run([sys.executable, "-c", BLOCKED, "trainer.trainer_utils"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "trainer.trainer_utils" in json.loads(run.stdout)


def rules_imports():
    """{module: {rules modules it imports anywhere in its file, functions included}}."""
    names = set(rules_modules())
    graph = {}
    for path in sorted(RULES.glob("*.py")):
        module = f"trainer.rules.{path.stem}"
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
        graph[module] = (found & names) - {module}
    return graph


def test_the_rules_modules_import_one_another_without_a_circle():
    graph = rules_imports()
    assert "trainer.rules.specs" not in graph["trainer.rules.roots"]  # the circle there once was
    assert "trainer.rules.roots" in graph["trainer.rules.args"]  # the walk sees imports
    done, path = set(), []

    def visit(module):
        if module in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            visit(imported)
        path.pop()
        done.add(module)

    for module in graph:
        visit(module)
