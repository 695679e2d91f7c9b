"""Streamlit's file uploader writes its own words in English: its button ("Upload") and its limit line
("50MB per file • JSONL, JSON"). `localize(key, types)` says them in the viewer's language instead, for
the uploader drawn with `key`: a style scoped to that widget hides Streamlit's text and shows the
dashboard's (`uploader.*` in the language tables) in its place. The limit is Streamlit's own
(`server.maxUploadSize`), the one it enforces."""
import re

import streamlit as st

from mmcore.base.i18n import t

_BUTTON = '[data-testid="stFileUploaderDropzone"] button [data-testid="stMarkdownContainer"]'
_LIMIT = '[data-testid="stFileUploaderDropzoneInstructions"] > div'


def _css_string(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def style(key, types, limit_mb):
    """The `<style>` that words the uploader `key` (accepting `types`, up to `limit_mb` MB per file)."""
    scope = ".st-key-" + re.sub(r"[^A-Za-z0-9_-]", "-", key)  # Streamlit's class for a widget's key
    limit = t("uploader.limit", mb=limit_mb, types=", ".join(x.upper() for x in types))
    return ("<style>"
            f"{scope} {_BUTTON} > p{{display:none}}"
            f"{scope} {_BUTTON}::after{{content:{_css_string(t('uploader.button'))}}}"
            f"{scope} {_LIMIT} > span{{display:none}}"
            # Streamlit's own limit line is small and faded
            f"{scope} {_LIMIT}::after{{content:{_css_string(limit)};font-size:0.875rem;opacity:0.6}}"
            "</style>")


def localize(key, types):
    """Word the uploader `key` in the viewer's language (call it beside the `st.file_uploader`)."""
    st.html(style(key, types, st.get_option("server.maxUploadSize")))
