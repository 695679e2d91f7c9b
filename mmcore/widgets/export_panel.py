"""The Models page's Export section, drawn with Streamlit: the export form (format, GGUF type, dtype,
folder) and the list of exports, each with its verification result and a "how to run it" card.

The export itself runs as a job (`mmcore.actions.model_acts.launch_export`); what can be exported how is
said here before anything runs: a MoE model (or one with MiniMind's YaRN scaling) cannot be a Llama
folder, a GGUF or a PEFT base, and PEFT needs a LoRA.
"""
import streamlit as st

from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.models import catalogue, export_job, modelsview
from mmcore.widgets import queued_note

FORMATS = ("llama", "minimind", "gguf", "peft")
GGUF_TYPES = ("f16", "f32", "q8_0")
NAME_KEY = "models.export.name"
NAME_FOR_KEY = "models.export.name_for"  # the checkpoint the folder name was filled in for
OUTCOME_KEY = "models.export.outcome"  # this session's last Export click (`queued_note`)
COUNT_KEY = "models.export.count"  # Export clicks so far: each asks its own "replace?" question


def _entry(entries, target):
    return next((e for e in entries if e.path == target.weight), None)


def export_form(label, target, entries, store=None):
    """The format, GGUF type, dtype and folder fields -> {"folder", "options"}, or None (with the reason
    shown) when this checkpoint cannot be exported as chosen, or its folder holds an export (or one is queued
    for it) and the user has not ticked that it may be replaced. The folder name is the chosen checkpoint's
    until the user types another: choosing another checkpoint fills in that one's name."""
    entry = _entry(entries, target)
    moe = bool(entry and entry.use_moe)
    cols = st.columns([2, 1, 1])
    fmt = cols[0].radio(t("models.export.format"), FORMATS, horizontal=True, key="models.export.format",
                        format_func=lambda f: t(f"models.export.format.{f}"), help=t("models.export.format.help"))
    gguf_type = cols[1].selectbox(t("models.export.gguf_type"), GGUF_TYPES, key="models.export.gguf_type",
                                  disabled=fmt != "gguf", help=t("models.export.gguf_type.help"))
    dtype = cols[2].selectbox(t("models.export.dtype"), ("float32", "bfloat16", "float16"), key="models.export.dtype",
                              disabled=fmt not in ("llama", "minimind"), help=t("models.export.dtype.help"))
    default_name = label.split("/")[-1].split(" ")[0].removesuffix(".pth")
    # Another checkpoint: its folder, not the last one's (and the checkpoint's again where Streamlit dropped the
    # field's state while another section was shown).
    if st.session_state.get(NAME_FOR_KEY) != label or NAME_KEY not in st.session_state:
        st.session_state[NAME_FOR_KEY] = label
        st.session_state[NAME_KEY] = default_name
    name = st.text_input(t("models.export.folder"), key=NAME_KEY)
    problem = None
    if moe and fmt == "llama":
        st.info(t("models.export.moe_fallback"), icon=":material/info:")
    elif moe and fmt in ("gguf", "peft"):
        problem = t("models.export.moe_refused", format=t(f"models.export.format.{fmt}"))
    elif fmt == "peft" and not target.lora:
        problem = t("models.export.peft_needs_lora")
    elif target.lora and fmt != "peft":
        st.caption(t("models.export.lora_merged"))
    try:
        folder = modelsview.export_folder(name)
    except ValueError as exc:
        problem = problem or str(exc)
        folder = None
    if problem:
        st.error(problem)
        return None
    in_use = export_job.folder_in_use(folder, store)
    if in_use:
        key, fields = in_use
        st.warning(t(key, **{k: md(str(v)) for k, v in fields.items()}), icon=":material/warning:")
        replace_key = f"models.export.replace.{st.session_state.get(COUNT_KEY, 0)}.{name}"
        if not st.checkbox(t("models.export.replace", folder=md(name)), key=replace_key,
                           help=t("models.export.replace.help")):
            return None
    options = {"format": fmt, "lora": target.lora, "tokenizer_path": target.tokenizer_path}
    if fmt == "gguf":
        options["gguf_type"] = gguf_type
    elif fmt in ("llama", "minimind"):
        options["dtype"] = dtype
    return {"folder": folder, "options": options}


def export_button(choice, disabled, act):
    """The Export button: `act(choice)` queues the export and returns its Outcome, kept on screen (with a
    link to its job) until the next click, so the page's later reruns do not hide it."""
    if st.button(t("models.export"), type="primary", disabled=disabled):
        outcome = act(choice)
        queued_note.remember(OUTCOME_KEY, outcome, outcome.value)
        st.session_state[COUNT_KEY] = st.session_state.get(COUNT_KEY, 0) + 1
        st.rerun()  # the form again, as it is now: the folder this export will write is taken
    queued_note.show(OUTCOME_KEY)


def _source(manifest):
    weight = manifest.get("weight") or ""
    lora = manifest.get("lora")
    return weight.rsplit("/", 1)[-1] + (f" + {lora.rsplit('/', 1)[-1]}" if lora else "")


def export_rows(found):
    """One row per export for st.dataframe."""
    rows = []
    for m in found:
        fmt = m.get("format", "?") + (f" {m['gguf_type']}" if m.get("gguf_type") else "")
        rows.append({"Folder": m["name"], "Format": fmt, "Size": catalogue.human_size(m.get("size_bytes") or 0),
                     "Source": _source(m), "Job": f"/jobs?job={m['job_id']}" if m.get("job_id") is not None else None,
                     "Verified": export_job.verification_text(m)})
    return rows


def exports_list(store):
    """Every export under out/hf/ (format, size, source weight and job, verification), and for the one
    chosen, how to run it."""
    found = export_job.exports(modelsview.EXPORT_ROOT, store)
    st.subheader(t("models.export.list"))
    if not found:
        st.caption(t("models.export.none"))
        return
    st.dataframe(export_rows(found), hide_index=True, use_container_width=True,
                 column_config={"Job": st.column_config.LinkColumn("Job", display_text=r"/jobs\?job=(\d+)"),
                                "Verified": st.column_config.TextColumn(t("models.export.verified"), width="large")})
    by_name = {m["name"]: m for m in found}
    chosen = by_name[st.selectbox(t("models.export.run_which"), list(by_name), key="models.export.run_which")]
    with st.container(border=True):
        st.markdown(f"**{t('models.export.how_to_run')}** · {md(chosen['name'])} · "
                    f"{t('models.export.format.' + chosen.get('format', 'llama'))}")
        if chosen.get("fallback_reason"):
            st.info(md(chosen["fallback_reason"]), icon=":material/info:")
        ok = (chosen.get("verification") or {}).get("ok")
        (st.success if ok else st.warning if ok is None else st.error)(md(export_job.verification_text(chosen)))
        language, code = export_job.how_to_run(chosen)
        st.code(code, language=language, wrap_lines=True)


def import_form(may_not, act):
    """Import a Llama-format folder (an export, or any Llama MiniMind can run) or an upstream MiniMind .pth as
    a base weight under out/, for the Train page's *Base weight*; `act(source, prefix)` runs the import and
    returns its Outcome. Shown folded: it is the way back, less often needed."""
    with st.expander(t("models.import.title")):
        cols = st.columns([3, 1])
        source_text = cols[0].text_input(t("models.import.source"), key="models.import.source",
                                         help=t("models.import.source.help"))
        name = cols[1].text_input(t("models.import.name"), "imported", key="models.import.name")
        source, prefix, problem = modelsview.import_paths(source_text, name)
        if problem and source_text.strip():
            st.error(problem)
        if st.button(t("models.import"), disabled=bool(problem) or may_not, key="models.import.go"):
            outcome = act(source, prefix)
            getattr(st, outcome.kind)(md(outcome.message))
            if not outcome.refused and outcome.kind == "success":
                st.caption(t("models.import.use", name=name))
