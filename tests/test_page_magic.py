"""Streamlit "magic" echoes a bare expression's value onto the page: a conditional whose branches call st.*
showed a grey `DeltaGenerator(...)` box with its docstring, or a stray `None`. Magic is off in the app's
config, and no page or the entry holds an expression it would echo; `python_object_text` finds such text on a
page run by AppTest (the Models page's two-turn chat test uses it)."""
import ast
import tomllib

import pytest
from streamlit.testing.v1 import AppTest

from mmcore.base.paths import ROOT

# What st.write shows for a Python object rather than for text a page means to show.
OBJECT_TEXT = ("DeltaGenerator", "<object at", "Traceback (most recent call last)")


def python_object_text(at):
    """Every element of the page run `at` whose message shows a Python object (`OBJECT_TEXT`), or a bare
    `None` written as the whole of a text, markdown or code element."""
    found, stack = [], [at._tree]
    while stack:
        node = stack.pop()
        proto = getattr(node, "proto", None)
        if proto is not None:
            text = str(proto)
            value = getattr(node, "value", None)
            if any(s in text for s in OBJECT_TEXT) or (isinstance(value, str) and value.strip("` \n") == "None"):
                found.append(text[:200])
        stack.extend(getattr(node, "children", {}).values())
    return found


def echoed_expressions(source):
    """(line, source) of each statement of `source` that magic would write onto the page: a bare expression
    that is not a call, a docstring, or a yield/await."""
    return [(n.lineno, ast.unparse(n)) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Expr) and not isinstance(n.value, (ast.Call, ast.Yield, ast.YieldFrom, ast.Await))
            and not (isinstance(n.value, ast.Constant) and isinstance(n.value.value, str))]


def test_magic_is_off_in_the_apps_config():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["runner"]["magicEnabled"] is False


@pytest.mark.parametrize("path", sorted((ROOT / "pages").glob("*.py")) + [ROOT / "streamlit_app.py"],
                         ids=lambda p: p.name)
def test_no_page_holds_an_expression_magic_would_echo(path):
    assert echoed_expressions(path.read_text(encoding="utf-8")) == []


def test_the_checks_find_what_magic_echoes():
    script = 'import streamlit as st\n"""A page."""\nst.text("a") if True else st.text("b")\nx = 1\nx\nst.text("c")\n'
    assert [line for line, _ in echoed_expressions(script)] == [3, 5]
    at = AppTest.from_string('import streamlit as st\nst.write(st.container())\nst.markdown("None")\nst.text("fine")\n')
    at.run()
    assert len(python_object_text(at)) == 2
