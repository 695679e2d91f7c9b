"""The shipped tokenizer (model/) and trainer/train_tokenizer.py."""
import filecmp
import json
import os

import pytest
from transformers import AutoTokenizer

from trainer import train_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "model")


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(MODEL_DIR)


def test_special_tokens_and_ids(tok):
    assert tok.is_fast
    assert len(tok) == 6400
    assert [tok.convert_ids_to_tokens(i) for i in (0, 1, 2)] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 0)
    # Special tokens in text become their single ids; nothing is added implicitly.
    assert tok("<|im_start|>hi<|im_end|>")["input_ids"][0] == 1
    assert tok("<|im_start|>hi<|im_end|>")["input_ids"][-1] == 2
    assert tok("hi")["input_ids"] == tok("hi", add_special_tokens=False)["input_ids"]


def test_loads_relative_from_trainer_dir(monkeypatch):
    monkeypatch.chdir(os.path.join(ROOT, "trainer"))
    tok = AutoTokenizer.from_pretrained("../model")
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)


def test_chat_template_with_system_turn(tok):
    messages = [{"role": "system", "content": "你是MiniMind。"},
                {"role": "user", "content": "3+5=?"},
                {"role": "assistant", "content": "8"}]
    assert tok.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>system\n你是MiniMind。<|im_end|>\n"
        "<|im_start|>user\n3+5=?<|im_end|>\n"
        "<|im_start|>assistant\n8<|im_end|>\n")


def test_chat_template_default_system_prompt_and_generation_prompt(tok):
    messages = [{"role": "user", "content": "Hello!"}]
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
        "<|im_start|>user\nHello!<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert not tok.apply_chat_template(messages, tokenize=False).endswith("assistant\n")


def test_multi_turn_template(tok):
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text.count("<|im_start|>") == 5 and text.endswith("<|im_start|>assistant\nd<|im_end|>\n")


@pytest.mark.parametrize("text", [
    "MiniMind 是一个小型语言模型，can answer questions. 3+5=8！",
    "混合 text 🚀 with 中文, ʕ•ᴥ•ʔ, tabs\tand  spaces\n\nnew lines",
    "<think>\n3+5：3加5等于8\n</think>\n<answer>\n8\n</answer>",
    "生僻字：龘靐齉爩 and Ünïcödé",
])
def test_round_trip(tok, text):
    ids = tok(text)["input_ids"]
    assert 0 not in ids  # byte-level: nothing becomes <|endoftext|> (unk)
    assert tok.decode(ids) == text


def test_think_and_answer_tags_are_plain_text(tok):
    text = "<think>\nx\n</think>\n<answer>\n1\n</answer>"
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text
    assert "<think>" not in tok.all_special_tokens


def test_common_chinese_characters_are_single_tokens(tok):
    for ch in "的一是了我不人在他有这个上们来到时大地为子中你说生国年着就那和要她出也得里后自以会":
        assert len(tok(ch, add_special_tokens=False)["input_ids"]) == 1, ch


def test_train_tokenizer_cli_on_a_small_corpus(tmp_path):
    data = tmp_path / "corpus.jsonl"
    lines = [{"text": "hello world, 你好世界"}, {"conversations": [{"role": "user", "content": "1+1=?"},
                                                               {"role": "assistant", "content": "2"}]}]
    data.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines * 20) + "\n", encoding="utf-8")
    out = tmp_path / "tok"
    train_tokenizer.main(["--data", str(data), "--out", str(out), "--vocab_size", "300", "--char_seed", "0"])
    tok = AutoTokenizer.from_pretrained(str(out))
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.decode(tok("hello 你好 new words")["input_ids"]) == "hello 你好 new words"
    assert {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(out))


def test_train_tokenizer_missing_data_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        train_tokenizer.main(["--data", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "out")])


def test_shipped_tokenizer_is_reproduced_by_the_script(tmp_path):
    """model/ holds exactly what train_tokenizer.py writes from the committed demo data."""
    train_tokenizer.main(["--out", str(tmp_path)])
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        assert filecmp.cmp(tmp_path / name, os.path.join(MODEL_DIR, name), shallow=False), name
