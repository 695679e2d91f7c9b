"""The code's shape, written once as import-linter contracts in pyproject.toml: the layers (pages ->
widgets/api -> actions -> wings -> trainer.rules), no import circle, streamlit only in pages,
mmcore.widgets and mmcore.live, torch only in the trainers, the model and mmcore.workers. Plus what a static check
cannot see: each dashboard module imports on its own in a fresh interpreter, without torch."""
import json
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

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


def test_every_dashboard_module_imports_alone_without_torch():
    """Each module in a fresh interpreter: it must not lean on another having been imported first."""
    modules = dashboard_modules()
    assert len(modules) > 60 and "mmcore.jobs.runner" in modules  # the walk sees the wings
    code = ("import importlib, json, sys; importlib.import_module(sys.argv[1]); "
            "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))")
    def run(module):
        return module, subprocess.run([sys.executable, "-c", code, module], cwd=ROOT, capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, modules))
    for module, result in results:
        assert result.returncode == 0, f"{module}: {result.stderr}"
        assert json.loads(result.stdout) == [], f"{module} imports {result.stdout.strip()}"
