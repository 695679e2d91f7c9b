"""Chat worker speed and memory: time to first token, tokens/s, and the worker's memory once idle-unloaded.

For each model size, a randomly initialised MiniMind is saved as a .pth file and served by a real chat
worker process (CPU unless --device says otherwise). It prints, per size: the load time (first request),
the time to first token once loaded (seen by the client: request sent -> first token received), the
decode tokens/s of greedy replies, `bench_generate`'s cached `generate()` tokens/s for the same model,
thread count and token count (the reference the worker should be within 20% of), and the worker's
resident memory while the model is loaded and after the idle unload.

Targets: first token < 1 s for the demo model (64x2) once loaded; worker tokens/s within 20% of
generate()'s with the cache.

    python3 bench/bench_chat.py                        # 512x8 and 64x2, 256 new tokens, 2 threads
    python3 bench/bench_chat.py --sizes 64x2 --new-tokens 64 --threads 1
"""
import argparse
import json
import os
import tempfile
import time

import torch
from bench_generate import parse_size, timed_generate

from mmcore.models import chat_client
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROMPT = [{"role": "user", "content": "Tell me a long story about a small model that learned to talk."}]


def client_request(home, payload):
    """(seconds to the first token event, done event) of one chat request, timed by the client."""
    start, first, done = time.perf_counter(), None, None
    for event in chat_client.chat(payload, home):
        if event["event"] == "token" and first is None:
            first = time.perf_counter() - start
        elif event["event"] == "done":
            done = event
    return first, done


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["512x8", "64x2"])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="timed replies per size (after one warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of the worker and of the reference")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--idle-unload", type=float, default=3.0, help="seconds before the worker unloads a model")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    home = tempfile.mkdtemp(prefix="bench-chat-")
    chat_client.ensure_worker(home, idle_unload_s=args.idle_unload, exit_after_s=600, device=args.device,
                              threads=args.threads)
    pid = chat_client.status(home)["pid"]
    print(f"worker pid {pid}, device {args.device}, {args.threads} threads, up to {args.new_tokens} new tokens; "
          f"idle worker {chat_client.status(home)['rss_mb']:.0f} MiB before any load")
    print(f"{'model':>6} {'load s':>7} {'ttft s':>7} {'tok/s':>7} {'tokens':>6} {'generate tok/s':>14} "
          f"{'ratio':>6} {'RSS loaded':>10} {'RSS unloaded':>12}")
    try:
        for size in args.sizes:
            hidden, layers = parse_size(size)
            torch.manual_seed(0)
            model = MiniMindForCausalLM(MiniMindConfig(hidden_size=hidden, num_hidden_layers=layers)).eval()
            weight = os.path.join(home, f"bench_{hidden}.pth")
            torch.save({k: v.half() for k, v in model.state_dict().items()}, weight)
            payload = {"weight": weight, "messages": PROMPT, "temperature": 0, "max_new_tokens": args.new_tokens}
            load_start = time.perf_counter()
            _, done = client_request(home, payload)  # loads the model; also the warm-up
            load_s = time.perf_counter() - load_start - done["seconds"]
            firsts, rates, tokens = [], [], []
            for _ in range(args.repeats):
                first, done = client_request(home, payload)
                firsts.append(first)
                rates.append(done["tokens_per_s"])
                tokens.append(len(done["ids"]))
            loaded_rss = chat_client.status(home)["rss_mb"]
            # The same model through generate() with the cache, as bench_generate times it.
            model = model.half().float()  # the weights the worker loaded from the half-precision file
            prompt = torch.randint(3, model.config.vocab_size, (1, 16))
            timed_generate(model, prompt, 8, use_cache=True)
            n = max(2, min(tokens))
            reference = n / timed_generate(model, prompt, n, use_cache=True)
            while chat_client.status(home)["models"]:
                time.sleep(0.5)
            unloaded_rss = chat_client.status(home)["rss_mb"]
            first, rate = sorted(firsts)[len(firsts) // 2], sorted(rates)[len(rates) // 2]
            print(f"{size:>6} {load_s:7.2f} {first:7.3f} {rate:7.1f} {min(tokens):6d} {reference:14.1f} "
                  f"{rate / reference:6.2f} {loaded_rss:8.0f}MiB {unloaded_rss:10.0f}MiB", flush=True)
    finally:
        os.kill(pid, 15)
    print(json.dumps({"note": "medians of the timed replies; a shared, busy machine makes these noisy"}))


if __name__ == "__main__":
    main()
