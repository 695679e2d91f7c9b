"""The Rollouts view, drawn with Streamlit: choose a run and a step, see each group's prompt, reference
and responses side by side with their reward parts and advantage (coloured by sign), filter them,
follow one prompt across steps, and put another run's responses to the same prompt beside them.

Only drawing is here; what is shown comes from `mmcore.rlview` and `mmcore.rollouts`. Text from a run
(prompts, responses, references) is drawn with `st.code`/`st.text`: shown as it is, never rendered as
markdown or HTML.
"""
import streamlit as st

from mmcore import rlview, rollouts
from mmcore.safetext import md

RUN_KEY = "logs.rollouts.run"
STEP_KEY = "logs.rollouts.step"
WANTED_KEY = "logs.rollouts.wanted"  # a step clicked on a chart, to open next
GROUPS_SHOWN = 12
HISTORY_STEPS = 10
COLUMNS_PER_ROW = 4


def show(stored):
    """The Rollouts view of `stored`: a list of (label, run folder with a rollout store)."""
    state = st.session_state
    st.subheader("Rollouts")
    by_label = dict(stored)
    top = st.columns([2, 5])
    label = top[0].selectbox("Run", list(by_label), key=RUN_KEY) if len(by_label) > 1 else stored[0][0]
    run_dir = by_label[label]
    steps = list(rollouts.steps(run_dir)["step"])
    if not steps:
        st.info(f"{md(label)}: no step stored yet.")
        return
    wanted = state.pop(WANTED_KEY, None)
    if wanted is not None:
        state[STEP_KEY] = min(steps, key=lambda s: abs(s - wanted))  # the nearest stored step
    if state.get(STEP_KEY) not in steps:
        state[STEP_KEY] = steps[-1]
    with top[1]:
        step = steps[0] if len(steps) == 1 else st.select_slider(
            "Step", steps, key=STEP_KEY, help="Or click a point of a chart above to open its step.")
    meta = rollouts.meta(run_dir)
    if meta.get("full_at_step") is not None:
        st.caption(f"The store reached its size bound at step {meta['full_at_step']}: later responses were not kept.")
    parts = rollouts.part_names(run_dir)

    filters = st.columns([3, 2, 2, 3])
    frame = rollouts.read(run_dir, step)
    lo, hi = (float(frame["reward"].min()), float(frame["reward"].max())) if len(frame) else (0.0, 0.0)
    reward_range = None
    if hi > lo:
        reward_range = filters[0].slider("Reward range", lo, hi, (lo, hi), key=f"logs.rollouts.range.{step}")
    truncated = filters[1].selectbox("Truncated", ("all", "only", "none"), key="logs.rollouts.truncated",
                                     format_func={"all": "All responses", "only": "Only truncated",
                                                  "none": "Not truncated"}.get)
    format_failures = filters[2].checkbox("Format failures only", key="logs.rollouts.format",
                                          help="Responses without the full think/answer format.")
    text = filters[3].text_input("Search text", key="logs.rollouts.text", placeholder="in prompts, responses, references")
    groups = rlview.filtered_groups(run_dir, step, reward_range=reward_range, truncated=truncated,
                                    format_failures=format_failures, text=text)
    st.caption(f"Step {step}: {len(frame)} responses in {frame['group'].nunique() if len(frame) else 0} groups; "
               f"{sum(len(g.responses) for g in groups)} shown.")
    for g in groups[:GROUPS_SHOWN]:
        show_group(g, parts)
    if len(groups) > GROUPS_SHOWN:
        st.caption(f"{len(groups) - GROUPS_SHOWN} more groups match: narrow the filters to see them.")

    choices = rlview.prompt_choices(groups or rlview.groups_of(frame))
    if not choices:
        return
    st.markdown("**Follow a prompt across steps**")
    prompts = {f"{text} (#{pid})": pid for pid, text in choices}  # plain strings: the prompt's id keeps them apart
    pid = prompts[st.selectbox("Prompt", list(prompts), key="logs.rollouts.follow")]
    later = rollouts.query(run_dir, prompt_id=pid)
    st.dataframe(rlview.history_table(later), hide_index=True, width="stretch")
    for hstep, rows in list(later.groupby("step"))[-HISTORY_STEPS:]:
        with st.expander(f"Step {hstep}: best reward {rows['reward'].max():+.3f}", expanded=False):
            for _, r in rows.iterrows():
                st.text(f"reward {r['reward']:+.3f} · advantage {rlview.format_value(r['advantage'])}")
                st.code(r["response"], language=None, wrap_lines=True)
    others = [name for name in by_label if name != label]
    if others:
        other_label = st.selectbox("Compare with run", others, key="logs.rollouts.compare",
                                   help="Its responses to the same prompt, at this step or the last it sampled it.")
        mine = rlview.groups_of(later[later["step"] == step])
        if mine:
            ostep, theirs = rlview.same_prompt_in(by_label[other_label], mine[0].prompt, mine[0].reference, step)
            left, right = st.columns(2)
            with left:
                st.markdown(f"**{md(label)}**, step {step}")
                for _, r in mine[0].responses.iterrows():
                    response_card(r, parts)
            with right:
                if ostep is None:
                    st.info(f"{md(other_label)} never sampled this prompt.")
                else:
                    st.markdown(f"**{md(other_label)}**, step {ostep}")
                    for _, r in theirs.iterrows():
                        response_card(r, rollouts.part_names(by_label[other_label]))


def show_group(g, parts):
    """A prompt, its reference and its responses side by side; every text shown as plain text."""
    with st.container(border=True):
        note = " · all rewards equal: no learning signal" if g.rewards_equal else ""
        st.markdown(f"**Group {g.group}** · {len(g.responses)} responses{note}")
        left, right = st.columns(2)
        left.caption("Prompt")
        left.code(g.prompt, language=None, wrap_lines=True, height=120 if len(g.prompt) > 300 else "content")
        right.caption("Reference answer")
        right.code(g.reference or "(none)", language=None, wrap_lines=True,
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
    st.markdown(f":{colour}-background[advantage {rlview.format_value(adv)}] · reward {r['reward']:+.3f}")
    items = [(k, v) for k, v in rlview.response_card(r.to_dict(), parts) if k not in ("reward", "advantage")]
    st.text(" · ".join(f"{k} {rlview.format_value(v)}" for k, v in items))
    st.code(r["response"] or "(empty)", language=None, wrap_lines=True,
            height=240 if len(r["response"]) > 600 else "content")
