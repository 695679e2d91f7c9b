"""Sweeps on the pages: the Train page's "A sweep" (what varies, the run count and total estimated time before
anything is queued, the runs' queue priority) and the Runs page's sweep view (its runs, a parallel-coordinates
chart, the best run)."""
import streamlit as st

from mmcore.actions import core, experiment_acts
from mmcore.base.i18n import MessageError, t
from mmcore.base.safetext import md, md_lines
from mmcore.experiments import runtable, sweepchart, sweeps
from mmcore.train import train_types

PICK_KEY = "sweep.params"
OPEN_KEY = "sweep.open"  # the expander: its fields are built only while it is open
PRIORITY_KEY = "sweep.priority"  # the queue priority of every run of the sweep


def _spec(train_type, base, chosen, state):
    grid, ranges = {}, {}
    for name in chosen:
        text = str(state.get(f"sweep.values.{name}") or "").strip()
        if ":" in text and "," not in text:
            low, _, high = text.partition(":")
            ranges[name] = (low.strip(), high.strip())
        else:
            grid[name] = [v.strip() for v in text.split(",")] if text else []
    return sweeps.SweepSpec(train_type, base=dict(base), grid=grid, random=ranges,
                            trials=int(state.get("sweep.trials") or 1), seeds=int(state.get("sweep.seeds") or 1))


def _duration(seconds):
    minutes = seconds / 60
    return f"{minutes / 60:.1f} h" if minutes >= 90 else f"{max(1, round(minutes))} min"


def form(store, train_type, base, user, backend=None):
    """The Train page's "A sweep" expander over the form's values `base` (None while the form has errors); its
    fields are built only while it is open (a fresh Train page draws none of them)."""
    box = st.expander(t("sweep.title"), icon=":material/grid_view:", key=OPEN_KEY, on_change="rerun")
    if not box.open:
        return
    with box:
        st.caption(t("sweep.intro"))
        names = [n for n in train_types.get_type(train_type).names if n not in ("device", "train_monitor")]
        chosen = st.multiselect(t("sweep.params"), names, key=PICK_KEY, format_func=train_types.field_label)
        for name in chosen:
            st.text_input(t("sweep.values", name=train_types.field_label(name)), key=f"sweep.values.{name}")
        left, middle, right = st.columns(3)
        left.number_input(t("sweep.trials"), min_value=1, max_value=sweeps.MAX_RUNS, value=1, step=1,
                          key="sweep.trials")
        middle.number_input(t("sweep.seeds"), min_value=1, max_value=32, value=1, step=1, key="sweep.seeds")
        no_priority = core.refusal(user, "priority")  # priorities are an admin's
        right.number_input(t("queue.priority"), min_value=-1000, max_value=1000, value=0, step=1,
                           key=PRIORITY_KEY, disabled=bool(no_priority),
                           help=md(no_priority) if no_priority else t("sweep.priority.help"))
        if base is None:
            st.warning(t("train.fix_fields"))
            return
        spec = _spec(train_type, base, chosen, st.session_state)
        problems = sweeps.check(spec) if chosen or spec.seeds > 1 else [t("sweep.params")]
        n = sweeps.count(spec)
        estimate = sweeps.estimate_s(store, train_type, n)
        said = t("sweep.estimate", n=n, time=_duration(estimate)) if estimate else t("sweep.estimate_unknown", n=n)
        st.markdown(f"**{said}**")
        if problems and (chosen or spec.seeds > 1):
            st.warning(md(MessageError(problems)))
        why = core.refusal(user, "launch")
        if st.button(t("sweep.launch"), key="sweep.launch", disabled=bool(problems) or bool(why), help=why or None):
            priority = None if no_priority else int(st.session_state.get(PRIORITY_KEY) or 0)
            outcome = experiment_acts.queue_sweep(store, spec, name=None, user=user, backend=backend,
                                                  priority=priority)
            (st.error if outcome.refused else st.success)(md_lines(outcome.message))


def view(store, user):
    """The Runs page's sweep view: a sweep's runs, the parallel-coordinates chart of parameters -> a metric,
    its best run, and Stop all."""
    kept = sweeps.SweepStore(store.path).list()
    if not kept:
        st.info(t("sweep.intro"))
        return
    labels = {s["id"]: t("sweep.label", id=s["id"], name=s["name"] or s["train_type"], n=len(s["jobs"])) for s in kept}
    sweep_id = st.selectbox(t("sweep.pick"), list(labels), format_func=labels.get, key="sweep.pick")
    found = next(s for s in kept if s["id"] == sweep_id)
    runs = sweeps.sweep_runs(store, sweep_id)
    if not runs:
        return
    metrics = [k for k in runtable.frame(runs).columns if k in ("final_loss", "best_loss", "final_reward")
               or k.startswith("eval/")]
    metric = st.selectbox(t("sweep.metric"), metrics, key="sweep.metric")
    st.dataframe(runtable.frame(runs), hide_index=True, width="stretch", key="sweep.table")
    st.plotly_chart(sweepchart.parcoords(runs, metric), key="sweep.parcoords")
    best = sweeps.best_run(runs, metric)
    if best is None:
        st.caption(t("sweep.no_best", metric=metric))
    else:
        st.success(t("sweep.best", id=best["id"], name=best["name"], metric=metric,
                     value=f"{best['results'][metric]:.4g}"))
    stop_col, retry_col = st.columns(2)
    why = core.refusal(user, "stop", owner=found["user"], subject=sweep_id)
    if stop_col.button(t("sweep.stop_all"), key="sweep.stop_all", disabled=bool(why) or not any(
            r["status"] in ("queued", "running") for r in runs), help=why or None):
        outcome = experiment_acts.stop_sweep(store, sweep_id, user)
        (st.error if outcome.refused else st.info)(md_lines(outcome.message))
    why = core.refusal(user, "retry", owner=found["user"], subject=sweep_id)
    if retry_col.button(t("sweep.retry_failed"), key="sweep.retry_failed", disabled=bool(why) or not any(
            r["status"] in ("failed", "stopped", "lost") for r in runs), help=why or None):
        outcome = experiment_acts.retry_sweep(store, sweep_id, user)
        (st.error if outcome.refused else st.success)(md_lines(outcome.message))
