"""Generation speed of MiniMind with and without the KV cache.

Greedy-decodes exactly `--new-tokens` tokens (min_new_tokens forces it) from random prompts with
randomly initialised models, and prints generated tokens per second for each model size, batch
size and cache setting, plus the speed-up the cache gives. Target: the cache makes 256-token
generation of the 512x8 model at least 5x faster than recomputing the whole sequence every step.

    python3 bench/bench_generate.py                       # 512x8 and 64x2, batch 1 and 8, on cuda if present
    python3 bench/bench_generate.py --sizes 512x8 --batch-sizes 1 --device cpu --threads 1
"""
import argparse
import time

import torch

from model.model_minimind import MiniMindConfig, MiniMindForCausalLM


def parse_size(text):
    hidden, layers = text.lower().split("x")
    return int(hidden), int(layers)


def timed_generate(model, prompts, new_tokens, use_cache):
    if prompts.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, use_cache=use_cache, pad_token_id=0)
    if prompts.device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    assert out.shape[1] == prompts.shape[1] + new_tokens
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["512x8", "64x2"], help="HIDDENxLAYERS models to time")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for torch (0: torch's default); 1 gives steadier figures on a busy machine")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    print(f"device {args.device}, dtype {args.dtype}, {torch.get_num_threads()} CPU threads, "
          f"{args.new_tokens} new tokens, prompt {args.prompt_len} tokens")
    print(f"{'model':>7} {'batch':>5} {'cache':>5} {'seconds':>8} {'tokens/s':>9} {'speed-up':>8}")
    for size in args.sizes:
        hidden, layers = parse_size(size)
        model = MiniMindForCausalLM(MiniMindConfig(hidden_size=hidden, num_hidden_layers=layers))
        model = model.to(args.device, getattr(torch, args.dtype)).eval()
        for batch in args.batch_sizes:
            prompts = torch.randint(3, model.config.vocab_size, (batch, args.prompt_len), device=args.device)
            timed_generate(model, prompts, 8, use_cache=True)  # warm-up: kernels, allocator
            seconds = {}
            for use_cache in (True, False):
                seconds[use_cache] = timed_generate(model, prompts, args.new_tokens, use_cache)
                rate = batch * args.new_tokens / seconds[use_cache]
                speedup = f"{seconds[False] / seconds[True]:7.1f}x" if not use_cache else ""
                print(f"{size:>7} {batch:>5} {'on' if use_cache else 'off':>5} {seconds[use_cache]:8.2f} "
                      f"{rate:9.1f} {speedup:>8}", flush=True)


if __name__ == "__main__":
    main()
