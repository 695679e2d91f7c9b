"""One data file's report for a training type and `max_seq_len`: what `python -m mmcore data check`
prints and `mmcore.api.check_data` returns.

    report = check("dataset/demo/sft.jsonl", "sft", max_seq_len=512)
    report["bad_rows"]          # [{"line": 7, "reason": "..."}], 1-based lines
    report["truncated_rows"], report["answer_tokens_lost"]

The file is checked against the read roots first (`sources.check`: DataFileError), then scanned by the
data worker (`scans.run`, cached: the Data page and the CLI share their scans).
"""
from dataset.formats import KIND_OF_TYPE
from mmcore.base.i18n import t
from mmcore.data import checkup, scans, sizing, sources
from mmcore.train import train_types


def default_max_seq_len(train_type):
    return int(train_types.param(train_type, "max_seq_len").default)


def problem_lists(health_result, train_type=None):
    """{problem name: [{"line", "reason"}]} of a health result, the tag check only where it applies
    (reasoning data, or a reasoning-distillation type)."""
    lists = dict(health_result["problems"])
    counts = dict(health_result["counts"])
    extra = lists.pop("missing_tags_if_reasoning", None)
    extra_count = counts.pop("missing_tags_if_reasoning", 0)
    if train_type in checkup.REASON_TYPES and extra is not None:
        lists["missing_tags"], counts["missing_tags"] = extra, extra_count
    return lists, counts


def build(state, train_type, max_seq_len, batch_size=None, accumulation_steps=None, gpus=1):
    """The report of a finished scan (`scans.ScanState`) for a type and max_seq_len, as a JSON-able dict."""
    result = state.health
    lists, counts = problem_lists(result, train_type)
    out = {"file": state.report["file"] if state.report else None, "kind": result["kind"], "type": train_type,
           "types": result["types"], "rows": result["rows"], "lines": result["lines"],
           "bad_rows": lists["bad"], "problems": {k: v for k, v in lists.items() if k != "bad"},
           "counts": counts, "max_seq_len": int(max_seq_len)}
    if state.table is not None:
        out.update(sizing.figures(state.table, max_seq_len))
        out["rows"] = result["rows"]
    else:
        out.update(truncated_rows=0, answer_tokens_lost=0, exact=True, sampled_rows=0)
    if train_type is not None:
        batch = batch_size or int(train_types.param(train_type, "batch_size").default)
        accumulation = accumulation_steps or int(train_types.param(train_type, "accumulation_steps").default)
        batches, steps = sizing.steps_per_epoch(result["rows"], batch, accumulation, gpus)
        out.update(batch_size=batch, accumulation_steps=accumulation, gpus=gpus, batches_per_epoch=batches,
                   optimizer_steps_per_epoch=steps)
    return out


def check(value, train_type=None, max_seq_len=None, home=None, tokenizer=None, sample=0, base=None, **steps):
    """Check a data file (path as given, relative to `base` or the working directory) for a training
    type (default: the type its rows fit first) -> the report dict. DataFileError for a file that
    cannot be opened or matches no format; RuntimeError when the scan fails."""
    path = sources.check(value, home, base)
    kind = KIND_OF_TYPE[train_type] if train_type else checkup.detect_file_kind(path)
    if kind is None:  # and the rows it could not even read, if any: a row too long or too deep says so
        raise sources.DataFileError("\n".join([t("data.err.no_kind", path=path), *checkup.head_problems(path)[:3]]))
    if train_type is None:
        train_type = next(k for k, v in KIND_OF_TYPE.items() if v == kind)
    state = scans.run(path, kind, home, tokenizer, sample)
    if state.status != "done":
        raise RuntimeError(t("data.err.scan_failed", error=state.error or state.status))
    return build(state, train_type, max_seq_len or default_max_seq_len(train_type), **steps)


CLI_ROWS = 20  # rows listed under each problem; the rest are counted


def text(report):
    """The report as lines of text for a terminal."""
    lines = [t("data.cli.head", file=report["file"], kind=report["kind"], rows=report["rows"],
               types=", ".join(report["types"]))]
    for item in report["bad_rows"]:
        lines.append(t("data.cli.bad", line=item["line"], reason=item["reason"]))
    for name, items in report["problems"].items():
        if items:
            lines.append(t("data.cli.problem", name=t(f"data.problem.{name}"), n=report["counts"][name]))
            shown = items[:CLI_ROWS]
            lines.extend(t("data.cli.problem_row", line=i["line"], reason=i["reason"]) for i in shown)
            if report["counts"][name] > len(shown):  # say how many the list leaves out
                lines.append(t("data.cli.more", n=report["counts"][name] - len(shown)))
    lines.append(t("data.cli.size", max_seq_len=report["max_seq_len"], truncated=report["truncated_rows"],
                   lost=report["answer_tokens_lost"], p95=report.get("p95", 0), p99=report.get("p99", 0)))
    if "optimizer_steps_per_epoch" in report:
        lines.append(t("data.cli.steps", type=report["type"], batch=report["batch_size"],
                       accumulation=report["accumulation_steps"], batches=report["batches_per_epoch"],
                       steps=report["optimizer_steps_per_epoch"]))
    return lines
