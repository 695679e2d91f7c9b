"""The Models page's fields and result panels, drawn with Streamlit: replies (their `<think>` part
folded), the sampling settings, the prompts file, the reward model, and the results of a comparison
and of evaluations.

Model output is user data: it is shown as plain text (`st.text`), never as markdown or HTML. What the
fields mean and how typed paths are checked is `mmcore.models.modelsview`'s.
"""
import pandas as pd
import streamlit as st

from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.models import chat_client, modelsview


def show_reply(text, streaming=False):
    """A reply as plain text, its `<think>` part folded."""
    thought, answer = chat_client.split_think(text)
    if thought is not None:
        with st.expander(t("models.thinking") if streaming and not answer else t("models.thought"), expanded=streaming and not answer):
            st.text(thought)
    if answer or thought is None:
        st.text(answer)


def prompt_file(prefix):
    """The data-file and prompt-count widgets -> (path or None, count, problem or None)."""
    cols = st.columns([3, 1])
    data_path = cols[0].text_input(t("models.data_file"),
                                   "dataset/demo/rlaif.jsonl", key=f"{prefix}.data")
    count = cols[1].number_input(t("models.prompt_count"), 1, 1000, 5, key=f"{prefix}.count")
    path, problem = modelsview.data_file(data_path)
    return path, int(count), problem


def reward_model_field(prefix):
    """An optional reward-model folder -> (absolute path or None, problem or None): inside the read roots,
    a transformers model, and its own code only where an admin allowed it."""
    folder = st.text_input(t("models.reward_model"), key=f"{prefix}.reward_model",
                           placeholder=t("models.reward_model.placeholder"), help=t("models.reward_model.help"))
    path, problem = modelsview.reward_model_folder(folder)
    return path, problem and md(problem)


def sampling_settings(prefix, target=None, greedy=False):
    """The sampling widgets shared by Chat and Compare; returns the request settings."""
    state = st.session_state
    cols = st.columns(5)
    temperature = cols[0].slider(t("models.temperature"), 0.0, 2.0, 0.0 if greedy else 0.85, 0.05, key=f"{prefix}.temperature",
                                 help=t("models.temperature.help"))
    top_p = cols[1].slider("Top-p", 0.05, 1.0, 0.85, 0.05, key=f"{prefix}.top_p")
    max_new = cols[2].number_input(t("models.max_new"), 1, 8192, 512, key=f"{prefix}.max_new_tokens")
    seed = cols[3].number_input(t("models.seed"), 0, 2**31 - 1, 0, key=f"{prefix}.seed")
    default = target is None or modelsview.default_reasoning(target)
    if target is not None and state.get(f"{prefix}.reasoning_for") != target.label:
        state[f"{prefix}.reasoning"] = default  # a newly chosen checkpoint starts with its own default
        state[f"{prefix}.reasoning_for"] = target.label
    reasoning = cols[4].toggle(t("models.reasoning"), value=default, key=f"{prefix}.reasoning",
                               help=t("models.reasoning.help"))
    system = st.text_input(t("models.system"), key=f"{prefix}.system", placeholder=t("models.system.placeholder"))
    return {"temperature": temperature, "top_p": top_p, "max_new_tokens": int(max_new), "seed": int(seed),
            "reasoning": reasoning, "system": system or None}


def scoring_settings(prefix, problem):
    """Compare's and Evaluate's settings: greedy sampling by default and the optional reward model ->
    (settings, the first problem of the section's inputs, shown, or None)."""
    settings = sampling_settings(prefix, greedy=True)
    settings["reward_model_path"], reward_problem = reward_model_field(prefix)
    problem = problem or reward_problem
    if problem:
        st.error(problem)
    return settings, problem


def compare_result(result):
    """A comparison ({"labels", "rows"}): the summary table, then each prompt with every checkpoint's
    answer side by side, scored."""
    if "settings" in result:  # which rewards scored the answers: the same answer scores differently by them
        settings = result["settings"]
        st.caption(modelsview.scoring_note(settings.get("reasoning"), settings.get("reward_model_path")))
    st.dataframe(modelsview.compare_summary(result["rows"], result["labels"]), hide_index=True,
                 use_container_width=True)
    for i, row in enumerate(result["rows"], 1):
        with st.container(border=True):
            st.text(f"{i}. {row['prompt']}")
            if row["reference"] is not None:
                st.caption(t("models.reference"))
                st.text(row["reference"])
            for col, label in zip(st.columns(len(result["labels"])), result["labels"]):
                answer = row["answers"][label]
                with col:
                    st.caption(label)
                    show_reply(answer["text"])
                    if answer["rewards"]:
                        st.caption(modelsview.score_text({"reward": answer["rewards"]["total"],
                                                          **answer["rewards"], "length": answer["tokens"]}))


def eval_results(evals, results):
    """The evaluations' results table, a chart of one metric against the training step, and one
    evaluation's answers for one checkpoint."""
    st.subheader(t("models.results"))
    table = modelsview.eval_rows(results)
    st.dataframe(table, hide_index=True, use_container_width=True)
    metric = st.selectbox(t("models.chart"), modelsview.EVAL_METRICS, key="models.eval.metric")
    chart = modelsview.eval_chart_data(results, metric)
    if chart is not None:
        st.line_chart(pd.DataFrame(chart), x="step", y=metric, color="run")
    st.subheader(t("models.answers_heading"))
    cols = st.columns(2)
    eval_id = cols[0].selectbox(t("models.evaluation"), sorted({r["eval_id"] for r in results}, reverse=True),
                                key="models.eval.browse")
    weights = {r["label"]: r["weight"] for r in results if r["eval_id"] == eval_id}
    label = cols[1].selectbox(t("models.checkpoint"), list(weights), key="models.eval.browse_weight")
    for a in evals.answers(eval_id, weights[label]) if label else []:
        with st.container(border=True):
            st.text(f"{a['idx'] + 1}. {a['prompt']}")
            st.caption(t("models.reference_is", text=a["reference"]))
            show_reply(a["answer"])
            st.caption(modelsview.score_text(a))


def timeline_result(rows, scores):
    """The held-out prompts across a run's checkpoints (`timeline.timeline`): each checkpoint's training
    and held-out scores, then each prompt with every checkpoint's answer side by side."""
    shown = pd.DataFrame(scores).assign(source=[" + ".join(t(f"models.timeline.source.{part}") for part in
                                                         s["source"].split("+") if part) for s in scores])
    st.dataframe(shown, hide_index=True, width="stretch", column_config={
        name: st.column_config.Column(t(f"models.timeline.col.{name}"))
        for name in ("checkpoint", "step", "training_reward", "held_out_reward", "held_out_accuracy", "answers",
                     "source")})
    labels = [s["checkpoint"] for s in scores]
    steps = {s["checkpoint"]: s["step"] for s in scores}
    for i, row in enumerate(rows, 1):
        with st.container(border=True):
            st.text(f"{i}. {row['prompt']}")
            st.caption(t("models.reference"))
            st.text(row["reference"] or "")
            for col, label in zip(st.columns(len(labels)), labels):
                with col:
                    st.caption(t("models.timeline.at_step", step="?" if steps[label] is None else steps[label]))
                    answer = row["answers"].get(label)
                    if answer is None:
                        st.caption(t("models.timeline.not_answered"))
                        continue
                    show_reply(answer["text"])
                    st.caption(modelsview.score_text({"reward": answer["reward"], "rule": answer["accuracy"],
                                                      "length": answer["tokens"]})
                               + " · " + t(f"models.timeline.source.{answer['source']}"))
