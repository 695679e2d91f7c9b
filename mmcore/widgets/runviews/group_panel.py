"""The Logs page's "Group runs by a parameter": chosen jobs that differ only in one parameter (a seed, by
default) drawn as one line, their mean with a min-max band (`mmcore.experiments.grouping`)."""
import streamlit as st

from mmcore.base.i18n import t
from mmcore.experiments import grouping
from mmcore.runs import metric_stream
from mmcore.train import train_types

OPEN_KEY = "logs.group_open"
METRICS = ("loss", "reward")


def section(runs):
    """The expander, built only while it is open; nothing for fewer than two jobs with records."""
    jobs = [r for r in runs if r.job is not None and r.run_dir is not None and metric_stream.has_metrics(r.run_dir)]
    if len(jobs) < 2:
        return
    box = st.expander(t("group.title"), icon=":material/stacked_line_chart:", key=OPEN_KEY, on_change="rerun")
    if not box.open:
        return
    with box:
        names = list(dict.fromkeys(n for r in jobs for n in train_types.get_type(r.job.train_type).names))
        by = st.selectbox(t("group.by"), names, index=names.index(grouping.DEFAULT_BY)
                          if grouping.DEFAULT_BY in names else 0, key="group.by", format_func=train_types.field_label)
        frames = {r.job.id: metric_stream.read(r.run_dir) for r in jobs}
        found = grouping.groups([r.job for r in jobs], by)
        st.caption(t("group.count", groups=len(found), runs=len(jobs)))
        for metric in METRICS:
            curves = [(label, grouping.band([frames[j.id] for j in members], metric)) for label, members in found]
            if any(not table.empty for _, table in curves):
                st.plotly_chart(grouping.figure(curves, metric), key=f"group.chart.{metric}")
