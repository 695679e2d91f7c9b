"""The Runs page's pieces: the runs table (search, a column filter, sort, CSV), the diff of chosen runs with
their curves overlaid, and a run's tags and note."""
import streamlit as st

from mmcore.actions import core, experiment_acts
from mmcore.base.i18n import MessageError, t
from mmcore.base.safetext import md
from mmcore.experiments import rundiff, runtable
from mmcore.logs import charts
from mmcore.runs import metric_stream, summary_worker

CURVE_METRICS = ("loss", "reward")


def column_label(column):
    """A table column's heading: a parameter's own name, a result's label in the viewer's language."""
    if column.startswith(runtable.PARAM_PREFIX):
        return column[len(runtable.PARAM_PREFIX):]
    key = f"runs.col.{column}"
    return t(key) if not column.startswith("eval/") else column


def reading(store, pending):
    """While a background worker reads the results of the runs in `pending` (ids), how many are left; a
    fragment that redraws itself every second and reruns the page when they are all kept."""
    if not pending:
        return

    @st.fragment(run_every=1.0)
    def left():
        n = summary_worker.left(store.path)
        if not n:
            st.rerun()
        st.caption(t("runs.reading", n=n))
    left()


def table(runs, pending=()):
    """The runs table with its search, filter and sort controls; returns the rows shown (a DataFrame).
    `pending`: the ids of the runs whose results are still being read (marked in the table)."""
    all_params = st.checkbox(t("runs.all_params"), key="runs.all_params", help=t("runs.all_params.help"))
    df = runtable.frame(runs, all_params=all_params, pending=pending)
    controls = st.columns([3, 2, 2, 2, 1])
    text = controls[0].text_input(t("runs.search"), key="runs.search", placeholder=t("runs.search.placeholder"))
    columns = list(df.columns)
    filter_column = controls[1].selectbox(t("runs.filter_column"), columns, key="runs.filter_column",
                                          format_func=column_label)
    expression = controls[2].text_input(t("runs.filter_value"), key="runs.filter_value",
                                        help=t("runs.filter_value.help"))
    sort_by = controls[3].selectbox(t("runs.sort_by"), columns, key="runs.sort_by", format_func=column_label)
    descending = controls[4].checkbox(t("runs.descending"), key="runs.descending", value=True)
    shown = runtable.search(df, text)
    try:
        shown = runtable.filter_column(shown, filter_column, expression)
        shown = runtable.sort(shown, sort_by, descending)
    except MessageError as exc:
        st.error(md(exc))
    st.caption(t("runs.count", shown=len(shown), total=len(df)))
    st.dataframe(shown.rename(columns={c: column_label(c) for c in shown.columns}), hide_index=True,
                 width="stretch", key="runs.table")
    st.download_button(t("runs.csv"), runtable.csv(shown), file_name="runs.csv", mime="text/csv", key="runs.csv")
    return shown


def _curves(store, found):
    """The runs' loss and reward curves, overlaid (one chart per metric that any of them recorded)."""
    tables = []
    for run in found["runs"]:
        job = store.get(run["id"])
        df = metric_stream.read(metric_stream.job_run_dir(job, store.home)) if job else None
        if df is not None and len(df):
            tables.append((f"{run['id']} · {run['name']}", df))
    drawn = False
    for metric in CURVE_METRICS:
        if any(metric in df.columns for _, df in tables):
            st.plotly_chart(charts.metric_figure(metric, tables, smoothing=0), width="stretch",
                            key=f"runs.diff.curve.{metric}")
            drawn = True
    if not drawn:
        st.caption(t("runs.diff.no_curves"))


def diff(store, runs):
    """Choose 2 to 8 runs: what differs between them (parameters, data files, code), their results, their curves."""
    labels = {r["id"]: f"{r['id']} · {r['name']}" + (f" [{', '.join(r['tags'])}]" if r["tags"] else "")
              for r in runs}
    chosen = st.multiselect(t("runs.diff.pick"), list(labels), format_func=labels.get, key="runs.diff.pick",
                            max_selections=rundiff.MAX_RUNS, placeholder=t("runs.diff.pick.placeholder"))
    if len(chosen) < rundiff.MIN_RUNS:
        st.caption(t("runs.diff_count", low=rundiff.MIN_RUNS, high=rundiff.MAX_RUNS))
        return
    only = st.toggle(t("runs.diff.only"), value=True, key="runs.diff.only")
    try:
        found = rundiff.diff(store, chosen, only_differences=only, hash_wait_s=rundiff.HASH_WAIT_S)
    except MessageError as exc:
        st.error(md(exc))
        return
    heads = [f"{r['id']} · {r['name']}" for r in found["runs"]]
    import pandas as pd  # (the page has it loaded already through the table)

    if found["params"]:
        st.markdown(f"**{t('runs.diff.params')}**")
        st.dataframe(pd.DataFrame(found["params"], index=heads).T, width="stretch", key="runs.diff.params")
    else:
        st.info(t("runs.diff.same_params"))
    rows = {}
    for item in found["data"]:
        for f in item["files"]:
            rows.setdefault(f"{f['param']}: {t('runs.diff.path')}", []).append(f["path"])
            rows.setdefault(f"{f['param']}: {t('runs.diff.size')}", []).append(f["size"])
            rows.setdefault(f"{f['param']}: SHA-256", []).append(t("runs.diff.hashing") if f["hashing"]
                                                                  else (f["sha256"] or "")[:16])
    rows[t("runs.diff.code")] = [(c["commit"] or t("runs.diff.unknown"))[:12]
                                 + (" " + t("runs.diff.dirty") if c["dirty"] else "") for c in found["code"]]
    st.markdown(f"**{t('runs.diff.identity')}**")
    st.dataframe(pd.DataFrame({k: [str("" if v is None else v) for v in vs] for k, vs in rows.items()},
                              index=heads).T, width="stretch", key="runs.diff.identity")
    st.markdown(f"**{t('runs.diff.results')}**")
    st.dataframe(pd.DataFrame(found["results"], index=heads).T.rename(index=column_label), width="stretch",
                 key="runs.diff.results")
    _curves(store, found)


def tags_caption(store, job_id):
    """A run's tags and note as a caption, where a run is named outside the Runs page (nothing when it has none)."""
    from mmcore.experiments.annotations import Annotations

    kept = Annotations.peek(store.path, job_id)
    if kept["tags"] or kept["note"]:
        st.caption(md(t("runs.tagged", tags=", ".join(kept["tags"]) or "-", note=kept["note"] or "-")))


def annotations(store, runs, user):
    """Tags and note of one run: shown to all, changed by its owner or an admin (an audited act)."""
    labels = {r["id"]: f"{r['id']} · {r['name']}" for r in runs}
    run_id = st.selectbox(t("runs.note.pick"), list(labels), format_func=labels.get, key="runs.note.pick")
    if run_id is None:
        return
    run = next(r for r in runs if r["id"] == run_id)
    why = core.refusal(user, "annotate", owner=run["owner"], subject=run_id)
    with st.form(f"runs.note.form.{run_id}"):
        tags = st.text_input(t("runs.tags"), ", ".join(run["tags"]), help=t("runs.tags.help"), disabled=bool(why))
        note = st.text_area(t("runs.note"), run["note"], disabled=bool(why))
        saved = st.form_submit_button(t("runs.note.save"), disabled=bool(why), help=why or None)
    if why:
        st.caption(why)
    if saved:
        outcome = experiment_acts.annotate(store, run_id, user, tags=tags, note=note)
        if outcome.refused:
            st.error(md(outcome.message))
        else:
            st.success(outcome.message)
            st.rerun()


def notifications(store, user):
    """The viewer's choice of their runs' events that reach them; for admins, the deliveries that failed."""
    from mmcore.actions import experiment_acts as acts
    from mmcore.jobs import notify

    with st.expander(t("notify.title"), icon=":material/notifications:"):
        try:
            config = notify.load_config(store.home)
        except notify.NotifyConfigError as exc:
            st.error(md(exc))
            config = None
        current = notify.prefs(store.path, core.acting(user), config)
        if config is not None and not config["webhooks"] and not config["smtp"]:
            st.caption(t("notify.unconfigured"))
        with st.form("notify.form", border=False):
            events = st.multiselect(t("notify.events"), notify.EVENTS, default=current["events"],
                                    format_func=lambda e: t(f"notify.event.{e}"), key="notify.events")
            email = st.text_input(t("notify.email"), current["email"], key="notify.email")
            saved = st.form_submit_button(t("notify.save"))
        if saved:
            outcome = acts.set_notifications(store, events, email, user)
            (st.error if outcome.refused else st.success)(md(outcome.message))
        if core.role(user) == "admin":
            failed = notify.failures(store.path)
            if failed:
                st.warning(t("notify.failures", n=len(failed)))
                st.dataframe(failed, hide_index=True, width="stretch", key="notify.failed")
