"""The Rollouts view, drawn with Streamlit: choose a run and a step, see each group's prompt, reference
and responses side by side with their reward parts and advantage (coloured by sign), filter them,
follow one prompt across steps, and put another run's responses to the same prompt beside them.

Only drawing is here; what is shown comes from `mmcore.runs.rlview` and `mmcore.runs.rollout_store`. Text from a run
(prompts, responses, references) is drawn with `st.code`/`st.text`: shown as it is, never rendered as
markdown or HTML.
"""
import streamlit as st

from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.runs import gainers, rlview, rollout_store

RUN_KEY = "logs.rollouts.run"
STEP_KEY = "logs.rollouts.step"
WANTED_KEY = "logs.rollouts.wanted"  # a step clicked on a chart, to open next
GROUPS_SHOWN = 12
HISTORY_STEPS = 10
ANCHOR = "rollouts"  # the heading's anchor: Logs links to it from the top of the page
COLUMNS_PER_ROW = 4
GAINERS_KEY = "logs.rollouts.gainers"  # (run label, since step): the view opens on a reward-hacking finding's gainers
GAINERS_APPLIED_KEY = "logs.rollouts.gainers_applied"  # the query it came from (applied once per link)
GAINERS_SHOWN = 8


def apply_link(query, labels):
    """Open the view on the gainers a link asks for (`gainers.requested`), once per link: the run it names
    (a label of `labels`, else the first run) is chosen. Returns the request, or None."""
    state = st.session_state
    asked = gainers.requested(query)
    if asked is None or state.get(GAINERS_APPLIED_KEY) == asked:
        return state.get(GAINERS_KEY)
    state[GAINERS_APPLIED_KEY] = asked
    label = asked[0] if asked[0] in labels else labels[0]
    state[GAINERS_KEY] = (label, asked[1])
    state[RUN_KEY] = label
    return state[GAINERS_KEY]


def show_gainers(label, run_dir, since_step, parts):
    """The responses that gained the most training reward and the least held-out score (`gainers.gainers`),
    each with its prompt and reference; a button goes back to every response."""
    top = gainers.gainers(run_dir, since_step)
    with st.container(border=True, key="logs.rollouts.gainers_box"):
        st.markdown(f"**{t('logs.gainers', run=md(label))}**")
        st.caption(t("logs.gainers.help", step=since_step if since_step is not None else 0,
                     signal=top.attrs.get("held_out", "rule"), n=len(top)))
        if st.button(t("logs.gainers.all"), key="logs.rollouts.gainers_all", icon=":material/close:"):
            st.session_state.pop(GAINERS_KEY, None)
            st.rerun(scope="fragment")
        if not len(top):
            st.info(t("logs.gainers.none"))
            return
        st.dataframe(top[["step", "group", "sample", "reward", "gain", "held_out", "held_out_gain", "response"]],
                     hide_index=True, width="stretch", key="logs.rollouts.gainers_table",
                     column_config={c: st.column_config.Column(t(f"logs.gainers.col.{c}"))
                                    for c in ("gain", "held_out", "held_out_gain")})
        for _, r in top.head(GAINERS_SHOWN).iterrows():
            with st.container(border=True):
                st.caption(t("logs.gainers.card", step=r["step"], group=r["group"], gain=f"{r['gain']:+.3f}",
                             held=rlview.format_value(r["held_out"])))
                left, right = st.columns(2)
                left.code(r["prompt"], language=None, wrap_lines=True,
                          height=120 if len(r["prompt"]) > 300 else "content")
                right.code(r["reference"] or t("logs.no_reference"), language=None, wrap_lines=True)
                response_card(r, parts)


def show(stored):
    """The Rollouts view of `stored`: a list of (label, run folder with a rollout store)."""
    state = st.session_state
    st.subheader(t("logs.rollouts"), anchor=ANCHOR)
    by_label = dict(stored)
    top = st.columns([2, 5])
    focus = apply_link(st.query_params, list(by_label))
    label = top[0].selectbox(t("logs.run"), list(by_label), key=RUN_KEY) if len(by_label) > 1 else stored[0][0]
    run_dir = by_label[label]
    if focus is not None and focus[0] == label:
        show_gainers(label, run_dir, focus[1], rollout_store.part_names(run_dir))
    steps = list(rollout_store.steps(run_dir)["step"])
    if not steps:
        st.info(t("logs.no_step_yet", run=md(label)))
        return
    wanted = state.pop(WANTED_KEY, None)
    if wanted is not None:
        state[STEP_KEY] = min(steps, key=lambda s: abs(s - wanted))  # the nearest stored step
    if state.get(STEP_KEY) not in steps:
        state[STEP_KEY] = steps[-1]
    with top[1]:
        step = steps[0] if len(steps) == 1 else st.select_slider(
            t("logs.step"), steps, key=STEP_KEY, help=t("logs.step.help"))
    meta = rollout_store.meta(run_dir)
    if meta.get("full_at_step") is not None:
        st.caption(t("logs.store_full", step=meta["full_at_step"]))
    parts = rollout_store.part_names(run_dir)

    filters = st.columns([3, 2, 2, 3])
    frame = rollout_store.read(run_dir, step)
    lo, hi = (float(frame["reward"].min()), float(frame["reward"].max())) if len(frame) else (0.0, 0.0)
    reward_range = None
    if hi > lo:
        reward_range = filters[0].slider(t("logs.reward_range"), lo, hi, (lo, hi), key=f"logs.rollouts.range.{step}")
    i18n.relabel(st.session_state, "logs.rollouts.truncated")
    truncated = filters[1].selectbox(t("logs.truncated"), ("all", "only", "none"), key="logs.rollouts.truncated",
                                     format_func=lambda v: t(f"logs.truncated.{v}"))
    format_failures = filters[2].checkbox(t("logs.format_failures"), key="logs.rollouts.format",
                                          help=t("logs.format_failures.help"))
    text = filters[3].text_input(t("logs.search"), key="logs.rollouts.text", placeholder=t("logs.search.placeholder"))
    groups = rlview.filtered_groups(run_dir, step, reward_range=reward_range, truncated=truncated,
                                    format_failures=format_failures, text=text)
    st.caption(t("logs.step_summary", step=step, responses=len(frame), groups=frame["group"].nunique() if len(frame) else 0,
                 shown=sum(len(g.responses) for g in groups)))
    for g in groups[:GROUPS_SHOWN]:
        show_group(g, parts)
    if len(groups) > GROUPS_SHOWN:
        st.caption(t("logs.more_groups", n=len(groups) - GROUPS_SHOWN))

    choices = rlview.prompt_choices(groups or rlview.groups_of(frame))
    if not choices:
        return
    st.markdown(f"**{t('logs.follow_prompt')}**")
    prompts = {f"{text} (#{pid})": pid for pid, text in choices}  # plain strings: the prompt's id keeps them apart
    pid = prompts[st.selectbox(t("logs.prompt"), list(prompts), key="logs.rollouts.follow")]
    later = rollout_store.query(run_dir, prompt_id=pid)
    history = rlview.history_table(later)
    st.dataframe(history, hide_index=True, width="stretch",
                 column_config={c: st.column_config.Column(t(f"logs.history.{c}")) for c in history.columns})
    for hstep, rows in list(later.groupby("step"))[-HISTORY_STEPS:]:
        with st.expander(t("logs.best_reward", step=hstep, reward=f"{rows['reward'].max():+.3f}"), expanded=False):
            for _, r in rows.iterrows():
                st.text(t("logs.reward_advantage", reward=f"{r['reward']:+.3f}", advantage=rlview.format_value(r["advantage"])))
                st.code(r["response"], language=None, wrap_lines=True)
    others = [name for name in by_label if name != label]
    if others:
        other_label = st.selectbox(t("logs.compare_run"), others, key="logs.rollouts.compare",
                                   help=t("logs.compare_run.help"))
        mine = rlview.groups_of(later[later["step"] == step])
        if mine:
            ostep, theirs = rlview.same_prompt_in(by_label[other_label], mine[0].prompt, mine[0].reference, step)
            left, right = st.columns(2)
            with left:
                st.markdown(t("logs.run_step", run=md(label), step=step))
                for _, r in mine[0].responses.iterrows():
                    response_card(r, parts)
            with right:
                if ostep is None:
                    st.info(t("logs.never_sampled", run=md(other_label)))
                else:
                    st.markdown(t("logs.run_step", run=md(other_label), step=ostep))
                    for _, r in theirs.iterrows():
                        response_card(r, rollout_store.part_names(by_label[other_label]))


def show_group(g, parts):
    """A prompt, its reference and its responses side by side; every text shown as plain text."""
    with st.container(border=True):
        note = t("logs.rewards_equal") if g.rewards_equal else ""
        st.markdown(t("logs.group", group=g.group, n=len(g.responses)) + note)
        left, right = st.columns(2)
        left.caption(t("logs.prompt"))
        left.code(g.prompt, language=None, wrap_lines=True, height=120 if len(g.prompt) > 300 else "content")
        right.caption(t("logs.reference"))
        right.code(g.reference or t("logs.no_reference"), language=None, wrap_lines=True,
                   height=120 if len(g.reference) > 300 else "content")
        rows = list(g.responses.iterrows())
        for start in range(0, len(rows), COLUMNS_PER_ROW):
            cols = st.columns(COLUMNS_PER_ROW)
            for col, (_, r) in zip(cols, rows[start:start + COLUMNS_PER_ROW]):
                with col:
                    response_card(r, parts)


def response_card(r, parts):
    """One response: advantage badge (coloured by sign), reward parts, then its text."""
    adv = r["advantage"]
    colour = rlview.advantage_colour(adv)
    st.markdown(f":{colour}-background[{t('logs.advantage', value=rlview.format_value(adv))}] · "
                + t("logs.reward_value", value=f"{r['reward']:+.3f}"))
    items = [(k, v) for k, v in rlview.response_card(r.to_dict(), parts) if k not in ("reward", "advantage")]
    st.text(" · ".join(f"{k} {rlview.format_value(v)}" for k, v in items))
    st.code(r["response"] or t("logs.empty_response"), language=None, wrap_lines=True,
            height=240 if len(r["response"]) > 600 else "content")
