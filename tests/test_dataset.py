"""Dataset classes (dataset/lm_dataset.py), format checks (dataset/formats.py) and the demo data."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader
from transformers import AutoTokenizer

from dataset import make_demo
from dataset.formats import KIND_OF_TYPE
from dataset.lm_dataset import (
    DataFormatError,
    DPODataset,
    PretrainDataset,
    RLAIFDataset,
    SFTDataset,
    dataset_for_type,
    pad_collate,
    validate_file,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "dataset", "demo")

DEMO_FILES = {"pretrain": PretrainDataset, "sft": SFTDataset, "lora_identity": SFTDataset,
              "reason": SFTDataset, "dpo": DPODataset, "rlaif": RLAIFDataset}


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(os.path.join(ROOT, "model"))


def write_jsonl(path, rows):
    """Write rows (objects, or raw strings written as they are) one a line."""
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return str(path)


def conv(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


# --------------------------------------------------------------------------------------------------
# Demo data through the datasets

@pytest.mark.parametrize("name", DEMO_FILES)
def test_demo_file_loads_and_batches(tok, name):
    ds = DEMO_FILES[name](os.path.join(DEMO, f"{name}.jsonl"), tok, max_length=128)
    assert len(ds) == make_demo.SIZES[name]
    batch = next(iter(DataLoader(ds, batch_size=8, collate_fn=pad_collate(tok.pad_token_id))))
    if name == "rlaif":
        assert len(batch["prompt"]) == len(batch["answer"]) == 8
        assert all(p.endswith("<|im_start|>assistant\n") for p in batch["prompt"])
        return
    prefixes = ["chosen_", "rejected_"] if name == "dpo" else [""]
    for p in prefixes:
        ids, labels, mask = batch[p + "input_ids"], batch[p + "labels"], batch[p + "attention_mask"]
        assert ids.dtype == labels.dtype == torch.long
        assert ids.shape == labels.shape == mask.shape and ids.shape[0] == 8 and ids.shape[1] <= 128
        assert (ids[mask == 0] == tok.pad_token_id).all() and (labels[mask == 0] == -100).all()
        assert (labels != -100).any(dim=1).all()  # every row has something to learn


def test_every_training_type_has_a_dataset(tok):
    expected = {"pretrain": PretrainDataset, "sft": SFTDataset, "lora": SFTDataset, "distillation": SFTDataset,
                "distill_reason": SFTDataset, "dpo": DPODataset, "ppo": RLAIFDataset, "grpo": RLAIFDataset,
                "spo": RLAIFDataset}
    assert {t: dataset_for_type(t) for t in KIND_OF_TYPE} == expected
    with pytest.raises(KeyError, match="unknown training type"):
        dataset_for_type("nope")


def test_workers_read_the_same_items_as_the_main_process(tok):
    """Lazy reads with per-process file handles: forked workers see the right lines."""
    ds = SFTDataset(os.path.join(DEMO, "sft.jsonl"), tok, max_length=128)
    loader = DataLoader(ds, batch_size=5, num_workers=2, collate_fn=pad_collate(0))
    ds[7]  # open the file in the parent before the workers fork
    batches = [b for _, b in zip(range(4), loader)]
    direct = pad_collate(0)([ds[i] for i in range(5, 10)])
    assert torch.equal(batches[1]["input_ids"], direct["input_ids"])
    assert torch.equal(batches[1]["labels"], direct["labels"])


# --------------------------------------------------------------------------------------------------
# Item contents

def test_pretrain_item(tok, tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"text": "3+5=8。"}, {"text": "word " * 100}])
    ds = PretrainDataset(path, tok, max_length=16)
    item = ds[0]
    assert item["input_ids"][0] == tok.bos_token_id and item["input_ids"][-1] == tok.eos_token_id
    assert tok.decode(item["input_ids"][1:-1]) == "3+5=8。"
    assert torch.equal(item["labels"], item["input_ids"])
    assert len(ds[1]["input_ids"]) == 16 and ds[1]["input_ids"][0] == tok.bos_token_id


def test_pretrain_text_that_carries_the_markers_gets_none_added(tok, tmp_path):
    # Upstream's pretraining data is already wrapped; bos and eos are added only where missing.
    marked = "<|im_start|>3+5=8。<|im_end|>"
    path = write_jsonl(tmp_path / "p.jsonl", [{"text": marked}, {"text": "<|im_start|>3+5=8。"}])
    ds = PretrainDataset(path, tok, max_length=32)
    ids = ds[0]["input_ids"].tolist()
    assert ids == tok(marked, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.bos_token_id) == 1 and ids.count(tok.eos_token_id) == 1
    assert ds[1]["input_ids"].tolist() == tok(marked, add_special_tokens=False)["input_ids"]  # eos added only


def test_sft_loss_mask_covers_exactly_assistant_content_and_end(tok, tmp_path):
    messages = conv(("system", "你是MiniMind。"), ("user", "3+5=?"), ("assistant", "3+5=8"),
                    ("user", "Who are you?"), ("assistant", "<think>\nme\n</think>\n<answer>\nMiniMind\n</answer>"))
    ds = SFTDataset(write_jsonl(tmp_path / "s.jsonl", [{"conversations": messages}]), tok, max_length=512)
    item = ds[0]
    ids, labels = item["input_ids"].tolist(), item["labels"].tolist()
    assert tok.decode(ids) == tok.apply_chat_template(messages, tokenize=False)
    # Collect the labelled runs: each must be one assistant reply followed by <|im_end|> and the newline
    # after it, as upstream's loss mask.
    runs, current = [], []
    for i, label in zip(ids, labels):
        if label != -100:
            assert label == i
            current.append(i)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    assert [tok.decode(r) for r in runs] == ["3+5=8<|im_end|>\n",
                                             "<think>\nme\n</think>\n<answer>\nMiniMind\n</answer><|im_end|>\n"]
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    end = ids.index(tok.eos_token_id, ids.index(tok("3+5=8", add_special_tokens=False)["input_ids"][-1]))
    assert labels[end:end + 2] == [tok.eos_token_id] + newline and labels[end + 2] == -100  # next turn unlabelled


def test_sft_truncation_keeps_labels_aligned(tok, tmp_path):
    messages = conv(("user", "hi"), ("assistant", "a very long answer " * 20))
    ds = SFTDataset(write_jsonl(tmp_path / "s.jsonl", [{"conversations": messages}]), tok, max_length=24)
    item = ds[0]
    assert len(item["input_ids"]) == len(item["labels"]) == 24
    assert item["labels"][-1] == item["input_ids"][-1]  # cut inside the reply: labelled up to the end


def test_dpo_item_labels_only_assistant(tok, tmp_path):
    row = {"chosen": conv(("user", "3+5=?"), ("assistant", "8")),
           "rejected": conv(("user", "3+5=?"), ("assistant", "9 I think"))}
    item = DPODataset(write_jsonl(tmp_path / "d.jsonl", [row]), tok, max_length=64)[0]
    for side, reply in (("chosen", "8"), ("rejected", "9 I think")):
        ids, labels = item[f"{side}_input_ids"], item[f"{side}_labels"]
        assert tok.decode(ids[labels != -100]) == reply + "<|im_end|>\n"
    batch = pad_collate(0)([item, item])
    assert batch["chosen_attention_mask"].shape == batch["chosen_input_ids"].shape
    assert batch["rejected_attention_mask"].sum() == 2 * len(item["rejected_input_ids"])


def test_rlaif_item(tok, tmp_path):
    rows = [{"conversations": conv(("system", "Be brief."), ("user", "3+5=?"), ("assistant", "8"))},
            {"conversations": [{"content": "2+2=?"}, {"content": ""}]}]  # upstream style: no roles
    ds = RLAIFDataset(write_jsonl(tmp_path / "r.jsonl", rows), tok, max_length=64)
    assert ds[0] == {"prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n3+5=?<|im_end|>\n"
                               "<|im_start|>assistant\n", "answer": "8"}
    assert ds[1]["prompt"].endswith("<|im_start|>user\n2+2=?<|im_end|>\n<|im_start|>assistant\n")
    assert ds[1]["answer"] == ""


def test_pad_collate_pads_to_longest_row():
    batch = pad_collate(7)([{"input_ids": torch.tensor([1, 2, 3]), "labels": torch.tensor([-100, 2, 3]), "s": "a"},
                            {"input_ids": torch.tensor([4]), "labels": torch.tensor([4]), "s": "b"}])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 7, 7]]
    assert batch["labels"].tolist() == [[-100, 2, 3], [4, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["s"] == ["a", "b"]


# --------------------------------------------------------------------------------------------------
# Errors

@pytest.mark.parametrize("cls,rows,message", [
    (PretrainDataset, [{"text": "ok"}, {"text": "ok"}, '{"text": "unterminated'], "line 3: invalid JSON"),
    (PretrainDataset, [{"text": "ok"}, {"txt": "typo"}], 'line 2: missing key "text"'),
    (PretrainDataset, [{"text": 5}], 'line 1: "text" must be a string'),
    (PretrainDataset, ["[1, 2]"], "line 1: expected a JSON object"),
    (SFTDataset, [{"conversations": conv(("user", "q"), ("assistant", "a"))}, {"text": "x"}],
     'line 2: missing key "conversations"'),
    (SFTDataset, [{"conversations": [{"role": "user"}]}], 'line 1: "conversations"\\[0\\] has no "content"'),
    (SFTDataset, [{"conversations": conv(("robot", "q"), ("assistant", "a"))}], "line 1: .*unknown role 'robot'"),
    (SFTDataset, [{"conversations": conv(("user", "q"))}], "line 1: .*no assistant turn"),
    (SFTDataset, [{"conversations": []}], "line 1: .*non-empty list"),
    (DPODataset, [{"chosen": conv(("user", "q"), ("assistant", "a"))}], 'line 1: missing key "rejected"'),
    (RLAIFDataset, [{"conversations": conv(("user", "q"))}], "line 1: .*prompt turn followed by"),
    (RLAIFDataset, [{"conversations": conv(("assistant", "a"), ("user", "q"))}], "line 1: the last turn"),
])
def test_bad_line_names_file_and_line(tok, tmp_path, cls, rows, message):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataFormatError, match=re.escape(path) + ".*" + message):
        cls(path, tok, max_length=32)


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tok, tmp_path):
    path = write_jsonl(tmp_path / "b.jsonl", [{"text": "a"}, "", "   ", {"text": "b"}, "{oops"])
    with pytest.raises(DataFormatError, match="line 5: invalid JSON"):
        PretrainDataset(path, tok, max_length=8)
    path = write_jsonl(tmp_path / "ok.jsonl", [{"text": "a"}, "", {"text": "b"}])
    ds = PretrainDataset(path, tok, max_length=8)
    assert len(ds) == 2 and tok.decode(ds[1]["input_ids"][1:-1]) == "b"


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file_is_an_error(tok, tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=re.escape(str(path)) + ".*no data"):
        SFTDataset(str(path), tok, max_length=32)


def test_missing_file_is_a_clear_error(tok, tmp_path):
    with pytest.raises(FileNotFoundError, match="data file not found: .*missing.jsonl"):
        PretrainDataset(str(tmp_path / "missing.jsonl"), tok, max_length=32)


def test_non_utf8_line(tok, tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataFormatError, match="line 2: not UTF-8"):
        PretrainDataset(str(path), tok, max_length=32)


def test_validate_file_and_max_lines(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [{"text": "a"}, {"text": "b"}, "not json"])
    assert validate_file(path, "pretrain", max_lines=2) == 2
    with pytest.raises(DataFormatError, match="line 3"):
        validate_file(path, "pretrain")
    with pytest.raises(ValueError, match="unknown data kind"):
        validate_file(path, "nope")


def test_validate_file_does_not_import_torch():
    code = ("import sys; from dataset.formats import validate_file; "
            f"n = validate_file({os.path.join(DEMO, 'dpo.jsonl')!r}, 'dpo', max_lines=50); "
            "assert n == 50, n; assert 'torch' not in sys.modules and 'transformers' not in sys.modules; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# --------------------------------------------------------------------------------------------------
# Demo data

def test_make_demo_reproduces_committed_files(tmp_path):
    paths = make_demo.write_demo(str(tmp_path))
    assert set(paths) == set(DEMO_FILES)
    for name, path in paths.items():
        with open(path, "rb") as new, open(os.path.join(DEMO, f"{name}.jsonl"), "rb") as committed:
            assert new.read() == committed.read(), f"{name}.jsonl differs from make_demo.py's output"


def test_demo_folder_is_small():
    total = sum(os.path.getsize(os.path.join(DEMO, f)) for f in os.listdir(DEMO))
    assert total < 5 * 1024 * 1024


def test_demo_files_validate():
    kinds = {"pretrain": "pretrain", "sft": "sft", "lora_identity": "sft", "reason": "sft",
             "dpo": "dpo", "rlaif": "rlaif"}
    for name, kind in kinds.items():
        assert validate_file(os.path.join(DEMO, f"{name}.jsonl"), kind) == make_demo.SIZES[name]


ARITH = re.compile(r"(\d)\s*(\+|-|plus|minus|加|减)\s*(\d)")


def _arith(question):
    a, op, b = ARITH.search(question).groups()
    return int(a) + int(b) if op in ("+", "plus", "加") else int(a) - int(b)


def test_demo_reasoning_and_rl_data_are_one_checkable_task_family():
    """reason.jsonl replies have the exact format the GRPO reward checks; rlaif references are correct."""
    reply = re.compile(r"^<think>\n(.+)\n</think>\n<answer>\n(.+)\n</answer>$", re.S)
    with open(os.path.join(DEMO, "reason.jsonl"), encoding="utf-8") as f:
        for line in f:
            user, assistant = json.loads(line)["conversations"]
            m = reply.match(assistant["content"])
            assert m, assistant["content"]
            if ARITH.search(user["content"]):
                assert m.group(2) == str(_arith(user["content"]))
    with open(os.path.join(DEMO, "rlaif.jsonl"), encoding="utf-8") as f:
        for line in f:
            user, assistant = json.loads(line)["conversations"]
            assert user["role"] == "user" and assistant["role"] == "assistant"
            assert assistant["content"] == str(_arith(user["content"]))


def test_demo_identity_data_is_bilingual():
    with open(os.path.join(DEMO, "lora_identity.jsonl"), encoding="utf-8") as f:
        replies = [json.loads(line)["conversations"][-1]["content"] for line in f]
    assert all("MiniMind" in r for r in replies)
    assert any(r.startswith("I am MiniMind") for r in replies) and any(r.startswith("我是MiniMind") for r in replies)
