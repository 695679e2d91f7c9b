"""The shape of the code, as limits a change must keep: no wing of mmcore (a subpackage) above 15 modules,
no module of the shipped code above 450 lines, no trainer script (trainer/train_*.py) above 90 lines, and
no edit of `sys.path` anywhere (the package is installed; scripts and benches run as modules). A module that
outgrows a limit is split by concern, a wing by a cohesive group of its modules (docs/ARCHITECTURE.md)."""
import re
import subprocess

import pytest

from mmcore.base.paths import ROOT

WING_MODULES = 15
MODULE_LINES = 450
TRAIN_SCRIPT_LINES = 90
SHIPPED = ("mmcore", "trainer", "model", "dataset", "pages")  # and streamlit_app.py; not tests/ nor bench/
# An assignment to sys.path or a call that changes it in place (written so that this file does not match).
PATH_EDIT = re.compile(r"\bsys\.path\s*(\.\s*(insert|append|extend|remove)\s*\(|\+=|=(?!=)|\[[^\]]*\]\s*=(?!=))")


def tracked_python_files():
    """The repository's Python files as git sees them (tracked, and untracked ones it does not ignore)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.stdout.split() if (ROOT / name).is_file()]


def line_count(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_no_wing_holds_more_than_fifteen_modules():
    wings = {d.name: len([p for p in d.glob("*.py") if p.name != "__init__.py"])
             for d in (ROOT / "mmcore").iterdir() if (d / "__init__.py").is_file()}
    assert len(wings) >= 10, wings  # the walk sees the wings
    assert {name: n for name, n in wings.items() if n > WING_MODULES} == {}


def test_no_shipped_module_is_longer_than_the_limit():
    files = [p for p in tracked_python_files()
             if p.relative_to(ROOT).parts[0] in SHIPPED or p.name == "streamlit_app.py"]
    assert any(p.name == "runner.py" for p in files)
    assert {str(p.relative_to(ROOT)): n for p in files if (n := line_count(p)) > MODULE_LINES} == {}


def test_trainer_scripts_stay_short():
    scripts = sorted((ROOT / "trainer").glob("train_*.py"))
    assert len(scripts) >= 10
    assert {p.name: n for p in scripts if (n := line_count(p)) > TRAIN_SCRIPT_LINES} == {}


def test_nothing_edits_sys_path():
    edits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in tracked_python_files()
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if PATH_EDIT.search(line)]
    assert edits == []


SP = "sys" ".path"  # so that the examples below are not edits of this file


@pytest.mark.parametrize("line, edits", [
    (f"{SP}.insert(0, ROOT)", True), (f"{SP}.append(str(ROOT))", True), (f"{SP} += [x]", True),
    (f"{SP} = [x] + {SP}", True), (f"{SP}[:0] = [x]", True),
    (f"if x in {SP}:", False), (f"paths = list({SP})", False), (f"{SP} == old", False),
])
def test_the_sys_path_check_tells_an_edit_from_a_read(line, edits):
    assert bool(PATH_EDIT.search(line)) is edits
