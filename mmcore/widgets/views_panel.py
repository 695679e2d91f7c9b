"""The Logs page's saved views section (Streamlit): open, share, save and delete named views.

The views themselves and their rules are in `mmcore.logs.savedviews`; saving and deleting one are acts of
`mmcore.actions.view_acts` (audited).
"""
import streamlit as st

from mmcore.actions import view_acts
from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.logs import savedviews

FLASH_KEY = "views.flash"


def _save(views, viewer):
    state = st.session_state
    outcome = view_acts.save_view(views, state.get("views.name"), st.query_params,
                                  shared=state.get("views.share", False), user=viewer)
    state[FLASH_KEY] = (outcome.kind, outcome.message)
    if outcome.done:
        state["views.pick"] = outcome.value


def _open(view_id):
    st.session_state[savedviews.OPEN_KEY] = view_id


def _delete(views, view_id, viewer):
    outcome = view_acts.delete_view(views, view_id, user=viewer)
    st.session_state[FLASH_KEY] = (outcome.kind, outcome.message)
    if outcome.done:
        st.session_state.pop("views.pick", None)


def section(views, viewer, page_url):
    """Saved views: the viewer's own and the team's shared ones, each with a link; save this view."""
    state = st.session_state
    with st.expander(t("views.title"), icon=":material/bookmarks:", expanded=FLASH_KEY in state):
        if FLASH_KEY in state:
            kind, message = state.pop(FLASH_KEY)
            getattr(st, kind)(md(message))
        listed = {v.id: v for v in views.visible_to(viewer)}
        if listed:
            if state.get("views.pick") not in listed:
                state["views.pick"] = next(iter(listed))
            cols = st.columns([4, 1, 1], vertical_alignment="bottom")
            pick = cols[0].selectbox(t("views.pick"), list(listed), key="views.pick",
                                     format_func=lambda i: savedviews.label(listed[i], viewer))
            cols[1].button(t("views.open"), on_click=_open, args=(pick,), key="views.open_button")
            may_not = view_acts.delete_view_refusal(listed[pick], viewer)
            cols[2].button(t("views.delete"), on_click=_delete, args=(views, pick, viewer), key="views.delete",
                           disabled=bool(may_not), help=md(may_not) if may_not else None)
            st.caption(t("views.link"))
            st.code(f"{page_url}?view={pick}", language=None)
        else:
            st.caption(t("views.none"))
        cols = st.columns([3, 2, 1], vertical_alignment="bottom")
        cols[0].text_input(t("views.name"), key="views.name", max_chars=savedviews.NAME_MAX,
                           placeholder=t("views.name.placeholder"))
        cols[1].checkbox(t("views.share"), key="views.share", help=t("views.share.help"))
        cols[2].button(t("views.save"), on_click=_save, args=(views, viewer), key="views.save", type="primary")
