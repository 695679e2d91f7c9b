"""Train: pick a training type, set its parameters, check the command and launch a job."""
import streamlit as st

from mmcore.access import auth
from mmcore.actions import job_acts
from mmcore.base import gpu, i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.data import links
from mmcore.jobs import storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import queuetext
from mmcore.train import lossnote, train_types
from mmcore.widgets import navigation, queue_panel, train_form
from mmcore.widgets.runviews import guards_form, sweep_panel

navigation.ensure_app_navigation()

state = st.session_state
QUEUED_AFTER_KEY = "train.queued_after"  # (job id, what the act said) of a launch queued after another job
gpus = gpu.list_gpus()
gpu_ids = [g.index for g in gpus]
gpu_names = {g.index: f"GPU {g.index}: {g.name}" for g in gpus}
labels = train_form.type_labels()

st.title(t("train.title"))
if store_problem := storeguard.problem():
    st.error(md(store_problem))  # launching needs the job store: say so before the form is filled in

if "data" in st.query_params:  # the Data page's "Train on this file" opens the one-job form
    state["queue.launch_what"] = "job"
if queue_panel.launch_what() == "pipeline":
    if not store_problem:
        queue_panel.pipeline_section(JobStore(), len(gpus), auth.session_user(state))
    st.stop()

cloned = train_form.take_clone(state, gpu_ids)
from_data = train_form.take_data_link(state, st.query_params, gpu_ids)  # "Train on this file" on Data
state.setdefault(train_form.TYPE_KEY, next(iter(labels)))
i18n.relabel(state, train_form.TYPE_KEY)
train_type = st.selectbox(t("train.type"), list(labels), format_func=lambda k: t(f"type.{k}"), key=train_form.TYPE_KEY,
                          on_change=lambda: state.pop(train_form.LAUNCHED_KEY, None),  # it was about the other form
                          help=t("train.type.help"))
if loss_note := lossnote.loss_note(train_type):  # a loss that reads unlike SFT's (Reasoning distill's)
    st.caption(loss_note)
if cloned:
    st.info(t("train.cloned", id=cloned[1]))
if from_data:
    st.info(t("train.from_data", path=md(from_data)))
train_form.ensure_form(state, train_type, gpu_ids)


def fill(train_type, form):
    """Button callback: replace every field of a type (callbacks run before the widgets are drawn)."""
    train_form.store_form(state, train_type, form)


left, right, _ = st.columns([1, 1, 3])
left.button(t("train.demo"), on_click=fill, args=(train_type, train_form.preset_form(train_type, gpu_ids)),
            help=t("train.demo.help"))
right.button(t("train.reset"), on_click=fill, args=(train_type, train_form.initial_form(train_type, gpu_ids)),
             help=t("train.reset.help"))

# Checked before drawing, so each field can show its own message right under it.
form = train_form.read_form(state, train_type)
check = train_form.check_form(train_type, form, len(gpus), None if store_problem else JobStore())


def field_label(name):
    return train_types.field_label(name, train_type)


def show_error(name):
    if name in check.errors:
        st.error(md(f"{field_label(name)} {i18n.field_error(check.errors[name])}"), icon=":material/error:")


def field(p):
    key = train_form.field_key(train_type, p.name)
    help_text = t("train.param.help", help=train_form.param_help(train_type, p), default=p.default_text or t("train.none"))
    if p.widget in ("select", "checkbox"):
        st.selectbox(field_label(p.name), train_form.select_options(p), key=key, help=help_text)
    elif p.widget == "number":
        # No min/max in the browser: it keeps an out-of-range number in the field without sending it, so the field
        # would show one value while the command used another. The check names the range instead (`show_error`).
        st.number_input(field_label(p.name), value=None, step=train_form.number_step(p),
                        format=None if p.type is int else "%g", key=key, help=help_text, placeholder=p.default_text)
    else:
        st.text_input(field_label(p.name), key=key, help=help_text, placeholder=p.default_text)
    if p.name == "dtype" and not gpus:
        st.caption(t("train.dtype_cpu"))
    show_error(p.name)


def device_fields():
    modes = train_form.device_modes(gpu_ids)
    i18n.relabel(state, train_form.field_key(train_type, "device_mode"))
    st.radio(t("train.device"), modes, format_func=lambda m: t(f"device.{m}"), horizontal=True,
             key=train_form.field_key(train_type, "device_mode"),
             help=t("train.device.help"))
    mode = state[train_form.field_key(train_type, "device_mode")]
    if not gpus:
        st.caption(t("train.no_gpu"))
    elif mode == "single":
        st.selectbox(t("train.gpu"), gpu_ids, format_func=gpu_names.get, key=train_form.field_key(train_type, "gpu"))
    elif mode == "multi":
        st.multiselect(t("train.gpus"), gpu_ids, format_func=gpu_names.get, key=train_form.field_key(train_type, "gpus"))
    for name in train_form.DEVICE_FIELDS:
        show_error(name)


for group, title, params in train_form.sections(train_type):
    with st.container(border=True):
        st.markdown(f"**{train_types.group_label(group, train_type)}**")
        if group == "devices":
            device_fields()
            continue
        columns = st.columns(3)
        for i, p in enumerate(params):
            with columns[i % 3]:
                field(p)

with st.container(border=True):
    st.text_input(t("train.job_name"), key=train_form.field_key(train_type, train_form.NAME_FIELD))
    show_error(train_form.NAME_FIELD)
    st.markdown(f"**{t('jobs.command')}**")
    if check.command is not None:
        st.code(check.command.display, language="bash", wrap_lines=True)
    else:
        st.warning(t("train.fix_fields"))
    for problem in check.problems:
        st.warning(md(problem), icon=":material/warning:")
    if check.problems and links.data_problem(train_type, form.get("data_path")):
        st.page_link(links.DATA_PAGE, label=t("train.data_link"), icon=":material/dataset:",
                     query_params=links.data_page_params(form["data_path"]))
    for pending in check.pending:  # a base weight that a queued or running job will write
        st.warning(md(pending.message), icon=":material/schedule:")
    for note in check.warnings:
        st.warning(md(note), icon=":material/info:")
    backend = "local" if store_problem else queue_panel.backend_choice(JobStore(), "queue.backend")
    if backend == "slurm" and check.command is not None:
        queue_panel.slurm_preview(JobStore(), train_type, train_form.job_name(form), check.command)

    chosen_guards = guards_form.fields()

    def launch(after=None):
        outcome = job_acts.launch_job(JobStore(), train_type, train_form.job_name(form), check.values,
                                      auth.session_user(state), check=check, backend=backend, after=after,
                                      guards=chosen_guards)
        if outcome.done:
            state[train_form.LAUNCHED_KEY] = outcome.value
            state[QUEUED_AFTER_KEY] = (outcome.value, outcome.message) if after is not None else None
        else:
            st.error(md_lines(outcome.message))

    with st.container(horizontal=True):
        launch_clicked = st.button(t("train.launch"), type="primary")
        after_clicked = check.after is not None and st.button(t("train.queue_after", id=check.after),
                                                              help=t("train.queue_after.help", id=check.after))
    if launch_clicked or after_clicked:
        launch(after=check.after if after_clicked else None)

    launched = state.get(train_form.LAUNCHED_KEY)
    if launched is not None:
        st.success(md(queuetext.launched_text(launched, None if store_problem else JobStore().get(launched))))
        if (state.get(QUEUED_AFTER_KEY) or (None,))[0] == launched:  # what it waits for
            st.info(state[QUEUED_AFTER_KEY][1])
        st.page_link("pages/jobs.py", label=t("train.watch"), icon=":material/list:",
                     query_params={"job": str(launched)})

    if not store_problem:  # a sweep queues its runs in the job store
        sweep_panel.form(JobStore(), train_type, check.values if check.command is not None else None,
                         auth.session_user(state), backend)

