"""The queue, backends and pipelines on the pages: small Streamlit sections the pages place.

Train: `backend_choice` (this machine or Slurm, with what the cluster offers and the batch script
a job would run) and `pipeline_section` (templates, each stage's command, one Run button).
Jobs: `queue_details` (a waiting job's place and reason, moves, priority) and `pipelines_section`
(each pipeline as one group with its stages' states, retry/resume from the failed stage).
Logs: `pipeline_jobs` (a `?pipeline=N` link charts every stage of that pipeline).
All: `settings_section` (the queue settings; admins change them).
Every change is an act of `mmcore.actions.queue_acts` (role checked, audited); a control someone may not
use is disabled, and the act refuses it anyway.
"""
import streamlit as st

from mmcore.access import roles
from mmcore.actions import queue_acts
from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.jobs import jobtable
from mmcore.queue import pipelines, queueconf, queuetext, slurm
from mmcore.widgets import train_form

BACKEND_LABELS = {"local": "This machine (queue)", "slurm": "Slurm cluster"}
STAGE_MARK = {"succeeded": "✓", "running": "▶", "queued": "…", "failed": "✗", "stopped": "■", "lost": "?",
              "blocked": "⏸"}


def _status(status):
    """A job's or pipeline's status in the viewer's language (a status this version lacks: as it is)."""
    return t(f"status.{status}") if f"status.{status}" in i18n.table(i18n.DEFAULT) else status


def _who(identity):
    """The acting identity of a page (nobody in particular when it has none: the default role)."""
    return identity or roles.ANONYMOUS_ROLE_USER


# -- Train ---------------------------------------------------------------------------------------

def launch_what():
    """One job (the form) or a pipeline (templates): a choice at the top of Train."""
    if train_form.CLONE_KEY in st.session_state:  # "Clone to Train" from Jobs opens the job's form
        st.session_state["queue.launch_what"] = "job"
    i18n.relabel(st.session_state, "queue.launch_what")
    return st.radio(t("queue.launch"), ("job", "pipeline"), format_func=lambda v: t(f"queue.launch.{v}"),
                    horizontal=True, key="queue.launch_what", label_visibility="collapsed")


def backend_choice(store, key):
    """Where a launch runs: a radio when Slurm is installed here; returns "local" or "slurm"."""
    settings = queueconf.load(store.home)
    if not slurm.available():
        return "local"
    options = list(BACKEND_LABELS)
    i18n.keep_choice(st.session_state, key,
                     settings.default_backend if settings.default_backend in options else options[0])
    backend = st.radio(t("queue.run_on"), options, format_func=lambda b: t(f"queue.backend.{b}"), horizontal=True,
                       key=key, help=t("queue.run_on.help"))
    if backend == "slurm":
        rows = slurm.cluster_summary()
        if rows:
            st.caption(t("queue.cluster", partitions="; ".join(
                t("queue.partition", name=r["partition"], state=r["state"], nodes=r["nodes"])
                + (f", {r['gres']}" if r["gres"] else "") + ")" for r in rows)))
        else:
            st.warning(t("queue.sinfo_silent"))
    return backend


def slurm_preview(store, train_type, name, command):
    """The batch script a Slurm launch submits (for the command preview)."""
    from mmcore.jobs.jobrow import Job

    job = Job(id=0, train_type=train_type, name=name or "", status="queued", params={}, argv=command.argv,
              cwd=command.cwd, env=command.env, log_path=str(store.logs_dir / "job-<id>.log"), created_at=0.0)
    st.code(slurm.batch_script(job, queueconf.load(store.home)), language="bash", wrap_lines=True)


def pipeline_section(store, gpu_count, identity=None):
    """Pipeline templates: choose one, see every stage's command, queue all stages with one click."""
    labels = {k: t(f"queue.template.{k}") for k in pipelines.TEMPLATES}
    with st.container(border=True):
        st.markdown(f"**{t('queue.pipeline')}**")
        st.caption(t("queue.pipeline.help"))
        key = st.selectbox(t("queue.template"), list(labels), format_func=labels.get, key="queue.pipeline.template")
        template = pipelines.TEMPLATES[key]
        try:
            stages = template.stages()
        except pipelines.PipelineRefused as exc:
            st.error("\n".join(md(r) for r in exc.reasons))
            return
        name = st.text_input(t("queue.pipeline_name"), value=template.label.lower().replace(" ", "-"),
                             key="queue.pipeline.name")
        backend = backend_choice(store, "queue.pipeline.backend")
        shown = pipelines.commands(stages)
        for i, ((train_type, _), cmd) in enumerate(zip(stages, shown)):
            st.markdown(t("queue.stage", n=i + 1, type=t(f"type.{train_type}")))
            st.code(cmd, language="bash", wrap_lines=True)
        problems = pipelines.check(stages, gpu_count if backend == "local" else 1024)
        for problem in problems:
            st.warning(md(problem), icon=":material/warning:")
        may_not = queue_acts.refusal(_who(identity), "launch")
        if may_not:
            st.caption(md(may_not))
        if st.button(t("queue.run_pipeline"), type="primary", key="queue.pipeline.launch",
                     disabled=bool(problems) or bool(may_not)):
            outcome = queue_acts.queue_pipeline(store, name.strip() or template.label, stages, _who(identity),
                                                backend=backend, gpu_count=gpu_count, template=key)
            if outcome.done:
                st.session_state["queue.pipeline.launched"] = outcome.value
            else:
                st.error(md_lines(outcome.message))
        launched = st.session_state.get("queue.pipeline.launched")
        pipeline = pipelines.get(store, launched) if launched is not None else None
        if pipeline is not None and pipeline.stages:  # its jobs, and a link to the one that starts first
            st.success(md(pipelines.queued_text(pipeline)))
            st.page_link("pages/jobs.py", label=t("queue.open_job", job_id=pipeline.stages[0].id),
                         icon=":material/list:", query_params={"job": str(pipeline.stages[0].id)})


# -- Jobs ----------------------------------------------------------------------------------------

def _flash(outcome):
    st.session_state["queue.flash"] = (outcome.kind, outcome.message)


def _move(store, job_id, where, identity):
    _flash(queue_acts.move_job(store, job_id, where, _who(identity)))


def _priority(store, job_id, key, identity):
    try:
        priority = int(st.session_state[key])
    except (TypeError, ValueError) as exc:
        st.session_state["queue.flash"] = ("error", str(exc))
        return
    _flash(queue_acts.set_priority(store, job_id, priority, _who(identity)))


def queue_details(store, job, identity=None):
    """Where a job runs and, while it waits, its place, its reason and the queue's controls."""
    flash = st.session_state.pop("queue.flash", None)
    if flash:
        getattr(st, flash[0])(md_lines(flash[1]))
    where = t(f"queue.backend.{job.backend}") if job.backend in BACKEND_LABELS else job.backend
    extra = t("queue.slurm_job", id=job.external_id) if job.external_id else ""
    if job.assigned_gpus:
        extra += t("queue.assigned_gpus", gpus=", ".join(map(str, job.assigned_gpus)))
    if job.pipeline_id is not None:
        extra += t("queue.in_pipeline", id=job.pipeline_id, stage=job.stage + 1)
    st.caption(md(t("queue.runs_on", where=where) + extra))
    if job.status == "queued" and job.queue_reason:
        st.info(md(queuetext.reason_text(job.queue_reason)), icon=":material/hourglass_top:")
    if not job.in_queue:
        return
    cols = st.columns([1, 1, 1, 2])
    may_not = queue_acts.refusal(_who(identity), "move", job)
    for col, where_to, label in zip(cols, ("top", "up", "down"), (t("queue.top"), t("queue.up"), t("queue.down"))):
        col.button(label, key=f"queue.{where_to}", on_click=_move, args=(store, job.id, where_to, identity),
                   disabled=bool(may_not), help=md(may_not) if may_not else None)
    key = f"queue.priority.{job.id}"
    no_priority = queue_acts.refusal(_who(identity), "priority")  # priorities are an admin's
    cols[3].number_input(t("queue.priority"), -1000, 1000, value=int(job.priority), step=1,
                         key=key, on_change=_priority, args=(store, job.id, key, identity),
                         disabled=bool(no_priority), help=md(no_priority) if no_priority else None)


def _retry(store, pipeline_id, resume, identity, select=None):
    outcome = queue_acts.retry_pipeline(store, pipeline_id, resume, _who(identity))
    if outcome.done and select is not None:
        select(outcome.value)  # the queued job, shown under the message (as a resume does)
    _flash(outcome)


def _stop_pipeline(store, pipeline_id, identity=None):
    _flash(queue_acts.stop_pipeline(store, pipeline_id, _who(identity)))


def pipelines_section(store, identity=None, limit=10, select=None):
    """Every recent pipeline as one group: each stage's state, and what can be done next. `select(job_id)`
    selects the job a retry queued on the page."""
    found = pipelines.list_pipelines(store, limit)
    if not found:
        return
    with st.container(border=True):
        st.markdown(f"**{t('queue.pipelines')}**")
        for p in found:
            stages = " → ".join(f"{STAGE_MARK.get(j.status, '')} {j.stage + 1} {jobtable.type_short(j.train_type)}"
                                + t("queue.stage_state", status=_status(j.status), id=j.id) for j in p.stages)
            st.markdown(t("queue.pipeline_heading", id=p.id, name=md(p.name), status=_status(p.status)))
            st.text(stages)
            cols = st.columns(4)
            failed = p.status in ("failed", "stopped", "lost")
            no_retry, no_stop = (queue_acts.pipeline_refusal(_who(identity), action, p) for action in ("retry", "stop"))
            cols[0].button(t("queue.retry"), key=f"pipe.retry.{p.id}", disabled=not failed or bool(no_retry),
                           on_click=_retry, args=(store, p.id, False, identity, select), help=md(no_retry) if no_retry else None)
            cols[1].button(t("queue.resume"), key=f"pipe.resume.{p.id}", disabled=not failed or bool(no_retry),
                           on_click=_retry, args=(store, p.id, True, identity, select),
                           help=md(no_retry) if no_retry else t("queue.resume.help"))
            cols[2].button(t("queue.stop"), key=f"pipe.stop.{p.id}",
                           disabled=p.status not in ("running", "queued") or bool(no_stop),
                           on_click=_stop_pipeline, args=(store, p.id, identity), help=md(no_stop) if no_stop else None)
            with cols[3]:
                st.page_link("pages/logs.py", label=t("queue.chart"), icon=":material/monitoring:",
                             query_params={"pipeline": str(p.id)})


# -- Logs ----------------------------------------------------------------------------------------

def pipeline_jobs(store, query_value):
    """The stage jobs of the pipeline a `?pipeline=N` value names: (ids, message or None)."""
    text = (query_value or "").strip()
    if not text:
        return [], None
    if not text.isdigit():
        return [], t("queue.not_pipeline_id", text=repr(text))
    pipeline = pipelines.get(store, int(text))
    if pipeline is None:
        return [], t("queue.no_pipeline", id=text)
    return pipeline.job_ids, None


# -- settings ------------------------------------------------------------------------------------

SETTINGS_OPEN_KEY = "queue.settings_open"  # session state: whether the settings expander is open


def settings_section(store, identity=None):
    """The queue's settings (admins change them; everyone sees them), in an expander whose fields are
    built only while it is open: a page that shows it draws sooner."""
    box = st.expander(t("queue.settings"), key=SETTINGS_OPEN_KEY, on_change="rerun")
    if not box.open:
        return
    current = queueconf.load(store.home)
    why_not = queue_acts.refusal(_who(identity), "settings")
    admin = why_not is None
    with box:
        if not admin:
            st.caption(t("queue.admin_only"))
        with st.form("queue.settings"):
            cols = st.columns(3)
            cpu_slots = cols[0].number_input(t("queue.cpu_slots"), 0, 256, current.cpu_slots,
                                             disabled=not admin,
                                             help=t("queue.cpu_slots.help", env=queueconf.CPU_SLOTS_ENV))
            foreign = cols[1].number_input(t("queue.foreign"), 0, 1 << 20,
                                           current.foreign_memory_mib, disabled=not admin)
            backend = cols[2].selectbox(t("queue.default_backend"), queueconf.BACKENDS,
                                        index=queueconf.BACKENDS.index(current.default_backend),
                                        format_func=lambda b: t(f"queue.backend.{b}"), disabled=not admin)
            cols = st.columns(4)
            partition = cols[0].text_input(t("queue.slurm_partition"), current.slurm_partition, disabled=not admin)
            account = cols[1].text_input(t("queue.slurm_account"), current.slurm_account, disabled=not admin)
            limit = cols[2].text_input(t("queue.slurm_time"), current.slurm_time, placeholder=t("queue.slurm_time.placeholder"),
                                       disabled=not admin)
            nodes = cols[3].number_input(t("queue.slurm_nodes"), 1, 1024, current.slurm_nodes, disabled=not admin)
            cols = st.columns(3)
            gpus = cols[0].number_input(t("queue.slurm_gpus"), 0, 64, current.slurm_gpus_per_node,
                                        disabled=not admin)
            tasks = cols[1].number_input(t("queue.slurm_tasks"), 1, 64, current.slurm_tasks_per_node,
                                         disabled=not admin)
            cpus = cols[2].number_input(t("queue.slurm_cpus"), 0, 1024, current.slurm_cpus_per_task,
                                        disabled=not admin)
            if st.form_submit_button(t("queue.save"), disabled=not admin, help=md(why_not) if why_not else None):
                new = queueconf.QueueSettings(
                    cpu_slots=int(cpu_slots), foreign_memory_mib=int(foreign), default_backend=backend,
                    slurm_partition=partition.strip(), slurm_account=account.strip(), slurm_time=limit.strip(),
                    slurm_nodes=int(nodes), slurm_gpus_per_node=int(gpus), slurm_tasks_per_node=int(tasks),
                    slurm_cpus_per_task=int(cpus), slurm_rdzv_port=current.slurm_rdzv_port)
                outcome = queue_acts.save_settings(store, new, _who(identity))
                getattr(st, outcome.kind)(md_lines(outcome.message))
