"""Train: pick a training type, set its parameters, check the command and launch a job."""
import sqlite3

import streamlit as st

from mmcore import auth, forms, gpu, guard, launch, navigation, queueui, registry, storeguard
from mmcore.safetext import md
from mmcore.store import JobStore

navigation.ensure_app_navigation()

state = st.session_state
gpus = gpu.list_gpus()
gpu_ids = [g.index for g in gpus]
gpu_names = {g.index: f"GPU {g.index}: {g.name}" for g in gpus}
labels = forms.type_labels()

st.title("Train")
if store_problem := storeguard.problem():
    st.error(md(store_problem))  # launching needs the job store: say so before the form is filled in

if queueui.launch_what() == "pipeline":
    if not store_problem:
        queueui.pipeline_section(JobStore(), len(gpus))
    st.stop()

cloned = forms.take_clone(state, gpu_ids)
state.setdefault(forms.TYPE_KEY, next(iter(labels)))
train_type = st.selectbox("Training type", list(labels), format_func=labels.get, key=forms.TYPE_KEY,
                          on_change=lambda: state.pop(forms.LAUNCHED_KEY, None),  # it was about the other form
                          help="Each type shows only its own parameters, filled with its script's defaults.")
if cloned:
    st.info(f"Filled from job {cloned[1]}: change what you like, then launch.")
forms.ensure_form(state, train_type, gpu_ids)


def fill(train_type, form):
    """Button callback: replace every field of a type (callbacks run before the widgets are drawn)."""
    forms.store_form(state, train_type, form)


left, right, _ = st.columns([1, 1, 3])
left.button("Demo preset", on_click=fill, args=(train_type, forms.preset_form(train_type, gpu_ids)),
            help="A tiny model on the bundled demo data (no reward model for RL): runs on a CPU in minutes.")
right.button("Reset to defaults", on_click=fill, args=(train_type, forms.initial_form(train_type, gpu_ids)),
             help="The training script's own defaults.")

# Checked before drawing, so each field can show its own message right under it.
form = forms.read_form(state, train_type)
check = forms.check_form(train_type, form, len(gpus))


def show_error(name):
    if name in check.errors:
        st.error(md(f"{registry.field_label(name, train_type)} {check.errors[name]}"), icon=":material/error:")


def field(p):
    key = forms.field_key(train_type, p.name)
    help_text = f"{p.help}. Default: {p.default_text or '(none)'}"
    if p.widget in ("select", "checkbox"):
        st.selectbox(p.label, forms.select_options(p), key=key, help=help_text)
    else:
        st.text_input(p.label, key=key, help=help_text, placeholder=p.default_text)
    if p.name == "dtype" and not gpus:
        st.caption("No NVIDIA GPU here: a CPU job trains in float32 whatever is chosen (bfloat16 and float16 "
                   "apply on CUDA only; on a CPU they would be emulated and several times slower).")
    show_error(p.name)


def device_fields():
    modes = forms.device_modes(gpu_ids)
    st.radio("Device", modes, format_func=forms.DEVICE_MODE_LABELS.get, horizontal=True,
             key=forms.field_key(train_type, "device_mode"),
             help="Several GPUs run torchrun with one process per GPU (CUDA_VISIBLE_DEVICES, --nproc_per_node).")
    mode = state[forms.field_key(train_type, "device_mode")]
    if not gpus:
        st.caption("No NVIDIA GPU found: jobs run on the CPU.")
    elif mode == "single":
        st.selectbox("GPU", gpu_ids, format_func=gpu_names.get, key=forms.field_key(train_type, "gpu"))
    elif mode == "multi":
        st.multiselect("GPUs", gpu_ids, format_func=gpu_names.get, key=forms.field_key(train_type, "gpus"))
    for name in forms.DEVICE_FIELDS:
        show_error(name)


for group, title, params in forms.sections(train_type):
    with st.container(border=True):
        st.markdown(f"**{title}**")
        if group == "devices":
            device_fields()
            continue
        columns = st.columns(3)
        for i, p in enumerate(params):
            with columns[i % 3]:
                field(p)

with st.container(border=True):
    st.text_input("Job name", key=forms.field_key(train_type, forms.NAME_FIELD))
    show_error(forms.NAME_FIELD)
    st.markdown("**Command**")
    if check.command is not None:
        st.code(check.command.display, language="bash", wrap_lines=True)
    else:
        st.warning("Fix the fields marked above to see the command.")
    for problem in check.problems:
        st.warning(md(problem), icon=":material/warning:")
    for note in check.warnings:
        st.warning(md(note), icon=":material/info:")
    backend = "local" if store_problem else queueui.backend_choice(JobStore(), "queue.backend")
    if backend == "slurm" and check.command is not None:
        queueui.slurm_preview(JobStore(), train_type, forms.job_name(form), check.command)

    if st.button("Launch", type="primary"):
        try:
            job_id = guard.start(JobStore(), forms.job_name(form), check, auth.session_user(state), backend=backend)
        except launch.LaunchRefused as exc:
            st.error("Launch refused:\n" + "\n".join(f"- {md(reason)}" for reason in exc.reasons))
        except (OSError, ValueError, KeyError, RuntimeError, sqlite3.Error) as exc:  # store or process start failed
            st.error(f"Could not launch the job: {md(exc)}")
        else:
            state[forms.LAUNCHED_KEY] = job_id

    launched = state.get(forms.LAUNCHED_KEY)
    if launched is not None:
        st.success(f"Launched job {launched}.")
        st.page_link("pages/jobs.py", label="Watch it on Jobs", icon=":material/list:",
                     query_params={"job": str(launched)})

