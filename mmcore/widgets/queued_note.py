"""What an act that queued a job said, kept on screen with a link to that job.

A page that queues a job (an export, an evaluation) shows the act's outcome once, on the run of the click;
the page's later runs (the live sidebar's, a job's start changing the store) would drop it at once. `remember`
keeps the outcome in session state under a key of the page's own, `show` draws it on every run until the
next act replaces it: "Export queued as job 5 ..." and "Open job 5 on Jobs".
"""
import streamlit as st

from mmcore.base.i18n import t
from mmcore.base.safetext import md_lines


def remember(key, outcome, job_id=None):
    """Keep `outcome` (an act's Outcome) under `key`, with the id of the job it queued (None when refused)."""
    st.session_state[key] = (outcome.kind, outcome.message, job_id if outcome.done else None)


def show(key):
    """The kept outcome under `key`, if any, and a link to its job on the Jobs page."""
    if key not in st.session_state:
        return
    kind, message, job_id = st.session_state[key]
    getattr(st, kind)(md_lines(message))
    if job_id is not None:
        st.page_link("pages/jobs.py", label=t("queue.open_job", job_id=job_id), icon=":material/list:",
                     query_params={"job": str(job_id)})
