"""The Data page's panels, drawn with Streamlit: the file and settings, the scan's progress, format and
health with filterable problem lists, the row browser with the loss mask, sizes and cost, and the
link to Train. What they show is computed by `mmcore.data` (torch-free) and the data worker.
"""
import os

import pandas as pd
import streamlit as st

from dataset.formats import KIND_OF_TYPE, check_record
from mmcore.access import auth
from mmcore.actions import data_acts
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.data import checkup, estimates, links, maskview, report, row_client, rows, scans, sizing, sources
from mmcore.train import train_types
from mmcore.widgets import uploader_words

FILE_KEY = "data.file"
OTHER_KEY = "data.other"
TYPE_KEY = "data.type"
LINE_KEY = "data.jump"
SEARCH_KEY = "data.search"
FIRST_ROWS = 20
OTHER = "__other__"
UPLOAD_KEY = "data.upload"
UPLOAD_TYPES = ("jsonl", "json")
UPLOAD_MESSAGE_KEY = "data.upload_message"


def visible_uploads(home):
    """The upload folders this session's user may list and open (None: all, for an admin)."""
    return data_acts.visible_uploads(home, auth.session_user(st.session_state))


def choose_file(home, query):
    """The file picker: listed files (dataset/ first), another path, or `?file=` -> the chosen path text."""
    listed = [str(p) for p in sources.candidates(home, visible_uploads(home))]
    asked = query.get("file")
    if asked and st.session_state.get("data.asked") != asked:  # a link from Train: once, then the user's choice
        st.session_state["data.asked"] = asked
        if asked in listed:
            st.session_state[FILE_KEY] = asked
        else:
            st.session_state[FILE_KEY], st.session_state[OTHER_KEY] = OTHER, asked
    options = listed + [OTHER]
    if st.session_state.get(FILE_KEY) not in options:
        st.session_state.pop(FILE_KEY, None)
    left, right = st.columns([3, 2])
    choice = left.selectbox(t("data.file"), options, key=FILE_KEY, index=None, placeholder=t("data.file.placeholder"),
                            format_func=lambda p: t("data.file.other") if p == OTHER else sources.display(p),
                            help=t("data.file.help"))
    user = auth.session_user(st.session_state)
    may_not = data_acts.upload_refusal(user)
    with right:
        uploader_words.localize(UPLOAD_KEY, UPLOAD_TYPES)
    right.file_uploader(t("data.upload"), type=list(UPLOAD_TYPES), key=UPLOAD_KEY, disabled=bool(may_not),
                        on_change=_uploaded, args=(home, user),
                        help=md(may_not) if may_not else t("data.upload.help", mb=sources.MAX_UPLOAD_BYTES // 2**20))
    if message := st.session_state.pop(UPLOAD_MESSAGE_KEY, None):
        st.error(md_lines(message))
    if choice == OTHER:
        return st.text_input(t("data.other"), key=OTHER_KEY, help=t("data.other.help")).strip() or None
    return choice


def _uploaded(home, user):
    """Upload callback (before the widgets are drawn): keep the file through the act, then choose it."""
    upload = st.session_state.get(UPLOAD_KEY)
    if upload is None:
        return
    outcome = data_acts.upload_data(home, upload, upload.name, user)  # streamed to disk, never one bytes object
    if outcome.done:
        st.session_state[FILE_KEY] = str(outcome.value.resolve())
    else:
        st.session_state[UPLOAD_MESSAGE_KEY] = outcome.message


def settings(path, kind):
    """Training type (types that read this kind first), max_seq_len and tokenizer -> (type, max_seq_len, tokenizer).
    Another file starts at the first type that reads its kind."""
    readers = [k for k, v in KIND_OF_TYPE.items() if v == kind]
    order = readers + [k for k in KIND_OF_TYPE if k not in readers]
    if st.session_state.get("data.detected") != [str(path), kind] or st.session_state.get(TYPE_KEY) not in order:
        st.session_state["data.detected"] = [str(path), kind]
        st.session_state[TYPE_KEY] = order[0]
    cols = st.columns([2, 1, 2])
    train_type = cols[0].selectbox(t("data.type"), order, key=TYPE_KEY, format_func=lambda k: t(f"type.{k}"),
                                   help=t("data.type.help"))
    max_seq_len = cols[1].number_input(t("data.max_seq_len"), min_value=8, max_value=1 << 20, step=64,
                                       value=report.default_max_seq_len(train_type), key=f"data.max_seq_len.{train_type}",
                                       help=t("data.max_seq_len.help"))
    tokenizer = cols[2].text_input(t("data.tokenizer"), key="data.tokenizer", placeholder=str(scans.tokenizer_dir()),
                                   help=t("data.tokenizer.help")).strip() or None
    return train_type, int(max_seq_len), tokenizer


def tokenizer_problem(tokenizer, home):
    """Why a chosen tokenizer folder cannot be used, or None."""
    if tokenizer is None:
        return None
    path = sources.resolve(tokenizer, sources.ROOT)
    if not any(path == r or r in path.parents for r in sources.roots(home)):
        return t("data.err.tokenizer_outside", path=tokenizer)
    if not (path / "tokenizer.json").is_file():
        return t("data.err.tokenizer_missing", path=path)
    return None


def progress(home, key, restart):
    """The scan's progress bar; a fragment that redraws itself every second while the scan runs and
    reruns the page when it ends. `restart()` starts a failed scan again."""
    state = scans.state(home, key)

    @st.fragment(run_every=1.0 if state.status == "running" else None)
    def bar():
        now = scans.state(home, key)
        if now.status != state.status or (now.health is None) != (state.health is None):
            st.rerun()
        if now.status == "running":
            p = now.progress or {"phase": "health", "done": 0, "total": 1}
            frac = min(1.0, p["done"] / max(1, p["total"]))
            st.progress(frac, text=t(f"data.progress.{p['phase']}", pct=f"{frac:.0%}", done=p["done"], total=p["total"]))
        elif now.status == "failed":
            st.error(t("data.scan_failed", error=md(now.error)))
            if st.button(t("data.scan_again")):
                restart()
                st.rerun()
    bar()
    return state


def health_panel(state, train_type, file_kind=None, path=None):
    """Format, rows and one filterable list per problem. `file_kind`: the file's own format, said the same
    whichever type it is checked for; `path`: the file (the bundled demo data's duplicates are explained)."""
    result = state.health
    if result is None:
        st.info(t("data.health.pending"))
        return
    lists, counts = report.problem_lists(result, train_type)
    kind, reading = checkup.file_format(file_kind, result)
    st.markdown(t("data.kind", kind=kind, rows=result["rows"], lines=result["lines"],
                  types=", ".join(t(f"type.{k}") for k in reading)))
    if train_type not in result["types"]:
        st.warning(t("data.type_mismatch", type=t(f"type.{train_type}"), kind=kind))
    names = [n for n in checkup.PROBLEMS if n in lists]
    cols = st.columns(len(names))
    for col, name in zip(cols, names):
        col.metric(t(f"data.problem.{name}"), counts[name])
    if counts.get("duplicate"):
        demo = path is not None and links.is_demo_file(path)
        st.caption(t("data.dup_note") + (" " + t("data.dup_demo") if demo else ""))
    found = [n for n in names if counts[n]]
    if not found:
        st.success(t("data.healthy"))
        return
    pick, text = st.columns([2, 3])
    name = pick.selectbox(t("data.problems"), found, key="data.problem_list",
                          format_func=lambda n: f"{t(f'data.problem.{n}')} ({counts[n]})")
    needle = text.text_input(t("data.filter"), key="data.problem_filter", placeholder=t("data.filter.placeholder"))
    items = [i for i in lists[name] if not needle or needle.lower() in i["reason"].lower() or needle == str(i["line"])]
    frame = pd.DataFrame(items or [], columns=["line", "reason"]).rename(
        columns={"line": t("data.col.line"), "reason": t("data.col.reason")})
    st.dataframe(frame, hide_index=True, width="stretch", height=min(400, 38 + 35 * max(1, len(items))))
    if counts[name] > len(lists[name]):
        st.caption(t("data.capped", shown=len(lists[name]), n=counts[name]))


@st.cache_data(show_spinner=False, max_entries=256)
def _encoded(text, kind, max_seq_len, tokenizer, home):
    return row_client.encode(text, kind, max_seq_len, tokenizer, home)


@st.cache_data(show_spinner=False, max_entries=32, ttl=600)
def _search(path, mtime_ns, query):
    """A search's hits, kept while the file is unchanged: a rerun (any widget) must not read 256 MB again."""
    return rows.search(path, query)


@st.cache_data(show_spinner=False, max_entries=32, ttl=600)
def _line(path, mtime_ns, number):
    """(a jump's row or None, whether the line is past what a jump reads), kept while the file is unchanged: a
    rerun must not read up to a far line again."""
    try:
        return rows.line(path, number), False
    except rows.TooFar:
        return None, True


def pick_row(path):
    """Search, jump to a line, or one of the first rows -> a rows.Row or None."""
    cols = st.columns([3, 1])
    query = cols[0].text_input(t("data.search"), key=SEARCH_KEY, placeholder=t("data.search.placeholder"))
    jump = cols[1].number_input(t("data.jump"), min_value=1, value=None, step=1, key=LINE_KEY, help=t("data.jump.help"))
    if jump:
        row, too_far = _line(str(path), os.stat(path).st_mtime_ns, int(jump))
        if too_far:
            st.warning(t("data.line_too_far", line=int(jump), mb=rows.SEARCH_BUDGET // 2**20))
        elif row is None:
            st.warning(t("data.no_line", line=int(jump)))
        return row
    if query:
        found, searched, whole = _search(str(path), os.stat(path).st_mtime_ns, query)
        st.caption(t("data.found", n=len(found)) + ("" if whole else " " + t("data.searched", mb=searched // 2**20)))
        candidates = found
    else:
        candidates = rows.read(path, 1, FIRST_ROWS)
    if not candidates:
        return None
    by_line = {r.line: r for r in candidates}
    line = st.selectbox(t("data.row"), list(by_line), key="data.row",
                        format_func=lambda n: f"{t('data.col.line')} {n} · {by_line[n].text[:140]}")
    return by_line.get(line)


def row_panel(path, kind, max_seq_len, tokenizer, home):
    """The chosen row as JSON and as the trainer sees it: token by token, the loss mask coloured."""
    row = pick_row(path)
    if row is None:
        return
    with st.expander(t("data.row.json", line=row.line)):
        st.code(row.text[:rows.MAX_LINE_CHARS], language="json", wrap_lines=True)
    problem = check_record(row.obj, kind) if row.obj is not None else t("data.row.not_json")
    if problem:
        st.error(t("data.row.bad", line=row.line, reason=md(problem)))
        return
    try:
        with st.spinner(t("data.encoding")):
            sequences = _encoded(row.text, kind, max_seq_len, tokenizer, str(home))
    except row_client.RowError as exc:
        st.error(t("data.worker_error", error=md(exc)))
        return
    names = {k: t(f"data.mask.{k}") for k in ("trained", "context", "cut")}
    st.html(maskview.legend_html(names))
    cols = st.columns(len(sequences))
    for col, seq in zip(cols, sequences):
        with col:
            n = maskview.counts(seq)
            st.markdown(t("data.seq", name=t(f"data.seq.{seq['name']}"), length=seq["length"], **n))
            st.html(maskview.to_html(seq, cut_label=f"max_seq_len {max_seq_len}"))
            if seq.get("answer") is not None:
                st.caption(t("data.reference", answer=md(seq["answer"][:500])))


def size_panel(state, train_type, max_seq_len):
    """Truncation figures, the histogram and steps per epoch -> the figures (None before the token phase)."""
    table = state.table
    if table is None:
        st.info(t("data.size.pending") if state.status != "done" else t("data.size.none"))
        return None
    f = sizing.figures(table, max_seq_len)
    if not f["exact"]:
        st.caption(t("data.sampled", n=f["sampled_rows"], rows=f["rows"]))
    cols = st.columns(5)
    cols[0].metric(t("data.truncated"), f"{f['truncated_rows']:,}", f"{f['truncated_share']:.1%}", delta_color="off",
                   delta_arrow="off")
    cols[1].metric(t("data.lost"), f"{f['answer_tokens_lost']:,}", f"{f['answer_lost_share']:.1%}", delta_color="off",
                   delta_arrow="off")
    cols[2].metric(t("data.no_answer_left"), f"{f['rows_without_trained_answer']:,}")
    cols[3].metric(t("data.trained_tokens"), f"{f['trained_tokens_per_epoch']:,}")
    cols[4].metric(t("data.percentiles"), f"{f['p95']} / {f['p99']}", t("data.longest", n=f["longest"]),
                   delta_color="off", delta_arrow="off")
    names = {"total": t("data.hist.total"), "prompt": t("data.hist.prompt"), "answer": t("data.hist.answer"),
             "cut": f"max_seq_len {max_seq_len}", "x": t("data.hist.x"), "y": t("data.hist.y")}
    st.plotly_chart(sizing.histogram(table, max_seq_len, names).update_layout(title=t("data.hist.title")),
                    width="stretch", key="data.histogram")
    cols = st.columns(3)
    batch = cols[0].number_input(t("data.batch"), min_value=1, value=int(train_types.param(train_type, "batch_size").default),
                                 key=f"data.batch.{train_type}")
    accumulation = cols[1].number_input(t("data.accumulation"), min_value=1, key=f"data.accumulation.{train_type}",
                                        value=int(train_types.param(train_type, "accumulation_steps").default))
    gpus = cols[2].number_input(t("data.gpus"), min_value=1, value=1, key="data.gpus")
    batches, steps = sizing.steps_per_epoch(table.total_rows, int(batch), int(accumulation), int(gpus))
    st.markdown(t("data.steps", batches=f"{batches:,}", steps=f"{steps:,}"))
    epoch_times(train_type, table.total_rows)
    return f


def _duration(seconds):
    minutes, s = divmod(round(seconds), 60)
    h, m = divmod(minutes, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s"


def epoch_times(train_type, rows):
    """Time per epoch of this file at the rate of finished runs of the type on this machine."""
    found = estimates.epoch_estimates(train_type, rows)
    if not found:
        st.caption(t("data.estimates.none", type=t(f"type.{train_type}")))
        return
    st.markdown(t("data.estimates"))
    frame = pd.DataFrame([{t("data.est.job"): f"#{e['job']} {e['name']}", t("data.est.size"):
                           f"{e['hidden_size'] or '?'} × {e['num_hidden_layers'] or '?'}", t("data.est.device"): e["device"],
                           t("data.est.rate"): e["samples_per_s"], t("data.est.epoch"): _duration(e["epoch_s"])}
                          for e in found])
    st.dataframe(frame, hide_index=True, width="stretch")


def train_link(path, train_type, max_seq_len, state):
    """The "Train on this file" link: the Train page with the file, the type and the chosen max_seq_len in
    its address (a link, not a button that switches pages from inside a run: it also opens in a new tab)."""
    choices = {"current": max_seq_len}
    if state.table is not None:
        choices["p95"] = sizing.suggest_max_seq_len(state.table, 95)
        choices["p99"] = sizing.suggest_max_seq_len(state.table, 99)
    left, right = st.columns([3, 1])
    pick = left.radio(t("data.suggest"), list(choices), horizontal=True, key="data.suggest",
                      format_func=lambda k: t(f"data.suggest.{k}", n=choices[k]))
    right.page_link(links.TRAIN_PAGE, label=t("data.train"), icon=":material/model_training:",
                    query_params=links.train_params(sources.trainer_value(path), train_type, choices[pick]))
