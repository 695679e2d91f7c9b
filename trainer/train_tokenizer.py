"""Train MiniMind's byte-level BPE tokenizer and write it in Hugging Face format.

The result loads with `AutoTokenizer.from_pretrained(out_dir)` as a fast tokenizer:
vocabulary 6400, ids 0/1/2 = `<|endoftext|>` (pad, unk), `<|im_start|>` (bos), `<|im_end|>` (eos),
and a ChatML chat template that inserts a default system prompt when the conversation has none.
Byte-level BPE has every byte in its alphabet, so any text (Chinese, English, emoji) round-trips.

By default it trains on the bundled demo corpus (every file in ../dataset/demo) and writes ../model:

    cd trainer && python train_tokenizer.py
    python train_tokenizer.py --data ../dataset/pretrain_hq.jsonl --out ../my_tokenizer --max_lines 100000

Note: a model trained with one tokenizer cannot be used with another; retrain the tokenizer only
when starting from scratch.
"""
import argparse
import glob
import itertools
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "dataset", "demo", "*.jsonl")
DEFAULT_OUT = os.path.join(HERE, "..", "model")
VOCAB_SIZE = 6400
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant"

# ChatML. The first turn may be a system turn; without one the default system prompt is used.
# `add_generation_prompt` opens the assistant turn for generation. `<think>`/`<answer>` are plain text.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if not (loop.first and message['role'] == 'system') -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif -%}"
)


def gb2312_characters(first_row, last_row):
    """The characters of GB2312 rows first_row..last_row (stdlib codec, no download needed).
    Rows 0xA1-0xA3 are CJK and full-width punctuation, 0xB0-0xD7 the 3755 most common hanzi (level 1),
    0xD8-0xF7 the 3008 less common ones (level 2)."""
    chars = []
    for row in range(first_row, last_row + 1):
        for col in range(0xA1, 0xFF):
            try:
                chars.append(bytes([row, col]).decode("gb2312"))
            except UnicodeDecodeError:  # unassigned code points
                pass
    return chars


def seed_texts():
    """Chinese characters added to the training text, one per line.

    A small corpus (like the demo data) yields far fewer than 6400 merges. Seeding every common Chinese
    character makes each one a single token, whatever the data, and fills the vocabulary: the common
    ones are seen twice so their merges come before the rarer level-2 characters, which fill the rest.
    """
    common = gb2312_characters(0xA1, 0xA3) + gb2312_characters(0xB0, 0xD7)
    yield "\n".join(common)
    yield "\n".join(common)
    yield "\n".join(gb2312_characters(0xD8, 0xF7))


def iter_texts(paths, max_lines=None):
    """Yield the training text of jsonl files of any MiniMind format: pretrain "text", and the role
    and content of every message in "conversations" / "chosen" / "rejected"."""
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if max_lines is not None and i >= max_lines:
                    break
                if not line.strip():
                    continue
                obj = json.loads(line)
                if "text" in obj:
                    yield str(obj["text"])
                for key in ("conversations", "chosen", "rejected"):
                    messages = obj.get(key) or []
                    # The words the chat template adds (role names, default system prompt) count as
                    # often as they occur in rendered conversations, so they become single tokens.
                    if messages and messages[0].get("role") != "system":
                        yield f"system\n{DEFAULT_SYSTEM_PROMPT}"
                    for message in messages:
                        yield f"{message.get('role', '')}\n{message.get('content', '')}"


def tokenizer_config():
    """The tokenizer_config.json of a MiniMind tokenizer (upstream's fields)."""
    added = {str(i): {"content": tok, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, tok in enumerate(SPECIAL_TOKENS)}
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [],
        "bos_token": "<|im_start|>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "legacy": True,
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
    }


def train_tokenizer(paths, out_dir, vocab_size=VOCAB_SIZE, max_lines=None, char_seed=True):
    """Train on `paths` (jsonl files), plus the Chinese character seed unless `char_seed` is false, and write tokenizer.json, vocab.json, merges.txt and
    tokenizer_config.json into `out_dir`. Returns the trained `tokenizers.Tokenizer`."""
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing or not paths:
        raise FileNotFoundError(f"training data not found: {', '.join(missing) or '(no files given)'}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: nothing is ever unknown
    )
    texts = iter_texts(paths, max_lines)
    if char_seed:
        texts = itertools.chain(texts, seed_texts())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.decoder = decoders.ByteLevel()
    for i, tok in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(tok) == i, f"{tok} must have id {i}"

    os.makedirs(out_dir, exist_ok=True)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    tokenizer.model.save(out_dir)  # vocab.json + merges.txt, for tools that read the BPE files
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, ensure_ascii=False, indent=4)
        f.write("\n")
    return tokenizer


def check_tokenizer(out_dir):
    """Load the written tokenizer with transformers and print a chat-template sample and a round trip."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    messages = [{"role": "user", "content": "3+5等于几？"},
                {"role": "assistant", "content": "<think>\n3+5：3加5等于8\n</think>\n<answer>\n8\n</answer>"}]
    text = tok.apply_chat_template(messages, tokenize=False)
    ids = tok(text)["input_ids"]
    print(text)
    print(f"vocab size: {len(tok)}  sample tokens: {len(ids)}  "
          f"round trip: {tok.decode(ids, skip_special_tokens=False) == text}")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Train the MiniMind byte-level BPE tokenizer")
    parser.add_argument("--data", nargs="+", default=[DEFAULT_DATA],
                        help="jsonl files or glob patterns (default: the bundled demo corpus)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: ../model)")
    parser.add_argument("--vocab_size", type=int, default=VOCAB_SIZE)
    parser.add_argument("--max_lines", type=int, default=None, help="read at most this many lines per file")
    parser.add_argument("--char_seed", type=int, default=1, choices=(0, 1),
                        help="add the common Chinese characters (GB2312) to the training text (default 1)")
    args = parser.parse_args(argv)
    paths = sorted(p for pattern in args.data for p in (glob.glob(pattern) or [pattern]))
    tokenizer = train_tokenizer(paths, args.out, args.vocab_size, args.max_lines, bool(args.char_seed))
    print(f"trained on {len(paths)} file(s); vocabulary {tokenizer.get_vocab_size()}; written to {os.path.abspath(args.out)}")
    check_tokenizer(args.out)


if __name__ == "__main__":
    main()
