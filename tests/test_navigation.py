"""The legacy pages-folder workaround (mmcore/widgets/navigation.py) still matches the Streamlit installed.

These fail loudly when a Streamlit upgrade renames or stops reading the private flag the workaround
clears; then bookmarked page URLs on a fresh server need a new look (tests/test_browser_e2e.py).
"""
import ast
import dataclasses
import inspect

import streamlit
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner import script_runner

from mmcore.base.paths import ROOT

FLAG = "uses_pages_directory"
WHY = (f"Streamlit {streamlit.__version__} changed PagesManager.{FLAG}, which mmcore/widgets/navigation.py clears "
       "to leave the legacy pages/ mode: check whether the workaround is still needed and how")


def test_the_private_flag_exists_and_decides_the_legacy_mode():
    assert FLAG in vars(PagesManager), WHY
    # The script runner runs a page alone (legacy mode) exactly when the flag is set...
    assert f"PagesManager.{FLAG}" in inspect.getsource(script_runner), WHY
    # ...and a fresh server sets it from the pages/ folder beside the entry script.
    saved = PagesManager.uses_pages_directory
    try:
        PagesManager.uses_pages_directory = None
        PagesManager(str(ROOT / "streamlit_app.py"))
        assert PagesManager.uses_pages_directory is True, WHY
    finally:
        PagesManager.uses_pages_directory = saved


def test_every_page_leaves_the_legacy_mode_first():
    for page in sorted((ROOT / "pages").glob("*.py")):
        body = [node for node in ast.parse(page.read_text(encoding="utf-8")).body
                if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)) or
                (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call))]
        first = ast.unparse(body[0])
        assert first == "navigation.ensure_app_navigation()", f"{page.name} starts with {first!r}"


def test_a_legacy_run_is_told_by_the_entry_being_the_main_script_that_has_not_run():
    """ensure_app_navigation tells a legacy run by the run's main script (the entry) in a session
    the entry never ran in: the script run context must still name its main script."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import ScriptRunContext

    from mmcore.widgets import navigation

    assert "main_script_path" in {f.name for f in dataclasses.fields(ScriptRunContext)}, WHY
    assert navigation.ENTRY == (ROOT / "streamlit_app.py").resolve() and navigation.ENTRY.is_file()
