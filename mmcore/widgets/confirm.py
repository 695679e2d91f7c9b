"""The Jobs page's acts on the selected job (Streamlit): Stop, Delete, Clone to Train and Resume buttons, the
question Stop and Delete ask first, and each act's outcome kept on screen.

A click on Stop or Delete does not act: it flashes why the act is refused (`mmcore.actions.job_acts`
asks the role and the job's state), or remembers the question, which `buttons` draws under them, naming
the job and its owner, with Yes and Cancel; Yes runs the act. An outcome stays for FLASH_S, long enough
to read on a page that refreshes itself every few seconds (`show_flash` draws it). A button the user may
not use is disabled with the reason as its help, and the act refuses it anyway.
"""
import time

import streamlit as st

from mmcore.actions import job_acts
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.jobs import jobtable
from mmcore.widgets import train_form

FLASH_KEY = "jobs.flash"  # (kind, message, unix time) of the last act, shown for FLASH_S
FLASH_S = 10.0
CONFIRM_KEY = "jobs.awaiting_confirmation"  # ("stop" | "delete", job id) of the act awaiting confirmation


def flash(kind, message):
    """Show `message` as `kind` (success, info, warning, error) on this run and the runs of the next FLASH_S."""
    st.session_state[FLASH_KEY] = (kind, message, time.time())


def show_flash():
    if FLASH_KEY not in st.session_state:
        return
    kind, message, at = st.session_state[FLASH_KEY]
    if time.time() - at > FLASH_S:
        del st.session_state[FLASH_KEY]
    else:
        getattr(st, kind)(md_lines(message))


def _ask(action, job_id, refusal):
    if refusal:
        flash("error", refusal)
    else:
        st.session_state[CONFIRM_KEY] = (action, job_id)  # ask first


def _cancel():
    st.session_state.pop(CONFIRM_KEY, None)


def _stop(store, job_id, user):
    _cancel()
    outcome = job_acts.stop_job(store, job_id, user)
    flash(outcome.kind, outcome.message)


def _delete(store, job_id, user, select, cache):
    _cancel()
    outcome = job_acts.delete_job(store, job_id, user, cache)
    if outcome.done:
        select(None)
    flash(outcome.kind, outcome.message)


def _resume(store, job_id, user, select):
    outcome = job_acts.resume_job(store, job_id, user)
    if outcome.done:
        select(outcome.value)  # the new job
    flash(outcome.kind, outcome.message)


def _question(job, acts):
    """The question awaiting an answer about `job`, if any, with Yes (running its act) and Cancel."""
    action, job_id = st.session_state.get(CONFIRM_KEY) or (None, None)
    if job_id != job.id or action not in acts:
        return
    names = {"id": job.id, "name": md(job.name), "owner": md(jobtable.submitted_by(job))}
    queued = action == "delete" and job.in_queue  # one question takes it out of the queue and deletes it
    st.warning(t("jobs.confirm_delete_queued" if queued else f"jobs.confirm_{action}", **names))
    on_yes, args = acts[action]
    yes, no, _ = st.columns([1, 1, 4])
    yes.button(t(f"jobs.yes_{action}"), type="primary", on_click=on_yes, args=args, key="jobs.confirm")
    no.button(t("jobs.cancel"), on_click=_cancel, key="jobs.cancel")


def buttons(store, job, user, select, cache=None):
    """The act buttons of `job` as `user`, a link to its charts, and a pending question. `select(job_id)`
    selects a job on the page (None: none), as a resume (its new job) and a delete do; `cache`: the
    page's `progress.ProgressCache`, which forgets a deleted job's log."""
    cols = st.columns(5)
    may_not = {action: job_acts.refusal(user, action, job) for action in ("stop", "delete", "clone")}
    cols[0].button(t("jobs.stop"), key="jobs.stop", disabled=not job.active or bool(may_not["stop"]),
                   on_click=lambda: _ask("stop", job.id, job_acts.stop_refusal(store, job.id, user)),
                   help=md(may_not["stop"] or t("jobs.stop.help")))
    cols[1].button(t("jobs.delete"), key="jobs.delete", disabled=bool(may_not["delete"]),
                   on_click=lambda: _ask("delete", job.id, job_acts.delete_refusal(store, job.id, user)),
                   help=md(may_not["delete"] or t("jobs.delete.help")))
    clone = cols[2].button(t("jobs.clone"), key="jobs.clone", disabled=bool(may_not["clone"]),
                           help=md(may_not["clone"] or t("jobs.clone.help")))
    cannot_resume = job_acts.resume_refusal(job, user)
    cols[3].button(t("jobs.resume"), key="jobs.resume", disabled=bool(cannot_resume), on_click=_resume,
                   args=(store, job.id, user, select), help=md(cannot_resume) if cannot_resume else t("jobs.resume.help"))
    with cols[4]:
        st.page_link("pages/logs.py", label=t("jobs.charts_link"), icon=":material/monitoring:",
                     query_params={"job": str(job.id)})
    if clone:
        outcome = job_acts.clone_job(store, job.id, user)
        if not outcome.done:
            flash(outcome.kind, outcome.message)
        else:
            st.session_state[train_form.CLONE_KEY] = train_form.clone_request(job)
            st.switch_page("pages/train.py")
    _question(job, {"stop": (_stop, (store, job.id, user)),
                    "delete": (_delete, (store, job.id, user, select, cache))})
