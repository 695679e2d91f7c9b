"""The language of the Streamlit session a script run belongs to, for `mmcore.base.i18n.current`."""
from streamlit.runtime.scriptrunner import get_script_run_ctx

from mmcore.base import i18n


def session_language():
    """The running Streamlit session's language, or None outside a Streamlit script run."""
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None:
        return None
    try:
        return ctx.session_state[i18n.STATE_KEY] if i18n.STATE_KEY in ctx.session_state else None
    except Exception:  # a session state being torn down
        return None


i18n.read_session_language_with(session_language)
