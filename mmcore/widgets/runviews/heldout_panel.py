"""The Logs page's held-out view of RL runs: the training reward and every held-out signal (held-out
evaluation, rescores) on one chart of steps, and the per-prompt table (`mmcore.runs.prompt_record`),
sortable, a chosen prompt's groups across steps below it. Drawing only: what is shown comes from
`mmcore.runs.heldout_view`, `prompt_record`, `metric_stream`, `rollout_store` and `rlview`."""
import os

import streamlit as st

from mmcore.actions import run_acts
from mmcore.base.i18n import t
from mmcore.jobs import run_selection
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import heldout_view, metric_stream, prompt_record, rlview, rollout_store
from mmcore.widgets import queued_note

RUN_KEY = "logs.heldout.run"
TABLE_KEY = "logs.prompts.table"


REWARDS = ("rule", "format", "model")  # what the page offers; admin-trusted functions: `python -m mmcore rescore`
OUTCOME_KEY = "logs.rescore.outcome"  # this session's last Rescore click (`queued_note`)


def show(runs, user=None, home=None):
    """The held-out chart, a rescore of the stored responses and the per-prompt table of the chosen runs
    that keep rollouts."""
    stored = run_selection.with_rollouts(runs)
    if stored:
        st.fragment(_show)(stored, user, home)


def rescore_control(run_dir, user, home):
    """Queue a rescore of the run's stored responses (the act `run_acts.queue_rescore`): "Queued as job N" with
    a link to it on Jobs, where its progress shows."""
    why = run_acts.rescore_refusal(user)
    columns = st.columns([2, 2, 1], vertical_alignment="bottom")
    reward = columns[0].selectbox(t("logs.rescore.reward"), REWARDS, key="logs.rescore.reward",
                                  format_func=lambda r: t(f"logs.rescore.reward.{r}"))
    shown = reward
    if reward == "model":
        reward = st.text_input(t("logs.rescore.folder"), key="logs.rescore.folder", help=t("logs.rescore.folder.help"))
        shown = os.path.basename(reward.strip().rstrip("/")) or None  # the name a folder is recorded under
    name = columns[1].text_input(t("logs.rescore.name"), key="logs.rescore.name", placeholder=shown)
    if columns[2].button(t("logs.rescore.go"), key="logs.rescore.go", disabled=bool(why),
                         help=why or t("logs.rescore.help")):
        outcome = run_acts.queue_rescore(JobStore(home), run_dir, reward, name=name.strip() or None, user=user)
        queued_note.remember(OUTCOME_KEY, outcome, outcome.value)
    queued_note.show(OUTCOME_KEY)


def _show(stored, user, home):
    by_label = dict(stored)
    label = st.selectbox(t("logs.run"), list(by_label), key=RUN_KEY) if len(by_label) > 1 else stored[0][0]
    run_dir = by_label[label]
    df = metric_stream.read(run_dir)
    if heldout_view.has_held_out(df):
        st.subheader(t("logs.heldout"))
        st.plotly_chart(heldout_view.figure(df), width="stretch", key="logs.heldout.chart")
        st.caption(t("logs.heldout.help"))
    rescore_control(run_dir, user, home)
    st.subheader(t("logs.prompts"))
    table = prompt_record.prompts(run_dir)
    if not len(table):
        st.caption(t("logs.prompts.none"))
        return
    shown = heldout_view.prompt_rows(table)
    picked = st.dataframe(shown, hide_index=True, width="stretch", key=TABLE_KEY, on_select="rerun",
                          selection_mode="single-row", column_config={
                              name: st.column_config.Column(t(f"logs.prompts.col.{name}"),
                                                            width="large" if name == "prompt" else None)
                              for name in shown.columns})
    st.caption(t("logs.prompts.help", flagged=int(table["no_advantage"].sum()), total=len(table)))
    rows = picked.selection.rows if picked is not None else []
    if rows:
        pid = int(table.iloc[rows[0]]["prompt_id"])
        st.markdown(f"**{t('logs.prompts.groups', id=pid)}**")
        st.dataframe(rlview.history_table(rollout_store.query(run_dir, prompt_id=pid)), hide_index=True, width="stretch")
