"""Models: every checkpoint the runs wrote; chat with one, compare several, export one (Llama, GGUF, PEFT...).

Models run in the chat worker process (see mmcore.models.chat_client); this page never imports torch.
Model output is user data: it is shown as plain text (never markdown/HTML), reasoning folded.
Everyone may browse the catalogue and the evaluation results; chat, compare, evaluate and export are
members' and admins' acts, checked and audited by mmcore.actions.model_acts.
"""
import streamlit as st

from mmcore.access import auth
from mmcore.actions import model_acts
from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.jobs import storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.models import catalogue, chat_client, eval_jobs, modelsview, timeline
from mmcore.widgets import export_panel, model_panels, navigation, queued_note

navigation.ensure_app_navigation()

state = st.session_state
user = auth.session_user(state)  # who acts: a viewer may look, members and admins may run models
HISTORY_KEY = "models.chat.history"  # {target label: [{"role", "content"}]}
COMPARE_KEY = "models.compare.result"
TIMELINE_KEY = "models.timeline.generated"  # {job id: {(checkpoint label, row): answer}} made in this session
EVAL_OUTCOME_KEY = "models.eval.outcome"  # the last Evaluate click (`queued_note`)

st.title(t("models.title"))
try:
    store = JobStore()
    entries = catalogue.scan(store)
except Exception as exc:  # an unreadable job store: show the files anyway, unattributed
    st.warning(t("models.store_unreadable", problem=md(storeguard.explain(exc))))
    store, entries = None, catalogue.scan(None)
home = store.home if store is not None else None  # where the audit trail is
targets = modelsview.chat_targets(entries)


def refused(action):
    """Why this session's user may not take `action` (chat, compare, evaluate, export), in the page's
    language; None when they may."""
    why = model_acts.refusal(user, action)
    role = model_acts.role(user)
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


def catalogue_section():
    """Every weight file the runs wrote, with the job that wrote it."""
    if not entries:
        st.info(t("models.no_weights"))
    else:
        st.caption(t("models.catalogue_count", n=len(entries)))
        st.dataframe(modelsview.catalogue_rows(entries), hide_index=True, use_container_width=True, column_config={
            "File": st.column_config.TextColumn(t("models.col.file")),
            "Type": st.column_config.TextColumn(t("models.col.type")),
            "Kind": st.column_config.TextColumn(t("models.col.kind")),
            "Job": st.column_config.LinkColumn(t("models.col.job"), display_text=r"/jobs\?job=(\d+)"),
            "Logs": st.column_config.LinkColumn(t("models.col.logs"), display_text=r"/logs\?job=(\d+)"),
            "Step": st.column_config.TextColumn(t("models.col.step")),
            "Saved": st.column_config.TextColumn(t("models.col.saved")),
            "File size": st.column_config.TextColumn(t("models.col.file_size")),
            "Size": st.column_config.TextColumn(t("models.size"), help=t("models.size.help")),
            "Tokenizer": st.column_config.TextColumn(t("models.tokenizer"), help=t("models.tokenizer.help"))})


def chat_section():
    """Chat with one checkpoint; its replies stream in, its history kept per checkpoint."""
    label, target = choose_target("models.nothing_to_chat", "models.checkpoint", "models.chat.target")
    settings = model_panels.sampling_settings("models.chat", target)
    history = state.setdefault(HISTORY_KEY, {}).setdefault(label, [])
    if st.button(t("models.clear"), disabled=not history):
        history.clear()
    for message in history:
        with st.chat_message(message["role"]):
            if message["role"] == "assistant":
                model_panels.show_reply(message["content"])
            else:
                st.text(message["content"])
    may_not = show_refusal("chat")
    prompt = st.chat_input(t("models.message"), disabled=may_not)
    if prompt and not model_acts.chat(user, target, home).done:
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
                            model_panels.show_reply(text, streaming=True)
                    elif event["event"] == "done":
                        with box.container():
                            model_panels.show_reply(event["text"])
                        rate = t("models.reply_rate", rate=event["tokens_per_s"]) if event.get("tokens_per_s") else ""
                        st.caption(t("models.reply_tokens", n=len(event["ids"])) + rate)
                        history.append({"role": "assistant", "content": event["text"]})
            except chat_client.ChatError as exc:
                history.pop()  # the question stays unanswered: let it be asked again
                st.error(t("models.no_answer", error=exc))


def compare_section():
    """Two to four checkpoints answer the same prompts with the same settings, scored side by side; or one
    run's checkpoints answer its held-out prompts."""
    how = st.radio(t("models.compare.how"), ("Checkpoints", "A run's checkpoints"), horizontal=True,
                   key="models.compare.how", format_func=lambda s: t("models.compare.how.checkpoints")
                   if s == "Checkpoints" else t("models.timeline"))
    if how != "Checkpoints":
        timeline_section()
        return
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
        path, count, problem = model_panels.prompt_file("models.compare")
        if path is not None:
            try:
                prompts = modelsview.load_prompts(path, min(count, 50))
            except (ValueError, OSError) as exc:
                problem = str(exc)
    else:
        typed = st.text_area(t("models.typed"), key="models.compare.typed")
        prompts = modelsview.prompts_from_text(typed)
    settings, problem = model_panels.scoring_settings("models.compare", problem)
    may_not = show_refusal("compare")
    ready = 2 <= len(chosen) <= 4 and prompts and not problem and not may_not
    if st.button(t("models.compare"), type="primary", disabled=not ready):
        bar = st.progress(0.0, text=t("models.answering"))
        outcome = model_acts.compare(user, [targets[c] for c in chosen], prompts, settings, home,
                                     on_answer=lambda done, total: bar.progress(done / total, t("models.answers", done=done, total=total)))
        if outcome.kind == "error":
            st.error(md_lines(outcome.message))
        else:
            state[COMPARE_KEY] = {"labels": list(chosen), "rows": outcome.value, "settings": settings}
        bar.empty()
    result = state.get(COMPARE_KEY)
    if result:
        model_panels.compare_result(result)


def timeline_section():
    """The held-out prompts across one run's checkpoints: the answers recorded during training, and those of
    checkpoints saved between evaluations, made by the chat worker on request."""
    by_run = timeline.run_checkpoints(entries)
    if store is None or not by_run:
        st.info(t("models.timeline.no_runs"))
        return
    job_id = st.selectbox(t("models.eval.run"), list(by_run), key="models.timeline.run",
                          format_func=lambda j: t("models.job", id=j))
    plan = timeline.plan(store, job_id, by_run[job_id])
    if not plan.prompts:
        st.info(t("models.timeline.no_prompts", id=job_id))
        return
    generated = state.setdefault(TIMELINE_KEY, {}).get(job_id, {})
    to_run = [c for c in plan.to_run if not any(label == c.label for label, _ in generated)]
    st.caption(t("models.timeline.help" if to_run else "models.timeline.help.answered", prompts=len(plan.prompts),
                 checkpoints=len(plan.checkpoints), missing=len(to_run)))
    may_not = show_refusal("compare") if to_run else False
    if to_run and st.button(t("models.timeline.answer", n=len(to_run)), key="models.timeline.go", disabled=may_not):
        bar = st.progress(0.0, text=t("models.answering"))
        outcome = model_acts.compare(
            user, [c.target() for c in to_run], plan.prompts, plan.settings, home,
            on_answer=lambda done, total: bar.progress(done / total, t("models.answers", done=done, total=total)))
        bar.empty()
        if outcome.kind == "error":
            st.error(md_lines(outcome.message))
        else:
            state[TIMELINE_KEY][job_id] = {**generated, **timeline.generated_answers(outcome.value, to_run, plan.prompts)}
            st.rerun()  # drawn again with every answer, without the button
    model_panels.timeline_result(*timeline.timeline(plan.run_dir, plan.checkpoints, plan.prompts, plan.recorded,
                                                    generated))


def evaluate_section():
    """Evaluate checkpoints (or a run's) on a prompts file as a job; browse the results and answers."""
    evals = eval_jobs.eval_store_for(store) if store is not None else None
    runs = sorted({e.job_id for e in entries if e.job_id is not None and e.chattable}, reverse=True)
    how = st.radio(t("models.evaluate"), ("Checkpoints", "A run's checkpoints"), horizontal=True, key="models.eval.how",
                   format_func=lambda s: t("models.eval.checkpoints") if s == "Checkpoints" else t("models.eval.run_checkpoints"),
                   help=t("models.eval.help"))
    if how == "Checkpoints":
        chosen = [targets[c] for c in st.multiselect(t("models.eval.checkpoints"), list(targets), key="models.eval.targets")]
    else:
        run = st.selectbox(t("models.eval.run"), runs, key="models.eval.run", format_func=lambda j: t("models.job", id=j))
        chosen = [target for target in targets.values() if any(e.job_id == run and e.path == target.weight for e in entries)]
        st.caption(t("models.eval.count", n=len(chosen), id=run) if run is not None else t("models.eval.none"))
    path, count, problem = model_panels.prompt_file("models.eval")
    settings, problem = model_panels.scoring_settings("models.eval", problem)
    may_not = show_refusal("evaluate")
    if st.button(t("models.eval.launch"), type="primary", disabled=bool(problem or not chosen or evals is None or may_not)):
        outcome = model_acts.evaluate(store, user, chosen, entries, path, {**settings, "max_samples": count})
        queued_note.remember(EVAL_OUTCOME_KEY, outcome, outcome.value[0] if outcome.done else None)
    queued_note.show(EVAL_OUTCOME_KEY)
    results = evals.results() if evals is not None else []
    if results:
        model_panels.eval_results(evals, results)


def export_section():
    """Export one checkpoint under out/hf/ as a job - a Llama folder, the custom-code folder, GGUF with an
    Ollama Modelfile, or a LoRA as a PEFT adapter - and list the exports, verified, with how to run each."""
    label, target = choose_target("models.nothing_to_export", "models.export.checkpoint", "models.export.target")
    choice = export_panel.export_form(label, target, entries, store)
    may_not = show_refusal("export")
    export_panel.export_button(choice, choice is None or may_not or store is None, lambda choice: model_acts.launch_export(
        store, user, target.weight, choice["folder"], **choice["options"]))
    export_panel.exports_list(store)
    export_panel.import_form(may_not, lambda source, prefix: model_acts.import_weight(user, source, prefix, home))


# -- the page: one section at a time -----------------------------------------------------------------

SECTIONS = {"Catalogue": catalogue_section, "Chat": chat_section, "Compare": compare_section,
            "Evaluate": evaluate_section, "Export": export_section}
i18n.relabel(state, "models.section", "models.compare.how", "models.compare.source", "models.eval.how")
section = st.radio(t("models.section"), list(SECTIONS), horizontal=True, key="models.section", label_visibility="collapsed",
                   format_func=lambda s: t(f"models.section.{s}"))
SECTIONS[section]()
