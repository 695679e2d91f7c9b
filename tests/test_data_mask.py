"""The mask the Data page shows is the mask training uses: for sft, dpo and pretrain rows, what the data
worker sends the page (`data_tokens.encode_row`, drawn by `maskview`) equals the labels of the training
dataset built on the whole file, as a trainer builds it; the token table's figures match it too."""
import json

import pytest

from dataset.lm_dataset import IGNORE_INDEX, DPODataset, PretrainDataset, SFTDataset
from mmcore.base.paths import ROOT
from mmcore.data import maskview, sizing
from mmcore.workers import data_tokens

DEMO = ROOT / "dataset" / "demo"
ROWS = (0, 1, 7, 42)


@pytest.fixture(scope="module")
def tok():
    return data_tokens.tokenizer()


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [line for line in f if line.strip()]


def shown_mask(seq):
    """The page's mask: True where it colours a token "trained", over the tokens training keeps."""
    kinds = maskview.classes(seq)
    return [k == "trained" for k in kinds if k != "cut"]


def training_mask(labels):
    return [int(v) != IGNORE_INDEX for v in labels]


@pytest.mark.parametrize("max_seq_len", [24, 512])
@pytest.mark.parametrize("name, kind, cls", [("sft.jsonl", "sft", SFTDataset), ("reason.jsonl", "sft", SFTDataset),
                                             ("pretrain.jsonl", "pretrain", PretrainDataset)])
def test_page_mask_equals_training_mask(tok, name, kind, cls, max_seq_len):
    path = DEMO / name
    training = cls(str(path), tok, max_seq_len)
    text = lines(path)
    for i in ROWS:
        (seq,) = data_tokens.encode_row(text[i], kind, tok, max_seq_len)
        item = training[i]
        assert seq["ids"][:seq["kept"]] == item["input_ids"].tolist()
        assert shown_mask(seq) == training_mask(item["labels"])
        assert any(shown_mask(seq)) or max_seq_len < 32


@pytest.mark.parametrize("max_seq_len", [24, 1024])
def test_dpo_page_masks_equal_training_masks(tok, max_seq_len):
    path = DEMO / "dpo.jsonl"
    training = DPODataset(str(path), tok, max_seq_len)
    text = lines(path)
    for i in ROWS:
        chosen, rejected = data_tokens.encode_row(text[i], "dpo", tok, max_seq_len)
        item = training[i]
        assert (chosen["name"], rejected["name"]) == ("chosen", "rejected")
        assert shown_mask(chosen) == training_mask(item["chosen_labels"])
        assert shown_mask(rejected) == training_mask(item["rejected_labels"])
        assert chosen["ids"][:chosen["kept"]] == item["chosen_input_ids"].tolist()


def test_token_table_agrees_with_the_datasets(tok, tmp_path):
    path = tmp_path / "rows.jsonl"
    text = lines(DEMO / "sft.jsonl")[:60]
    path.write_text("".join(text), encoding="utf-8")
    arrays = data_tokens.token_table(str(path), "sft", tok, list(range(1, 61)))
    table = sizing.TokenTable.from_arrays(arrays, 60, "sft")
    L = 32
    training = SFTDataset(str(path), tok, L)
    full = SFTDataset(str(path), tok, 1 << 30)
    kept = sum(sum(training_mask(training[i]["labels"])) for i in range(60))
    trained_full = sum(sum(training_mask(full[i]["labels"])) for i in range(60))
    f = sizing.figures(table, L)
    assert f["trained_tokens_per_epoch"] == kept
    assert f["answer_tokens_lost"] == trained_full - kept
    assert f["truncated_rows"] == sum(len(full[i]["input_ids"]) > L for i in range(60))
    assert json.loads(text[0])  # the sample really is the file's rows
