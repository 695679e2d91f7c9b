"""MiniMind Train Dashboard: `streamlit run streamlit_app.py`.

The entry point: page setup, navigation over pages/, and a sidebar with the GPUs, the number of
active jobs and who is using the dashboard. Nothing to set up first: the job store (SQLite) and its
folders are created on first use. The dashboard never imports torch; trainers run as child processes.
"""
import streamlit as st

from mmcore import gpu, jobtable, navigation
from mmcore.store import JobStore

st.set_page_config(page_title="MiniMind Train Dashboard", page_icon="🧠", layout="wide")
navigation.mark_entry(st.session_state)

page = st.navigation([
    st.Page("pages/train.py", title="Train", icon=":material/model_training:", default=True),
    st.Page("pages/jobs.py", title="Jobs", icon=":material/list:"),
    st.Page("pages/logs.py", title="Logs", icon=":material/monitoring:"),
])


@st.fragment(run_every=5)
def status_panel():
    """GPUs and job counts, refreshed every few seconds without rerunning the page."""
    gpus = gpu.list_gpus()
    st.markdown("**GPUs**")
    if gpus:
        for g in gpus:
            st.caption(jobtable.gpu_line(g))
            st.progress(min(1.0, g.memory_fraction))
    else:
        st.caption("CPU only: no NVIDIA GPU found.")
    try:
        counts = JobStore().counts()
    except Exception as exc:  # a broken or locked database must not take the navigation down with it
        st.error(f"Job store unavailable: {exc}")
    else:
        st.markdown(f"**Jobs** · {counts['running']} running · {counts['queued']} queued")


page.run()

# Drawn after the page, so a job the page just launched or stopped is already counted.
with st.sidebar:
    st.markdown("### MiniMind Train Dashboard")
    status_panel()
    st.caption(f"Running as {jobtable.whoami()}")
