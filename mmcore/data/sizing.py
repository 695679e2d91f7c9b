"""Token-length figures of a data file against a `max_seq_len`: truncation, answer tokens lost,
trained tokens and steps per epoch, and the length histogram.

The data worker encodes rows once at their full length with the trainers' dataset classes and keeps,
per sequence (a row; a DPO row has two: chosen and rejected), its length, its context and trained
token counts, and the spans of trained tokens (`TokenTable`). A dataset truncates a row by keeping
its first `max_seq_len` tokens, and its loss mask on those is the full row's mask cut there, so every
figure for any `max_seq_len` follows from the table without encoding again. When the worker encoded
a sample of the rows, counts are scaled to the whole file (`scale`).
"""
import math
from dataclasses import dataclass

import numpy as np

FIELDS = ("seq_line", "seq_side", "seq_len", "seq_prompt", "seq_answer", "span_seq", "span_start", "span_end")


@dataclass
class TokenTable:
    seq_line: np.ndarray  # 1-based line of each sequence
    seq_side: np.ndarray  # 0: the row (DPO: chosen), 1: DPO rejected
    seq_len: np.ndarray  # tokens of the whole sequence, untruncated
    seq_prompt: np.ndarray  # context tokens (not trained); RL data: the prompt
    seq_answer: np.ndarray  # trained tokens; RL data: the reference answer (not trained)
    span_seq: np.ndarray  # for each trained span: its sequence's index
    span_start: np.ndarray
    span_end: np.ndarray
    total_rows: int  # valid rows in the file
    kind: str

    @property
    def sampled_rows(self):
        return int(np.unique(self.seq_line).size)

    @property
    def scale(self):
        return self.total_rows / self.sampled_rows if self.sampled_rows else 0.0

    @property
    def exact(self):
        return self.sampled_rows == self.total_rows

    def row_lengths(self):
        """Per row: the longest of its sequences (what max_seq_len must hold)."""
        if self.kind != "dpo":
            return self.seq_len
        return np.maximum(self.seq_len[self.seq_side == 0], self.seq_len[self.seq_side == 1])

    @classmethod
    def from_arrays(cls, arrays, total_rows, kind):
        return cls(**{f: np.asarray(arrays[f]) for f in FIELDS}, total_rows=int(total_rows), kind=kind)

    def arrays(self):
        return {f: getattr(self, f) for f in FIELDS}


def figures(table, max_seq_len):
    """What a `max_seq_len` does to the file: a dict of counts for the whole file (scaled from the
    sample when the table is one) and shares."""
    L = int(max_seq_len)
    scale = table.scale
    cut = table.seq_len > L
    truncated_rows = int(np.unique(table.seq_line[cut]).size)
    spans = table.span_end - table.span_start
    kept = np.clip(np.minimum(table.span_end, L) - table.span_start, 0, None)
    lost = int((spans - kept).sum())
    answer = int(spans.sum())
    kept_per_seq = np.bincount(table.span_seq, weights=kept, minlength=table.seq_len.size)
    no_answer_left = (table.seq_answer > 0) & (kept_per_seq == 0)
    if table.kind == "rlaif":  # RL trains on generated answers; only the prompt can be cut
        lost = answer = 0
        no_answer_left = np.zeros_like(cut)
    trained = int(np.minimum(table.seq_len, L).sum()) if table.kind == "pretrain" else int(kept.sum())
    sampled = table.sampled_rows
    return {
        "max_seq_len": L,
        "rows": table.total_rows,
        "sampled_rows": sampled,
        "exact": table.exact,
        "truncated_rows": round(truncated_rows * scale),
        "truncated_share": truncated_rows / sampled if sampled else 0.0,
        "answer_tokens": round(answer * scale),
        "answer_tokens_lost": round(lost * scale),
        "answer_lost_share": lost / answer if answer else 0.0,
        "rows_without_trained_answer": round(int(np.unique(table.seq_line[no_answer_left]).size) * scale),
        "trained_tokens_per_epoch": round(trained * scale),
        "p50": percentile(table, 50), "p95": percentile(table, 95), "p99": percentile(table, 99),
        "longest": int(table.row_lengths().max()) if sampled else 0,
    }


def percentile(table, q):
    """The `q`th percentile of the rows' token lengths (0 for an empty table)."""
    lengths = table.row_lengths()
    return math.ceil(float(np.percentile(lengths, q))) if lengths.size else 0


def suggest_max_seq_len(table, q=95, multiple=8):
    """A max_seq_len that holds `q`% of the rows whole, rounded up to a multiple of `multiple`."""
    return max(multiple, math.ceil(percentile(table, q) / multiple) * multiple)


def steps_per_epoch(rows, batch_size, accumulation_steps=1, gpus=1):
    """(batches, optimizer steps) per epoch: each of `gpus` ranks gets ceil(rows / gpus) rows
    (DistributedSampler pads), in batches of `batch_size`, an optimizer step every `accumulation_steps`."""
    if rows <= 0 or batch_size <= 0:
        return 0, 0
    per_rank = math.ceil(rows / max(1, gpus))
    batches = math.ceil(per_rank / batch_size)
    return batches, math.ceil(batches / max(1, accumulation_steps))


def histogram(table, max_seq_len, names):
    """A plotly figure of the rows' token lengths (chat data: also context and trained tokens apart),
    with `max_seq_len` marked. `names`: {"total", "prompt", "answer", "cut"} -> legend text."""
    import plotly.graph_objects as go

    fig = go.Figure()
    main = table.seq_side == 0
    fig.add_trace(go.Histogram(x=table.row_lengths(), name=names["total"], opacity=0.6, nbinsx=60))
    if table.kind in ("sft", "dpo", "rlaif"):
        fig.add_trace(go.Histogram(x=table.seq_prompt[main], name=names["prompt"], opacity=0.5, nbinsx=60))
        fig.add_trace(go.Histogram(x=table.seq_answer[main], name=names["answer"], opacity=0.5, nbinsx=60))
    fig.add_vline(x=max_seq_len, line_dash="dash", line_color="red", annotation_text=names["cut"])
    fig.update_layout(barmode="overlay", height=320, margin={"l": 10, "r": 10, "t": 30, "b": 10},
                      xaxis_title=names["x"], yaxis_title=names["y"], legend={"orientation": "h"})
    return fig
