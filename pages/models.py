"""Models: every checkpoint the runs wrote; chat with one, compare several, export one to transformers.

Models run in the chat worker process (see mmcore.chat_client); this page never imports torch.
Model output is user data: it is shown as plain text (never markdown/HTML), reasoning folded.
"""
import pandas as pd
import streamlit as st

from mmcore import catalogue, chat_client, evaluate, modelsview, navigation
from mmcore.export import run_export
from mmcore.paths import ROOT
from mmcore.store import JobStore
from trainer import roots as allowed_roots

navigation.ensure_app_navigation()

state = st.session_state
SECTIONS = ("Catalogue", "Chat", "Compare", "Evaluate", "Export")
HISTORY_KEY = "models.chat.history"  # {target label: [{"role", "content"}]}
COMPARE_KEY = "models.compare.result"

st.title("Models")
try:
    store = JobStore()
    entries = catalogue.scan(store)
except Exception as exc:  # an unreadable job store: show the files anyway, unattributed
    st.warning(f"The job store cannot be read ({exc}); files are listed without their jobs.")
    store, entries = None, catalogue.scan(None)
targets = modelsview.chat_targets(entries)
section = st.radio("Section", SECTIONS, horizontal=True, key="models.section", label_visibility="collapsed")


def show_reply(text, streaming=False):
    """A reply as plain text, its `<think>` part folded."""
    thought, answer = chat_client.split_think(text)
    if thought is not None:
        with st.expander("Thinking…" if streaming and not answer else "Thought", expanded=streaming and not answer):
            st.text(thought)
    if answer or thought is None:
        st.text(answer)


def prompt_file(prefix):
    """The data-file and prompt-count widgets -> (path or None, count, problem or None)."""
    cols = st.columns([3, 1])
    data_path = cols[0].text_input("RLAIF or SFT file, relative to the repository (reference: the last assistant turn)",
                                   "dataset/demo/rlaif.jsonl", key=f"{prefix}.data")
    count = cols[1].number_input("Number of prompts", 1, 1000, 5, key=f"{prefix}.count")
    path = allowed_roots.resolved(data_path, ROOT)
    problem = allowed_roots.configured().problem(data_path, "read", base=ROOT)
    if problem is None and not path.is_file():
        problem = f"No such file: {data_path} (paths are relative to the repository folder)."
    return (None if problem else path), int(count), problem


def sampling_settings(prefix, target=None, greedy=False):
    """The sampling widgets shared by Chat and Compare; returns the request settings."""
    cols = st.columns(5)
    temperature = cols[0].slider("Temperature", 0.0, 2.0, 0.0 if greedy else 0.85, 0.05, key=f"{prefix}.temperature",
                                 help="0 = greedy: always the most likely token")
    top_p = cols[1].slider("Top-p", 0.05, 1.0, 0.85, 0.05, key=f"{prefix}.top_p")
    max_new = cols[2].number_input("Max new tokens", 1, 8192, 512, key=f"{prefix}.max_new_tokens")
    seed = cols[3].number_input("Seed", 0, 2**31 - 1, 0, key=f"{prefix}.seed")
    reasoning = cols[4].toggle("Reasoning", value=target is None or modelsview.default_reasoning(target),
                               key=f"{prefix}.reasoning",
                               help="On: the model may think first (<think>…</think>, shown folded). Off: an empty "
                                    "thought is given, so it answers directly. Rewards score the reasoning format "
                                    "only when on.")
    system = st.text_input("System prompt", key=f"{prefix}.system", placeholder="You are a helpful assistant")
    return {"temperature": temperature, "top_p": top_p, "max_new_tokens": int(max_new), "seed": int(seed),
            "reasoning": reasoning, "system": system or None}


if section == "Catalogue":
    if not entries:
        st.info("No weight files yet: runs save them under out/ (and their save folder). Launch one on Train.")
    else:
        st.caption(f"{len(entries)} weight files under out/ and the jobs' save folders, newest first.")
        st.dataframe(modelsview.catalogue_rows(entries), hide_index=True, use_container_width=True, column_config={
            "Job": st.column_config.LinkColumn("Job", display_text=r"/jobs\?job=(\d+)"),
            "Logs": st.column_config.LinkColumn("Logs", display_text=r"/logs\?job=(\d+)"),
            "Step": st.column_config.NumberColumn("Step", format="%d"),
            "Tokenizer": st.column_config.TextColumn("Tokenizer", help="Fingerprint of the tokenizer it was trained "
                                                                       "with (from its metadata file)")})

elif section == "Chat":
    if not targets:
        st.info("Nothing to chat with yet: no full weight file (or LoRA with its base) was found.")
        st.stop()
    label = st.selectbox("Checkpoint", list(targets), key="models.chat.target")
    target = targets[label]
    settings = sampling_settings("models.chat", target)
    history = state.setdefault(HISTORY_KEY, {}).setdefault(label, [])
    if st.button("Clear conversation", disabled=not history):
        history.clear()
    for message in history:
        with st.chat_message(message["role"]):
            show_reply(message["content"]) if message["role"] == "assistant" else st.text(message["content"])
    prompt = st.chat_input("Message the model")
    if prompt:
        history.append({"role": "user", "content": prompt})
        with st.chat_message("user"):
            st.text(prompt)
        with st.chat_message("assistant"):
            box, text = st.empty(), ""
            try:
                for event in chat_client.chat({**target.payload(), **settings, "messages": history}):
                    if event["event"] == "loaded" and not event["cached"]:
                        st.caption(f"Loaded on {event['device']} in {event['load_s']:.1f} s")
                    elif event["event"] == "token":
                        text += event["text"]
                        with box.container():
                            show_reply(text, streaming=True)
                    elif event["event"] == "done":
                        with box.container():
                            show_reply(event["text"])
                        rate = f", {event['tokens_per_s']:.1f} tokens/s" if event.get("tokens_per_s") else ""
                        st.caption(f"{len(event['ids'])} tokens{rate}")
                        history.append({"role": "assistant", "content": event["text"]})
            except chat_client.ChatError as exc:
                history.pop()  # the question stays unanswered: let it be asked again
                st.error(f"The model could not answer: {exc}")

elif section == "Compare":
    if len(targets) < 2:
        st.info("Compare needs at least two checkpoints; the catalogue has fewer.")
        st.stop()
    chosen = st.multiselect("Checkpoints (2–4)", list(targets), modelsview.compare_defaults(targets),
                            key="models.compare.targets", max_selections=4,
                            help="By default the newest RL checkpoint and the weight it started from.")
    source = st.radio("Prompts", ("From a data file", "Typed"), horizontal=True, key="models.compare.source")
    prompts, problem = [], None
    if source == "From a data file":
        path, count, problem = prompt_file("models.compare")
        if path is not None:
            try:
                prompts = modelsview.load_prompts(path, min(count, 50))
            except (ValueError, OSError) as exc:
                problem = str(exc)
    else:
        typed = st.text_area("One prompt per line (no reference: answers are not scored)", key="models.compare.typed")
        prompts = modelsview.prompts_from_text(typed)
    settings = sampling_settings("models.compare", greedy=True)
    if problem:
        st.error(problem)
    ready = 2 <= len(chosen) <= 4 and prompts and not problem
    if st.button("Compare", type="primary", disabled=not ready):
        bar = st.progress(0.0, text="Answering…")
        try:
            rows = modelsview.compare([targets[c] for c in chosen], prompts, settings,
                                      on_answer=lambda done, total: bar.progress(done / total, f"{done}/{total} answers"))
        except chat_client.ChatError as exc:
            st.error(f"The comparison stopped: {exc}")
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
                    st.caption("Reference")
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
    evals = evaluate.eval_store_for(store) if store is not None else None
    runs = sorted({e.job_id for e in entries if e.job_id is not None and e.chattable}, reverse=True)
    how = st.radio("Evaluate", ("Checkpoints", "A run's checkpoints"), horizontal=True, key="models.eval.how",
                   help="A run's checkpoints: its weight file and the step snapshots it kept.")
    if how == "Checkpoints":
        chosen = [targets[c] for c in st.multiselect("Checkpoints", list(targets), key="models.eval.targets")]
    else:
        run = st.selectbox("Run (job)", runs, key="models.eval.run", format_func=lambda j: f"job {j}")
        chosen = [t for t in targets.values() if any(e.job_id == run and e.path == t.weight for e in entries)]
        st.caption(f"{len(chosen)} checkpoints of job {run}" if run is not None else "No run has checkpoints here.")
    path, count, problem = prompt_file("models.eval")
    settings = sampling_settings("models.eval", greedy=True)
    if problem:
        st.error(problem)
    if st.button("Launch evaluation", type="primary", disabled=bool(problem or not chosen or evals is None)):
        try:
            job_id, eval_id = evaluate.launch(store, chosen, entries, path, {**settings, "max_samples": count})
        except (OSError, ValueError, RuntimeError) as exc:
            st.error(f"Could not launch the evaluation: {exc}")
        else:
            st.success(f"Evaluation {eval_id} runs as job {job_id}.")
            st.page_link("pages/jobs.py", label="Watch it on Jobs", icon=":material/list:",
                         query_params={"job": str(job_id)})
    results = evals.results() if evals is not None else []
    if results:
        st.subheader("Results")
        table = modelsview.eval_rows(results)
        st.dataframe(table, hide_index=True, use_container_width=True)
        metric = st.selectbox("Chart", modelsview.EVAL_METRICS, key="models.eval.metric")
        chart = modelsview.eval_chart_data(results, metric)
        if chart is not None:
            st.line_chart(pd.DataFrame(chart), x="step", y=metric, color="run")
        st.subheader("Answers")
        cols = st.columns(2)
        eval_id = cols[0].selectbox("Evaluation", sorted({r["eval_id"] for r in results}, reverse=True),
                                    key="models.eval.browse")
        weights = {r["label"]: r["weight"] for r in results if r["eval_id"] == eval_id}
        label = cols[1].selectbox("Checkpoint", list(weights), key="models.eval.browse_weight")
        for a in evals.answers(eval_id, weights[label]) if label else []:
            with st.container(border=True):
                st.text(f"{a['idx'] + 1}. {a['prompt']}")
                st.caption(f"Reference: {a['reference']}")
                show_reply(a["answer"])
                st.caption(modelsview.score_text(a))

elif section == "Export":
    if not targets:
        st.info("Nothing to export yet: no full weight file (or LoRA with its base) was found.")
        st.stop()
    label = st.selectbox("Checkpoint (a LoRA is merged into its base)", list(targets), key="models.export.target")
    target = targets[label]
    cols = st.columns([3, 1])
    default_name = label.split("/")[-1].split(" ")[0].removesuffix(".pth")
    name = cols[0].text_input("Folder name (under out/hf/)", default_name, key="models.export.name")
    dtype = cols[1].selectbox("Weights dtype", ("float32", "bfloat16", "float16"), key="models.export.dtype",
                              help="float32 gives exactly the .pth model's outputs; half types are half the size.")
    try:
        folder = modelsview.export_folder(name)
    except ValueError as exc:
        st.error(str(exc))
        folder = None
    if st.button("Export", type="primary", disabled=folder is None):
        with st.spinner("Exporting…"):
            code, output = run_export(target.weight, folder, lora=target.lora, tokenizer_path=target.tokenizer_path,
                                      dtype=dtype)
        (st.success if code == 0 else st.error)(f"Export {'done' if code == 0 else 'failed'}: {folder}")
        st.code(output, language=None, wrap_lines=True)
        if code == 0:
            st.code("from transformers import AutoModelForCausalLM, AutoTokenizer\n"
                    f"model = AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
                    f"tokenizer = AutoTokenizer.from_pretrained({str(folder)!r})", language="python")
