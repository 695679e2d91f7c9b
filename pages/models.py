"""Models: every checkpoint the runs wrote; chat with one, compare several, export one to transformers.

Models run in the chat worker process (see mmcore.models.chat_client); this page never imports torch.
Model output is user data: it is shown as plain text (never markdown/HTML), reasoning folded.
Everyone may browse the catalogue and the evaluation results; chat, compare, evaluate and export are
members' and admins' actions, checked and audited by mmcore.actions.modelguard.
"""
import pandas as pd
import streamlit as st

from mmcore.access import auth, roles
from mmcore.actions import modelguard
from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.base.paths import ROOT
from mmcore.base.safetext import md
from mmcore.jobs.jobstore import JobStore
from mmcore.models import catalogue, chat_client, eval_jobs, modelsview
from mmcore.train import preflight
from mmcore.widgets import navigation
from trainer.rules import roots as allowed_roots
from trainer.rules import specs

navigation.ensure_app_navigation()

state = st.session_state
user = auth.session_user(state)  # who acts: a viewer may look, members and admins may run models
SECTIONS = ("Catalogue", "Chat", "Compare", "Evaluate", "Export")
HISTORY_KEY = "models.chat.history"  # {target label: [{"role", "content"}]}
COMPARE_KEY = "models.compare.result"

st.title(t("models.title"))
try:
    store = JobStore()
    entries = catalogue.scan(store)
except Exception as exc:  # an unreadable job store: show the files anyway, unattributed
    st.warning(t("models.store_unreadable", error=exc))
    store, entries = None, catalogue.scan(None)
home = store.home if store is not None else None  # where the audit trail is
targets = modelsview.chat_targets(entries)
i18n.relabel(state, "models.section", "models.compare.source", "models.eval.how")
section = st.radio(t("models.section"), SECTIONS, horizontal=True, key="models.section", label_visibility="collapsed",
                   format_func=lambda s: t(f"models.section.{s}"))


def refused(action):
    """Why this session's user may not take `action` (chat, compare, evaluate, export), in the page's
    language; None when they may."""
    why = modelguard.refusal(user, action)
    role = modelguard.role(user)
    if why is None or role is None:  # allowed, or the roles file itself is the problem: its own message
        return why and md(why)
    return t("models.refused", user=md(user), role=t(f"role.{role}"), action=t(f"models.action.{action}"))


def show_refusal(action):
    """Say why the action is not offered; returns True when it is not."""
    why = refused(action)
    if why:
        st.info(why, icon=":material/lock:")
    return bool(why)


def choose_target(empty_key, label_key, key):
    """The checkpoint selector of Chat and Export -> (label, ChatTarget); stops the page without one."""
    if not targets:
        st.info(t(empty_key))
        st.stop()
    label = st.selectbox(t(label_key), list(targets), key=key)
    return label, targets[label]


def reward_model_field(prefix):
    """An optional reward-model folder -> (absolute path or None, problem or None): inside the read roots,
    a transformers model, and its own code only where an admin allowed it."""
    folder = st.text_input(t("models.reward_model"), key=f"{prefix}.reward_model",
                           placeholder=t("models.reward_model.placeholder"), help=t("models.reward_model.help"))
    if not folder.strip():
        return None, None
    problem = allowed_roots.configured().problem(folder, "read", base=ROOT)
    if problem is None:
        found = preflight.reward_model(specs.spec("grpo"), {"reward_model_path": folder}, ROOT)
        problem = found[0] if found else None
    return (None, md(problem)) if problem else (str(allowed_roots.resolved(folder, ROOT)), None)


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
    path = allowed_roots.resolved(data_path, ROOT)
    problem = allowed_roots.configured().problem(data_path, "read", base=ROOT)
    if problem is None and not path.is_file():
        problem = t("models.no_file", path=data_path)
    return (None if problem else path), int(count), problem


def sampling_settings(prefix, target=None, greedy=False):
    """The sampling widgets shared by Chat and Compare; returns the request settings."""
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


if section == "Catalogue":
    if not entries:
        st.info(t("models.no_weights"))
    else:
        st.caption(t("models.catalogue_count", n=len(entries)))
        st.dataframe(modelsview.catalogue_rows(entries), hide_index=True, use_container_width=True, column_config={
            "Job": st.column_config.LinkColumn("Job", display_text=r"/jobs\?job=(\d+)"),
            "Logs": st.column_config.LinkColumn("Logs", display_text=r"/logs\?job=(\d+)"),
            "Step": st.column_config.NumberColumn("Step", format="%d"),
            "Tokenizer": st.column_config.TextColumn(t("models.tokenizer"), help=t("models.tokenizer.help"))})

elif section == "Chat":
    label, target = choose_target("models.nothing_to_chat", "models.checkpoint", "models.chat.target")
    settings = sampling_settings("models.chat", target)
    history = state.setdefault(HISTORY_KEY, {}).setdefault(label, [])
    if st.button(t("models.clear"), disabled=not history):
        history.clear()
    for message in history:
        with st.chat_message(message["role"]):
            show_reply(message["content"]) if message["role"] == "assistant" else st.text(message["content"])
    may_not = show_refusal("chat")
    prompt = st.chat_input(t("models.message"), disabled=may_not)
    try:
        if prompt:
            modelguard.chat(user, target, home)
    except roles.Forbidden:
        prompt = None  # refused (shown above): nothing is sent
    if prompt:
        history.append({"role": "user", "content": prompt})
        with st.chat_message("user"):
            st.text(prompt)
        with st.chat_message("assistant"):
            box, text = st.empty(), ""
            try:
                for event in chat_client.chat({**target.payload(), **settings, "messages": history}):
                    if event["event"] == "loaded" and not event["cached"]:
                        st.caption(t("models.loaded", device=event["device"], seconds=f"{event['load_s']:.1f}"))
                    elif event["event"] == "token":
                        text += event["text"]
                        with box.container():
                            show_reply(text, streaming=True)
                    elif event["event"] == "done":
                        with box.container():
                            show_reply(event["text"])
                        rate = t("models.reply_rate", rate=event["tokens_per_s"]) if event.get("tokens_per_s") else ""
                        st.caption(t("models.reply_tokens", n=len(event["ids"])) + rate)
                        history.append({"role": "assistant", "content": event["text"]})
            except chat_client.ChatError as exc:
                history.pop()  # the question stays unanswered: let it be asked again
                st.error(t("models.no_answer", error=exc))

elif section == "Compare":
    if len(targets) < 2:
        st.info(t("models.compare_needs_two"))
        st.stop()
    chosen = st.multiselect(t("models.checkpoints_2_4"), list(targets), modelsview.compare_defaults(targets),
                            key="models.compare.targets", max_selections=4,
                            help=t("models.compare.help"))
    source = st.radio(t("models.prompts"), ("From a data file", "Typed"), horizontal=True, key="models.compare.source",
                      format_func=lambda s: t("models.prompts.file") if s == "From a data file" else t("models.prompts.typed"))
    prompts, problem = [], None
    if source == "From a data file":
        path, count, problem = prompt_file("models.compare")
        if path is not None:
            try:
                prompts = modelsview.load_prompts(path, min(count, 50))
            except (ValueError, OSError) as exc:
                problem = str(exc)
    else:
        typed = st.text_area(t("models.typed"), key="models.compare.typed")
        prompts = modelsview.prompts_from_text(typed)
    settings, problem = scoring_settings("models.compare", problem)
    may_not = show_refusal("compare")
    ready = 2 <= len(chosen) <= 4 and prompts and not problem and not may_not
    if st.button(t("models.compare"), type="primary", disabled=not ready):
        bar = st.progress(0.0, text=t("models.answering"))
        try:
            rows = modelguard.compare(user, [targets[c] for c in chosen], prompts, settings, home,
                                      on_answer=lambda done, total: bar.progress(done / total, t("models.answers", done=done, total=total)))
        except roles.Forbidden as exc:
            st.error(md(exc))
        except chat_client.ChatError as exc:
            st.error(t("models.compare_stopped", error=md(exc)))
        else:
            state[COMPARE_KEY] = {"labels": list(chosen), "rows": rows}
        bar.empty()
    result = state.get(COMPARE_KEY)
    if result:
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

elif section == "Evaluate":
    evals = eval_jobs.eval_store_for(store) if store is not None else None
    runs = sorted({e.job_id for e in entries if e.job_id is not None and e.chattable}, reverse=True)
    how = st.radio(t("models.evaluate"), ("Checkpoints", "A run's checkpoints"), horizontal=True, key="models.eval.how",
                   format_func=lambda s: t("models.eval.checkpoints") if s == "Checkpoints" else t("models.eval.run_checkpoints"),
                   help=t("models.eval.help"))
    if how == "Checkpoints":
        chosen = [targets[c] for c in st.multiselect(t("models.eval.checkpoints"), list(targets), key="models.eval.targets")]
    else:
        run = st.selectbox(t("models.eval.run"), runs, key="models.eval.run", format_func=lambda j: t("models.job", id=j))
        chosen = [t for t in targets.values() if any(e.job_id == run and e.path == t.weight for e in entries)]
        st.caption(t("models.eval.count", n=len(chosen), id=run) if run is not None else t("models.eval.none"))
    path, count, problem = prompt_file("models.eval")
    settings, problem = scoring_settings("models.eval", problem)
    may_not = show_refusal("evaluate")
    if st.button(t("models.eval.launch"), type="primary", disabled=bool(problem or not chosen or evals is None or may_not)):
        try:
            job_id, eval_id = modelguard.evaluate(store, user, chosen, entries, path, {**settings, "max_samples": count})
        except (OSError, ValueError, RuntimeError) as exc:  # roles.Forbidden is an OSError: its message says why
            st.error(t("models.eval.failed", error=md(exc)))
        else:
            st.success(t("models.eval.started", eval_id=eval_id, job_id=job_id))
            st.page_link("pages/jobs.py", label=t("train.watch"), icon=":material/list:",
                         query_params={"job": str(job_id)})
    results = evals.results() if evals is not None else []
    if results:
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

elif section == "Export":
    label, target = choose_target("models.nothing_to_export", "models.export.checkpoint", "models.export.target")
    cols = st.columns([3, 1])
    default_name = label.split("/")[-1].split(" ")[0].removesuffix(".pth")
    name = cols[0].text_input(t("models.export.folder"), default_name, key="models.export.name")
    dtype = cols[1].selectbox(t("models.export.dtype"), ("float32", "bfloat16", "float16"), key="models.export.dtype",
                              help=t("models.export.dtype.help"))
    try:
        folder = modelsview.export_folder(name)
    except ValueError as exc:
        st.error(str(exc))
        folder = None
    may_not = show_refusal("export")
    if st.button(t("models.export"), type="primary", disabled=folder is None or may_not):
        try:
            with st.spinner(t("models.exporting")):
                code, output = modelguard.export(user, target.weight, folder, home, lora=target.lora,
                                                 tokenizer_path=target.tokenizer_path, dtype=dtype)
        except roles.Forbidden as exc:
            st.error(md(exc))
            st.stop()
        (st.success if code == 0 else st.error)(t("models.export.done" if code == 0 else "models.export.failed", folder=folder))
        st.code(output, language=None, wrap_lines=True)
        if code == 0:
            st.code("from transformers import AutoModelForCausalLM, AutoTokenizer\n"
                    f"model = AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
                    f"tokenizer = AutoTokenizer.from_pretrained({str(folder)!r})", language="python")
