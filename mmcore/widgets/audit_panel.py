"""The Jobs page's audit sections: a job's history, and for admins the whole trail and the refused attempts.

Each table is built only while its expander is open (`on_change="rerun"`). A trail that cannot be read
(a damaged `audit.db`) is one clear message in place of the table, never a traceback: what happened and the
admin's way out (`python -m mmcore audit repair`).
"""
import streamlit as st

from mmcore.access import audit
from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.jobs import jobtable

HISTORY_OPEN_KEY = "jobs.history_open"
AUDIT_OPEN_KEY = "jobs.audit_open"


def columns(names, prefix="jobs.audit"):
    """Column headers in the viewer's language."""
    return {name: t(f"{prefix}.{name}") for name in names}


def rows(entries):
    """Audit entries as table rows (a dataframe shows text as text)."""
    return [{"when": jobtable.format_time(e.at), "who": e.user, "action": e.action,
             "job": e.job_id, "detail": audit.detail_text(e.detail)}
            for e in entries]


def refusal_rows(refusals):
    """Refused attempts as table rows: who asked for what, from where, and why it was refused."""
    return [{"when": jobtable.format_time(r.at), "who": r.user, "action": r.action, "job": r.job_id,
             "entry": r.entry, "reason": " ".join(r.reason.split())}
            for r in refusals]


def _read(read):
    """`read()`, or None after showing why the trail cannot be read."""
    try:
        return read()
    except audit.AuditUnavailable as exc:
        st.error(md(str(exc)), icon=":material/policy:")
        return None


def job_history(store, job):
    """The selected job's history: every act on it (its label counts them)."""
    trail = _read(lambda: audit.entries(job.id, home=store.home))
    if trail is None:
        return
    # The label counts the entries, and a new label is a new expander to Streamlit: carry the open
    # state over, so a new entry (or another job) does not fold an open history.
    st.session_state[HISTORY_OPEN_KEY] = st.session_state.get(HISTORY_OPEN_KEY, False)
    history = st.expander(t("jobs.history", n=len(trail)), icon=":material/history:", key=HISTORY_OPEN_KEY,
                          on_change="rerun")
    if history.open:
        with history:
            st.dataframe(rows(trail), hide_index=True, width="stretch",
                         column_config=columns(("when", "who", "action", "job", "detail")))


def admin_trail(store):
    """The whole audit trail and the refused attempts (the page shows this to admins only)."""
    box = st.expander(t("jobs.audit"), icon=":material/policy:", key=AUDIT_OPEN_KEY, on_change="rerun")
    if not box.open:
        return
    with box:
        st.caption(t("jobs.audit.help"))
        entries = _read(lambda: audit.entries(limit=500, home=store.home))
        if entries is None:
            return
        st.dataframe(rows(entries), hide_index=True, width="stretch",
                     column_config=columns(("when", "who", "action", "job", "detail")))
        refused = _read(lambda: audit.refusals(limit=500, home=store.home))
        st.markdown(f"**{t('jobs.refusals', n=len(refused or ()))}**")
        if refused:
            st.dataframe(refusal_rows(refused), hide_index=True, width="stretch",
                         column_config=columns(("when", "who", "action", "job", "entry", "reason"),
                                               prefix="jobs.refusals"))
