"""Tool-calling data (SFT and DPO) is trained as upstream's SFT renders it: a first system turn's `functions`
go to the chat template as `tools=` (upstream's DPODataset leaves them out: tests/test_upstream_cases.py), the messages are passed whole (`tool_calls`, `tool` turns), and the
loss covers every assistant turn. The expected ids are the chat template applied to the full messages
with `tools=`; the expected labels follow upstream's rule (from each `<|im_start|>assistant\\n` to the
`<|im_end|>\\n` that closes it)."""
import json

import pytest

from dataset.formats import DataFormatError, validate_file
from dataset.lm_dataset import DPODataset, SFTDataset
from trainer import trainer_utils as tu

FUNCTIONS = [{"name": "get_weather", "description": "Look up the weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "城市"}},
                             "required": ["city"]}}]
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "北京"}}}
CONVERSATION = [
    {"role": "system", "content": "你是MiniMind，可以调用工具。", "functions": FUNCTIONS},
    {"role": "user", "content": "北京今天天气怎么样？"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": json.dumps({"city": "北京", "weather": "晴", "temp": 25}, ensure_ascii=False)},
    {"role": "assistant", "content": "北京今天晴，25度。"},
]
MAX_LENGTH = 1024


@pytest.fixture(scope="module")
def tok():
    return tu.load_tokenizer()


def upstream_ids_and_labels(tok, messages):
    """The chat template over the full messages with the system turn's functions as tools, and labels
    by upstream's rule: every token after `<|im_start|>assistant\\n` up to and including `<|im_end|>\\n`."""
    tools = messages[0].get("functions") if messages[0]["role"] == "system" else None
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=False)
    ids = tok(text, add_special_tokens=False)["input_ids"][:MAX_LENGTH]
    bos = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    eos = tok("<|im_end|>\n", add_special_tokens=False)["input_ids"]
    labels, i = [-100] * len(ids), 0
    while i < len(ids):
        if ids[i:i + len(bos)] == bos:
            start = end = i + len(bos)
            while end < len(ids) and ids[end:end + len(eos)] != eos:
                end += 1
            for j in range(start, min(end + len(eos), len(ids))):
                labels[j] = ids[j]
            i = end + len(eos) if end < len(ids) else len(ids)
        else:
            i += 1
    return ids, labels


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return str(path)


def test_a_tool_calling_sft_row_gives_upstreams_ids_and_labels(tok, tmp_path):
    path = write_jsonl(tmp_path / "sft_tools.jsonl", [{"conversations": CONVERSATION}])
    item = SFTDataset(path, tok, MAX_LENGTH)[0]
    ids, labels = upstream_ids_and_labels(tok, CONVERSATION)
    assert item["input_ids"].tolist() == ids and item["labels"].tolist() == labels
    text = tok.decode(ids)
    assert "<tools>" in text and '"name": "get_weather"' in text and "城市" in text  # the schema is shown
    assert "<tool_response>" in text and text.count("<|im_start|>user") == 2  # the tool result: a user turn
    trained = tok.decode([t for t in item["labels"].tolist() if t != -100])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "北京"}}\n</tool_call>' in trained
    assert "北京今天晴" in trained and "<tool_response>" not in trained and "Tools" not in trained


def test_a_tool_calling_dpo_pair_gives_upstream_sfts_ids_and_labels(tok, tmp_path):
    # OpenAI's shape too: a flat {"name", "arguments"} call with JSON text, and no content beside it.
    rejected = [*CONVERSATION[:2], {"role": "assistant", "content": None,
                                    "tool_calls": [{"name": "get_weather", "arguments": "{\"city\": \"上海\"}"}]}]
    path = write_jsonl(tmp_path / "dpo_tools.jsonl", [{"chosen": CONVERSATION[:3], "rejected": rejected}])
    assert validate_file(path, "dpo") == 1
    item = DPODataset(path, tok, MAX_LENGTH)[0]
    for side, messages in (("chosen", CONVERSATION[:3]), ("rejected", rejected)):
        ids, labels = upstream_ids_and_labels(tok, messages)
        assert item[f"{side}_input_ids"].tolist() == ids and item[f"{side}_labels"].tolist() == labels, side
        assert "get_weather" in tok.decode([t for t in labels if t != -100]), side
    assert '"arguments": {"city": "上海"}}' in tok.decode(item["rejected_input_ids"].tolist())


@pytest.mark.parametrize("message, problem", [
    ({"role": "assistant", "tool_calls": {"name": "f"}}, '"tool_calls" must be a list'),
    ({"role": "assistant", "content": None, "tool_calls": [{"arguments": "{}"}]}, 'must be an object with a "name"'),
    ({"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": 3}]}, '"arguments" must be'),
    ({"role": "assistant", "content": None}, '"content" must be a string'),
    ({"role": "system", "content": "s", "functions": "get_weather"}, '"functions" must be a list of objects'),
])
def test_tool_keys_are_checked_with_the_line_number(tmp_path, message, problem):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"conversations": CONVERSATION},
                                                {"conversations": [{"role": "user", "content": "q"}, message,
                                                                   {"role": "assistant", "content": "a"}]}])
    with pytest.raises(DataFormatError, match="line 2") as error:
        validate_file(path, "sft")
    assert problem in str(error.value)
