"""Rows through the trainers' own dataset classes: token ids, loss masks, lengths (torch; child processes only).

Nothing here re-implements a chat template or a mask: a row is written to a one-row jsonl file and
read back by `dataset.lm_dataset.dataset_for_type(...)`, exactly as a trainer reads its data (RL
prompts are cut by `trainer.rl.rollout.encode_prompts`, as the RL trainers cut them). So the Data
page's mask is training's mask (tests/test_data_mask.py holds them equal).

- `encode_row(text, kind, tokenizer, max_seq_len)`: one row, for the row view.
- `token_table(path, kind, tokenizer, lines)`: every row of a (valid) jsonl at full length, as the
  arrays of `mmcore.data.sizing.TokenTable`.
"""
import os
import tempfile

import numpy as np

from dataset.formats import KIND_OF_TYPE
from dataset.lm_dataset import IGNORE_INDEX, dataset_for_type

FULL = 1 << 30  # "no truncation": the longest a row can be
_TYPE_OF_KIND = {}
for _type, _kind in KIND_OF_TYPE.items():
    _TYPE_OF_KIND.setdefault(_kind, _type)
_tokenizers = {}


def tokenizer(path=None):
    """The tokenizer in folder `path` (default: the bundled one), loaded once per process."""
    from model.weights import load_tokenizer
    key = os.path.realpath(path) if path else None
    if key not in _tokenizers:
        _tokenizers[key] = load_tokenizer(path)
    return _tokenizers[key]


def dataset(path, kind, tok, max_length):
    """The dataset class the trainers of `kind` use, over `path`."""
    return dataset_for_type(_TYPE_OF_KIND[kind])(path, tok, max_length)


def _one_row_file(text):
    fd, path = tempfile.mkstemp(suffix=".jsonl", prefix="minimind-row-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text.strip() + "\n")
    return path


def _pieces(tok, ids):
    """Each token's text (a multi-byte character split across tokens shows as its bytes' replacement)."""
    return [tok.decode([i]) for i in ids]


def encode_row(text, kind, tok, max_seq_len):
    """The sequences a trainer makes of one row (its JSON line): a list of {"name", "ids", "tokens",
    "trained", "kept", "length", "labels"} where `ids`/`tokens` are the whole row untruncated, `kept`
    how many of them training keeps at `max_seq_len` (RL: the last ones), `trained` one bool per token
    (the dataset's labels at `max_seq_len`, False beyond the cut) and `labels` the dataset's labels
    themselves (-100 where no loss counts). RL rows also carry "answer" (the reference, not trained)."""
    path = _one_row_file(text)
    try:
        full, cut = dataset(path, kind, tok, FULL)[0], dataset(path, kind, tok, max_seq_len)[0]
    finally:
        os.unlink(path)
    if kind == "rlaif":
        from trainer.rl.rollout import encode_prompts
        ids = tok(full["prompt"], add_special_tokens=False)["input_ids"]
        kept_ids, _ = encode_prompts(tok, [cut["prompt"]], max_seq_len, "cpu")
        kept = kept_ids.shape[1]
        return [{"name": "prompt", "ids": ids, "tokens": _pieces(tok, ids), "trained": [False] * len(ids),
                "kept": kept, "keep_end": True, "length": len(ids), "labels": [IGNORE_INDEX] * kept,
                "answer": full["answer"]}]
    sides = [("chosen", "chosen_"), ("rejected", "rejected_")] if kind == "dpo" else [("row", "")]
    out = []
    for name, prefix in sides:
        ids = full[f"{prefix}input_ids"].tolist()
        labels = cut[f"{prefix}labels"].tolist()
        trained = [i < len(labels) and labels[i] != IGNORE_INDEX for i in range(len(ids))]
        out.append({"name": name, "ids": ids, "tokens": _pieces(tok, ids), "trained": trained, "kept": len(labels),
                    "keep_end": False, "length": len(ids), "labels": labels})
    return out


def _spans(labels):
    """[(start, end)] of the runs of trained positions in a labels list/tensor."""
    mask = np.asarray(labels) != IGNORE_INDEX
    if not mask.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def token_table(path, kind, tok, lines, progress=None, every=500):
    """The `TokenTable` arrays of every row of valid jsonl `path` (row i is file line `lines[i]`)."""
    ds = dataset(path, kind, tok, FULL)
    cols = {k: [] for k in ("seq_line", "seq_side", "seq_len", "seq_prompt", "seq_answer")}
    span_seq, span_start, span_end = [], [], []

    def add(line, side, length, prompt, answer, spans=()):
        for start, end in spans:
            span_seq.append(len(cols["seq_line"]))
            span_start.append(start)
            span_end.append(end)
        for key, value in zip(cols, (line, side, length, prompt, answer)):
            cols[key].append(value)

    for i in range(len(ds)):
        item = ds[i]
        line = lines[i]
        if kind == "rlaif":
            prompt = len(tok(item["prompt"], add_special_tokens=False)["input_ids"])
            answer = len(tok(item["answer"], add_special_tokens=False)["input_ids"])
            add(line, 0, prompt, prompt, answer)
        else:
            sides = [("chosen_", 0), ("rejected_", 1)] if kind == "dpo" else [("", 0)]
            for prefix, side in sides:
                labels = item[f"{prefix}labels"]
                spans = _spans(labels)
                trained = sum(e - s for s, e in spans)
                add(line, side, len(labels), len(labels) - trained, trained, spans)
        if progress is not None and (i + 1) % every == 0:
            progress(i + 1, len(ds))
    if progress is not None:
        progress(len(ds), len(ds))
    arrays = {k: np.asarray(v, dtype=np.int64 if k == "seq_line" else np.int32) for k, v in cols.items()}
    arrays.update(span_seq=np.asarray(span_seq, dtype=np.int32), span_start=np.asarray(span_start, dtype=np.int32),
                  span_end=np.asarray(span_end, dtype=np.int32))
    return arrays
