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
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from trainer.tokenizer_parts import SPECIAL_TOKENS, iter_texts, save_folder, seed_texts

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "dataset", "demo", "*.jsonl")
DEFAULT_OUT = os.path.join(HERE, "..", "model")
VOCAB_SIZE = 6400


def train_tokenizer(paths, out_dir, vocab_size=VOCAB_SIZE, max_lines=None, char_seed=True):
    """Train on `paths` (jsonl files), plus the Chinese character seed unless `char_seed` is false, and write
    tokenizer.json, vocab.json, merges.txt and tokenizer_config.json into `out_dir`. Returns the trained
    `tokenizers.Tokenizer`."""
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
    save_folder(tokenizer, out_dir)
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
