"""The Streamlit widgets that pages compose: with `mmcore.live`, the only part of mmcore that
imports streamlit.

Importing any of them makes `mmcore.base.i18n` follow the session's language choice."""
from mmcore.widgets import session_language  # noqa: F401  (registers the session's language with i18n)
