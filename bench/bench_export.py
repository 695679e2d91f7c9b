"""Export speed and size per format, and llama.cpp's decoding speed next to our own generate().

For the demo model (64x2) and a 512x8 model (random weights, saved like the trainers save them): the
time `model.export_hf.export` takes to write each format (Llama folder, custom-code folder, GGUF f32 /
f16 / q8_0, a rank-8 LoRA as a PEFT adapter), in all (loading the weight and verifying included), the
verification alone, and the size on disk.
Then greedy tokens/s of the f16 and q8_0 GGUF in llama.cpp (llama-cpp-python, the `export` extra) next
to MiniMind's `generate()` (KV cache, float32) on the same prompt, batch 1, on the CPU.

    python bench/bench_export.py [--sizes 64x2 512x8] [--new-tokens 128] [--threads 2]
"""
import argparse
import importlib.util
import os
import tempfile
import time

import torch

from model.export_files import folder_size
from model.export_hf import export
from model.model_lora import apply_lora, save_lora
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from model.weights import load_model, load_tokenizer

FORMATS = [("llama", {"fmt": "llama"}), ("minimind", {"fmt": "minimind"}),
           ("gguf f32", {"fmt": "gguf", "gguf_type": "f32"}), ("gguf f16", {"fmt": "gguf", "gguf_type": "f16"}),
           ("gguf q8_0", {"fmt": "gguf", "gguf_type": "q8_0"}), ("peft (r=8)", {"fmt": "peft"})]
PROMPT = [{"role": "user", "content": "Tell me a story about a small robot."}]


def make_weights(folder, hidden, layers):
    """A random MiniMind saved in half precision like the trainers, and a rank-8 LoRA on it."""
    torch.manual_seed(0)
    model = MiniMindForCausalLM(MiniMindConfig(hidden_size=hidden, num_hidden_layers=layers))
    weight = os.path.join(folder, f"full_sft_{hidden}.pth")
    torch.save({k: v.half() for k, v in model.state_dict().items()}, weight)
    apply_lora(model, rank=8)
    for name, p in model.named_parameters():
        if ".lora.B." in name:
            p.data.normal_(0, 0.02)
    lora = os.path.join(folder, f"lora_{hidden}.pth")
    save_lora(model, lora)
    return weight, lora


def time_formats(folder, weight, lora):
    """(format, seconds writing, seconds in all, seconds verifying, bytes, verification) per format."""
    rows = []
    for label, kwargs in FORMATS:
        out = os.path.join(folder, label.replace(" ", "_").replace("(", "").replace(")", "").replace("=", ""))
        extra = {"lora": lora} if kwargs.get("fmt") == "peft" else {}
        start = time.perf_counter()
        manifest = export(weight, out, **kwargs, **extra)
        total = time.perf_counter() - start
        v = manifest["verification"]
        rows.append((label, manifest["export_s"], total, v.get("seconds", 0.0), folder_size(out), v))
    return rows


def tokens_per_s_ours(weight, ids, new_tokens, threads):
    torch.set_num_threads(threads)
    model = load_model(weight)
    x = torch.tensor([ids])
    with torch.no_grad():
        model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=4, do_sample=False, pad_token_id=0)
        start = time.perf_counter()
        model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, pad_token_id=0)
    return new_tokens / (time.perf_counter() - start)


def tokens_per_s_llama_cpp(path, ids, new_tokens, threads):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=512, n_threads=threads, n_threads_batch=threads, verbose=False, seed=0)
    llm.eval(ids)
    for _ in range(8):  # warm up
        llm.eval([int(llm.scores[llm.n_tokens - 1].argmax())])
    start = time.perf_counter()
    for _ in range(new_tokens):  # greedy, one token at a time, like generate() with a KV cache
        llm.eval([int(llm.scores[llm.n_tokens - 1].argmax())])
    return new_tokens / (time.perf_counter() - start)


def main():
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # its loading bars would interleave with the table
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["64x2", "512x8"], help="HIDDENxLAYERS models")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    args = parser.parse_args()
    has_llama_cpp = importlib.util.find_spec("llama_cpp") is not None
    ids = load_tokenizer().apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]
    print(f"torch {torch.__version__}, {args.threads} threads, llama-cpp-python "
          f"{'installed' if has_llama_cpp else 'NOT installed (pip install -e .[export])'}")
    for size in args.sizes:
        hidden, layers = map(int, size.lower().split("x"))
        with tempfile.TemporaryDirectory() as folder:
            weight, lora = make_weights(folder, hidden, layers)
            print(f"\n== {hidden}x{layers} ({os.path.getsize(weight) / 1e6:.1f} MB .pth, half precision)")
            print(f"{'format':<12} {'write s':>8} {'in all s':>9} {'verify s':>9} {'size MB':>8}  verification")
            for label, write_s, total, verify_s, size_b, v in time_formats(folder, weight, lora):
                state = "passed" if v["ok"] else "not run" if v["ok"] is None else "FAILED"
                print(f"{label:<12} {write_s:>8.2f} {total:>9.2f} {verify_s:>9.2f} {size_b / 1e6:>8.2f}  {state}: "
                      f"{v['detail']}")
            ours = tokens_per_s_ours(weight, ids, args.new_tokens, args.threads)
            print(f"\ngreedy decoding, {args.new_tokens} tokens, batch 1:")
            print(f"  MiniMind generate() float32, KV cache   {ours:8.1f} tokens/s")
            if not has_llama_cpp:
                print("  llama.cpp: not installed")
                continue
            for gguf_type in ("f16", "q8_0"):
                path = os.path.join(folder, f"gguf_{gguf_type}", f"model-{gguf_type}.gguf")
                speed = tokens_per_s_llama_cpp(path, ids, args.new_tokens, args.threads)
                print(f"  llama.cpp GGUF {gguf_type:<5}                   {speed:8.1f} tokens/s ({speed / ours:.1f}x)")


if __name__ == "__main__":
    main()
