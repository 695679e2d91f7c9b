"""Chat with MiniMind checkpoints: load them once, stream replies token by token with the KV cache.

`ModelPool` keeps loaded models keyed by their files (a rewritten file is a new key) and unloads the
ones nobody used for `idle_unload_s`. `stream_reply` turns chat messages into the chat-template prompt
and yields the reply's text as it grows: one forward pass over the prompt, then one token at a time
with the cache (greedy when temperature is 0, else temperature + top-p sampling from a seeded
generator, so the same seed and settings give the same reply on the same model).
"""
import gc
import os
import threading
import time
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import DynamicCache

from model.weights import BUNDLED_TOKENIZER, load_model, load_tokenizer

#: Appended after the generation prompt when reasoning is off: an empty thought, so the model answers
#: directly (the convention of MiniMind's reasoning models).
NO_THINK_PREFIX = "<think>\n\n</think>\n\n"


def pick_device(weight_bytes, wanted="auto"):
    """`wanted` unless "auto"; then the CUDA device with the most free memory if the model fits there
    with room to spare, else the CPU."""
    if wanted and wanted != "auto":
        return wanted
    if torch.cuda.is_available():
        free = []
        for i in range(torch.cuda.device_count()):
            try:
                free.append((torch.cuda.mem_get_info(i)[0], i))
            except RuntimeError:  # a busy or broken device
                continue
        if free:
            best_free, best = max(free)
            if best_free > 4 * weight_bytes + (512 << 20):
                return f"cuda:{best}"
    return "cpu"


def file_key(path):
    """(real path, size, mtime) of a file, or None: a rewritten checkpoint is a different model."""
    if not path:
        return None
    st = os.stat(path)
    return os.path.realpath(path), st.st_size, st.st_mtime_ns


@dataclass
class Loaded:
    model: object
    tokenizer: object
    device: str
    load_s: float
    last_used: float = field(default_factory=time.monotonic)
    users: int = 0


class ModelPool:
    """Loaded models shared by every request; a model is loaded once and unloaded when idle."""

    def __init__(self, idle_unload_s=300.0, device="auto"):
        self.idle_unload_s = idle_unload_s
        self.device = device
        self._models = {}
        self._lock = threading.Lock()
        self._loading = {}  # key -> Lock: two requests for one model load it once
        self._reward_models = {}

    def acquire(self, weight, lora=None, tokenizer_path=None):
        """(key, entry, loaded now?) for these files, loading the model if needed and marking it in use;
        pair with `release(key)`."""
        key = (file_key(weight), file_key(lora), os.path.realpath(tokenizer_path or BUNDLED_TOKENIZER))
        with self._lock:
            load_lock = self._loading.setdefault(key, threading.Lock())
        with load_lock:
            with self._lock:
                entry = self._models.get(key)
                if entry is not None:
                    entry.users += 1
                    return key, entry, False
            start = time.monotonic()
            device = pick_device(os.path.getsize(weight), self.device)
            model = load_model(weight, lora=lora, device=device)
            tokenizer = load_tokenizer(tokenizer_path)
            entry = Loaded(model, tokenizer, device, time.monotonic() - start, users=1)
            with self._lock:
                self._models[key] = entry
            return key, entry, True

    def reward_model(self, path):
        """The reward model in folder `path`, loaded once (on the CPU: it scores short texts)."""
        with self._lock:
            if path not in self._reward_models:
                from trainer.rl.reward_model import load_reward_model
                rule_only = str(path).strip().lower() == "none"
                self._reward_models[path] = load_reward_model(None if rule_only else path, "cpu")
            return self._reward_models[path]

    def release(self, key):
        with self._lock:
            entry = self._models.get(key)
            if entry is not None:
                entry.users -= 1
                entry.last_used = time.monotonic()

    def unload_idle(self, now=None):
        """Drop every model unused for idle_unload_s; returns how many were dropped."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [k for k, e in self._models.items() if e.users == 0 and now - e.last_used >= self.idle_unload_s]
            for key in idle:
                del self._models[key]
            if idle and not self._models:
                self._reward_models.clear()  # a reward model can be larger than the chat models
        if idle:
            release_memory()
        return len(idle)

    def describe(self):
        with self._lock:
            return [{"weight": k[0][0], "lora": k[1][0] if k[1] else None, "device": e.device, "users": e.users,
                     "idle_s": round(time.monotonic() - e.last_used, 1), "load_s": round(e.load_s, 2)}
                    for k, e in self._models.items()]


def release_memory():
    """Give freed model memory back to the operating system (glibc keeps freed heap otherwise)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def score_reply(prompt, reply, reference, reasoning, reward_model=None):
    """The training rewards of `reply`: the total the RL trainers compute (format reward with reasoning,
    plus the rule reward against `reference`, or the reward model's score), and each part by name
    ("format", "rule" or "reward_model"; None for a part that does not apply). "correct" says whether
    the answer matches `reference` (what the rule reward checks) even where a reward model scores it."""
    from trainer.rl.rewards import reward_functions, rule_reward, score
    total, parts = score(reward_functions(reasoning, reward_model), [prompt], [reply], [reference])
    return {"total": float(total[0]), "format": None, "rule": None, "reward_model": None,
            **{name: float(values[0]) for name, values in parts.items()},
            "correct": rule_reward(reply, reference, reasoning)}


def build_prompt(tokenizer, messages, system=None, reasoning=True):
    """The chat-template text of `messages` (+ an optional system prompt) with the assistant turn opened."""
    messages = [m for m in messages if m.get("role") != "system"]
    if system:
        messages = [{"role": "system", "content": system}] + messages
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text if reasoning else text + NO_THINK_PREFIX


def next_token(logits, temperature, top_p, generator):
    """Greedy for temperature <= 0; else sample from the temperature-scaled top-p nucleus."""
    if temperature <= 0:
        return int(logits.argmax(-1))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.no_grad()
def stream_reply(model, tokenizer, prompt, max_new_tokens=512, temperature=0.85, top_p=0.85, seed=None,
                 stop=None):
    """Yield (new text, token id) for each generated token of the reply to `prompt` (a chat-template text).

    The text is what the reply's decoded string grew by: a token that ends inside a multi-byte
    character yields "" and its text comes with the token that completes it. Stops at the end-of-turn
    token (not yielded), after max_new_tokens, or when `stop()` returns True.
    """
    device = next(model.parameters()).device
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(device)
    max_len = model.config.max_position_embeddings
    ids = ids[:, -(max_len - max_new_tokens):] if ids.shape[1] + max_new_tokens > max_len else ids
    generator = torch.Generator(device=device)
    generator.manual_seed(0 if seed is None else int(seed))
    eos = tokenizer.eos_token_id
    cache = DynamicCache(config=model.config)
    out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    reply, shown = [], ""
    for _ in range(max_new_tokens):
        token = next_token(out.logits[0, -1], temperature, top_p, generator)
        if token == eos or (stop is not None and stop()):
            return
        reply.append(token)
        text = tokenizer.decode(reply, skip_special_tokens=True)
        grown = "" if text.endswith("\ufffd") else text[len(shown):]
        if grown:
            shown = text
        yield grown, token
        out = model(torch.tensor([[token]], device=device), past_key_values=out.cache, use_cache=True)
