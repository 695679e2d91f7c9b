"""The chat worker: one process that serves chat replies of MiniMind checkpoints to the dashboard.

It listens on a Unix socket and speaks JSON lines: each connection sends one request line and reads
event lines until the reply ends. Models are loaded on first use, shared by every connection (each
one a thread, so several users chat at once) and unloaded after `--idle_unload` seconds without use;
the worker exits after `--exit_after` seconds without any request (the dashboard starts it again on
demand). Started by `mmcore.models.chat_client`, never imported by the dashboard.

Requests:
    {"op": "chat", "weight": PATH, "lora": PATH|null, "tokenizer_path": DIR|null, "messages": [...],
     "system": str, "reasoning": bool, "temperature": float, "top_p": float, "max_new_tokens": int,
     "seed": int, "reference": str|null (score the reply with the training rewards against it),
     "reward_model_path": DIR|null}
      -> {"event": "loaded", "device", "load_s", "cached"}, then {"event": "token", "text", "id"} per
         token, then {"event": "done", "text", "ids", "first_token_s", "tokens_per_s", "rewards"}
         (or {"event": "error", "message"} at any point)
    {"op": "status"} -> {"event": "status", "pid", "rss_mb", "models": [...]}
    {"op": "unload"} -> unloads every idle model, then a status event
"""
import argparse
import os
import socketserver
import sys
import threading
import time

import torch

from mmcore.base.local_worker import JsonLinesHandler, rss_mb
from mmcore.workers.chat_engine import ModelPool, build_prompt, score_reply, stream_reply
from model.weights import WeightFileError

MAX_NEW_TOKENS = 8192


def _number(request, name, default, lo, hi, kind=float):
    value = request.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a number between {lo} and {hi}, got {value!r}")
    return kind(value)


class Handler(JsonLinesHandler):
    PLAIN_ERRORS = (ValueError, WeightFileError, OSError)

    def serve(self, request):
        op = request.get("op")
        if op == "chat":
            self.chat(request)
        elif op in ("status", "unload"):
            if op == "unload":
                self.server.pool.unload_idle(now=float("inf"))
            self.send(event="status", pid=os.getpid(), rss_mb=rss_mb(), models=self.server.pool.describe())
        else:
            raise ValueError(f"unknown op {op!r}")

    def chat(self, request):
        if self.server.threads:
            torch.set_num_threads(self.server.threads)  # per thread: each connection has its own
        weight = request.get("weight")
        if not weight or not os.path.isfile(weight):
            raise ValueError(f"weight file not found: {weight}")
        messages = request.get("messages") or []
        if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            raise ValueError("messages must be a list of {role, content} objects")
        temperature = _number(request, "temperature", 0.85, 0.0, 5.0)
        top_p = _number(request, "top_p", 0.85, 0.0, 1.0)
        max_new = _number(request, "max_new_tokens", 512, 1, MAX_NEW_TOKENS, int)
        seed = _number(request, "seed", 0, 0, 2**63 - 1, int)
        pool = self.server.pool
        key, entry, loaded_now = pool.acquire(weight, request.get("lora"), request.get("tokenizer_path"))
        try:
            self.send(event="loaded", device=entry.device, load_s=round(entry.load_s, 3), cached=not loaded_now)
            reasoning = bool(request.get("reasoning", True))
            prompt = build_prompt(entry.tokenizer, messages, request.get("system"), reasoning)
            start = time.perf_counter()
            first, ids, text = None, [], ""
            for piece, token in stream_reply(entry.model, entry.tokenizer, prompt, max_new, temperature, top_p, seed):
                first = first if first is not None else time.perf_counter() - start
                ids.append(token)
                text += piece
                self.send(event="token", text=piece, id=token)
            elapsed = time.perf_counter() - start
            decode_s = elapsed - (first or 0.0)
            rewards = None
            if request.get("reference") is not None:
                reward_model = pool.reward_model(request["reward_model_path"]) if request.get(
                    "reward_model_path") else None
                rewards = score_reply(prompt, text, str(request["reference"]), reasoning, reward_model)
            self.send(event="done", text=text, ids=ids, first_token_s=first, seconds=elapsed, rewards=rewards,
                      tokens_per_s=(len(ids) - 1) / decode_s if len(ids) > 1 and decode_s > 0 else None)
        finally:
            pool.release(key)


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path, pool, exit_after, threads=0):
        self.pool = pool
        self.threads = threads
        self.exit_after = exit_after
        self.last_request = time.monotonic()
        super().__init__(path, Handler)

    def touch(self):
        self.last_request = time.monotonic()

    def housekeeping(self):
        """Unload idle models; stop serving after exit_after seconds without a request."""
        while True:
            time.sleep(1.0)
            self.pool.unload_idle()
            if self.exit_after and time.monotonic() - self.last_request > self.exit_after and not any(
                    m["users"] for m in self.pool.describe()):
                self.shutdown()
                return


def main(argv=None):
    parser = argparse.ArgumentParser(description="MiniMind chat worker (JSON lines over a Unix socket)")
    parser.add_argument("--socket", required=True, help="Unix socket path to listen on")
    parser.add_argument("--idle_unload", type=float, default=300.0, help="unload a model unused for this many seconds")
    parser.add_argument("--exit_after", type=float, default=1800.0,
                        help="exit after this many seconds without a request (0: never)")
    parser.add_argument("--device", default="auto", help="auto (a GPU with free memory, else the CPU), cpu or cuda:N")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if os.path.exists(args.socket):
        os.remove(args.socket)  # the client holds the start lock and found nobody answering on it
    server = Server(args.socket, ModelPool(args.idle_unload, args.device), args.exit_after, args.threads)
    os.chmod(args.socket, 0o600)
    threading.Thread(target=server.housekeeping, daemon=True).start()
    print(f"chat worker {os.getpid()} listening on {args.socket}", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        if os.path.exists(args.socket):
            os.remove(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
