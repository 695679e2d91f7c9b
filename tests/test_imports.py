"""The code's shape, written once as import-linter contracts in pyproject.toml: the layers (pages ->
widgets/api -> actions -> wings -> trainer.rules), no import circle, streamlit only in pages,
mmcore.widgets and mmcore.live, torch only in the trainers, the model and mmcore.workers. Plus what a static check
cannot see: each dashboard module imports on its own in a fresh interpreter, without torch."""
import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from mmcore.base.paths import ROOT

LINT_IMPORTS = shutil.which("lint-imports")
needs_import_linter = pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is in requirements-dev.txt")


def dashboard_modules():
    """Every module of mmcore but its torch child processes (mmcore.workers)."""
    found = []
    for path in sorted((ROOT / "mmcore").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "workers" in parts or parts[-1] == "__main__":
            continue
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


@needs_import_linter
def test_the_import_contracts_hold():
    result = subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" KEPT") >= 6 and "BROKEN" not in result.stdout


@needs_import_linter
def test_a_layer_violation_breaks_the_contracts(tmp_path):
    """The same kind of contract on a tiny project with one upward import: lint-imports must fail."""
    pkg = tmp_path / "shop"
    for name, body in {"__init__": "", "pages": "from shop import core\n", "core": "from shop import pages\n"}.items():
        pkg.mkdir(exist_ok=True)
        (pkg / f"{name}.py").write_text(body)
    (tmp_path / ".importlinter").write_text(textwrap.dedent("""
        [importlinter]
        root_package = shop
        [importlinter:contract:layers]
        name = layers
        type = layers
        layers =
            shop.pages
            shop.core
    """))
    result = subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode != 0 and "BROKEN" in result.stdout


# Imports each module named on the command line in a child forked from a process that has imported none of the
# project (only the third-party libraries the dashboard uses, so that each child costs a fraction of a second):
# one JSON line per module, the heavy libraries it pulled in or its traceback.
_IMPORT_EACH = """
import importlib, json, os, sys, traceback
for lib in ("streamlit", "pandas", "plotly.graph_objects", "numpy", "psutil", "jinja2"):
    importlib.import_module(lib)
preloaded = [m for m in sys.modules if m.split(".")[0] in ("mmcore", "trainer", "model", "dataset", "torch", "transformers")]
assert not preloaded, preloaded
for module in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            found = {"module": module, "heavy": [m for m in ("torch", "transformers") if m in sys.modules]}
        except BaseException:
            found = {"module": module, "error": traceback.format_exc()}
        with os.fdopen(write, "w") as out:
            out.write(json.dumps(found))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        line = answer.read()
    os.waitpid(pid, 0)
    print(line, flush=True)
"""


def test_every_dashboard_module_imports_alone_without_torch():
    """Each module in a fresh process of its own, forked before any of the project was imported: it must not lean
    on another having been imported first, and must not import torch or transformers."""
    modules = dashboard_modules()
    assert len(modules) > 60 and "mmcore.jobs.runner" in modules  # the walk sees the wings
    done = subprocess.run([sys.executable, "-c", _IMPORT_EACH, *modules], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["module"] for r in results] == modules
    for found in results:
        assert "error" not in found, f"{found['module']}: {found.get('error')}"
        assert found["heavy"] == [], f"{found['module']} imports {found['heavy']}"


def test_the_import_check_sees_a_module_that_leans_on_another(tmp_path):
    """The check itself: a module that works only when another was imported first fails in it, and one that
    imports torch is named."""
    pkg = tmp_path / "leaning"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text("import leaning\nleaning.shared = 1\n")
    (pkg / "user.py").write_text("import leaning\nvalue = leaning.shared\n")  # needs base first
    (pkg / "heavy.py").write_text("import torch\n")
    done = subprocess.run([sys.executable, "-c", _IMPORT_EACH, "leaning.base", "leaning.user", "leaning.heavy"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    base, user, heavy = (json.loads(line) for line in done.stdout.splitlines())
    assert base["heavy"] == [] and "AttributeError" in user["error"] and heavy["heavy"] == ["torch"]
