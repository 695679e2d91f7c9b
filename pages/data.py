"""Data: see, check and size a training file before a job spends hours on it. Format and health (the
trainers' own validation, duplicates, empty answers, role order, DPO pairs, reasoning tags), rows as the
trainer sees them (the loss mask token by token), token lengths against max_seq_len and steps per epoch,
and "Train on this file". The full scan runs in a background worker, cached and shared by all sessions."""
import streamlit as st

from dataset.formats import KIND_OF_TYPE
from mmcore.base.i18n import t
from mmcore.base.paths import default_home
from mmcore.base.safetext import md
from mmcore.data import checkup, scans, sources
from mmcore.widgets import data_panels, navigation

navigation.ensure_app_navigation()

home = default_home()
st.title(t("data.title"))
st.caption(t("data.intro"))

chosen = data_panels.choose_file(home, st.query_params)
if chosen is None:
    st.info(t("data.choose"))
    st.stop()
try:
    path = sources.check(chosen, home, base=sources.ROOT, upload_folders=data_panels.visible_uploads(home))
    detected = checkup.detect_file_kind(path)  # the first rows: fast on any size
except (sources.DataFileError, OSError) as exc:
    st.error(md(exc))
    st.stop()
if detected is None:
    st.error(md(t("data.err.no_kind", path=path)))

train_type, max_seq_len, tokenizer = data_panels.settings(path, detected or "sft")
kind = KIND_OF_TYPE[train_type]
if problem := data_panels.tokenizer_problem(tokenizer, home):
    st.error(md(problem))
    st.stop()

key = scans.start(path, kind, home, tokenizer)  # returns at once; a worker scans (or the cache has it)
state = data_panels.progress(home, key, lambda: scans.start(path, kind, home, tokenizer, retry=True))

health_tab, rows_tab, size_tab = st.tabs([t("data.tab.health"), t("data.tab.rows"), t("data.tab.size")])
link_box = st.container(border=True)
# The row view may wait for the data worker's first start: everything else is drawn before it.
with health_tab:
    data_panels.health_panel(state, train_type, detected, path)
with size_tab:
    data_panels.size_panel(state, train_type, max_seq_len)
with link_box:
    data_panels.train_link(path, train_type, max_seq_len, state)
with rows_tab:
    data_panels.row_panel(path, kind, max_seq_len, tokenizer, home)
