"""Check an export against the model it came from, right after writing it.

Each check returns a dict: `ok` (True, False, or None when it could not run here), `detail` (what was
measured) and the figures. The reference is the MiniMind model itself (float32), on MiniMind's chat
prompt for a fixed question.

- Llama and custom-code folders: transformers loads them (the Llama folder with no custom code), the
  tokenizer gives our token ids, logits within 1e-4 (float32 export).
- PEFT: `PeftModel.from_pretrained` on the base folder gives the merged model's logits.
- GGUF, in llama.cpp through `llama-cpp-python` (the `export` extra; without it the result says so):
  token ids of `PROBE_TEXTS`, logits with an f32 KV cache, greedy continuation, and the chat template
  from the metadata rendering like `apply_chat_template`. Without llama.cpp, transformers' own GGUF
  reader (`gguf_file=`) still checks the tensors and logits.
"""
import importlib.util
import os

import torch

#: Chinese, English, code, emoji and the special tokens: what the GGUF tokenizer must split like ours.
PROBE_TEXTS = ("你好，世界！今天天气怎么样？", "The quick brown fox jumps over the lazy dog.",
               "def add(a, b):\n    return a + b  # 求和\n", "emoji 😀🚀👍🏽 and ✓",
               "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|endoftext|>")
MESSAGES = [{"role": "user", "content": "What is 2 + 3? 请回答。"}]
GREEDY_TOKENS = 16
LOGITS_ATOL = 1e-4
#: llama.cpp against our float32 logits; f16 and q8_0 round the weights, so they are compared looser.
GGUF_ATOL = {"f32": 1e-3, "f16": 5e-2, "q8_0": 2e-1}


def _check(ok, detail, **figures):
    return {"ok": ok, "detail": detail, **figures}


def prompt_ids(tokenizer):
    """Token ids of MiniMind's chat prompt for MESSAGES."""
    return tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"]


@torch.no_grad()
def _logits(model, ids):
    return model(torch.tensor([ids])).logits[0].float()


@torch.no_grad()
def greedy(model, ids, n=GREEDY_TOKENS):
    """`n` greedy tokens after `ids` (no early stop: the comparison wants a fixed length)."""
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(ids):].tolist()


def verify_folder(folder, reference, tokenizer, trust_remote_code=False, atol=LOGITS_ATOL):
    """Load the exported folder with the Auto classes and compare tokens and logits with `reference`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                  trust_remote_code=trust_remote_code).eval()
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    ids = prompt_ids(tokenizer)
    same_ids = prompt_ids(tok) == ids and all(tok.encode(t) == tokenizer.encode(t) for t in PROBE_TEXTS)
    diff = float((_logits(loaded, ids) - _logits(reference, ids)).abs().max())
    ok = same_ids and diff <= atol
    return _check(ok, f"{type(loaded).__name__}: logits max abs diff {diff:.2e} (limit {atol:g}), "
                      f"token ids {'equal' if same_ids else 'DIFFER'}", max_abs_diff=diff, token_ids_equal=same_ids)


def verify_peft(folder, base_folder, merged, tokenizer, atol=LOGITS_ATOL):
    """PeftModel on the base folder against the merged MiniMind model."""
    if importlib.util.find_spec("peft") is None:
        return _check(None, "not verified: the peft package is not installed")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(base_folder, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, folder).eval()
    ids = prompt_ids(tokenizer)
    diff = float((_logits(model, ids) - _logits(merged, ids)).abs().max())
    return _check(diff <= atol, f"PeftModel: logits max abs diff to the merged model {diff:.2e} (limit {atol:g})",
                  max_abs_diff=diff)


def llama_cpp_available():
    return importlib.util.find_spec("llama_cpp") is not None


def verify_gguf(path, gguf_type, reference, tokenizer):
    """llama.cpp's view of the GGUF file against `reference` (see the module docstring)."""
    if not llama_cpp_available():
        result = _check(None, "llama.cpp check not run: install the export extra (pip install -e '.[export]', "
                              "llama-cpp-python)")
        result["transformers"] = verify_gguf_transformers(path, gguf_type, reference, tokenizer)
        return result
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    llm = Llama(model_path=path, n_ctx=256, n_batch=256, logits_all=True, verbose=False, seed=0,
                n_threads=max(1, min(4, os.cpu_count() or 1)), type_k=0, type_v=0)  # 0 = GGML F32 KV cache
    try:
        mismatched = [t for t in PROBE_TEXTS
                      if llm.tokenize(t.encode("utf-8"), add_bos=False, special=True) != tokenizer.encode(t)]
        ids = prompt_ids(tokenizer)
        llm.reset()
        llm.eval(ids)
        theirs = torch.tensor(llm.scores[:len(ids)], dtype=torch.float32)
        diff = float((theirs - _logits(reference, ids)).abs().max())
        tokens = []
        for _ in range(GREEDY_TOKENS):  # llama.cpp's own greedy choice, one token at a time
            tokens.append(int(llm.scores[llm.n_tokens - 1].argmax()))
            llm.eval([tokens[-1]])
        same_greedy = tokens == greedy(reference, ids)
        template = llm.metadata.get("tokenizer.chat_template", "")
        rendered = Jinja2ChatFormatter(template=template, eos_token="<|im_end|>", bos_token="<|im_start|>")(
            messages=MESSAGES).prompt
        same_template = rendered == tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    finally:
        llm.close() if hasattr(llm, "close") else None
    atol = GGUF_ATOL[gguf_type]
    ok = not mismatched and diff <= atol and same_template and (same_greedy or gguf_type == "q8_0")
    detail = (f"llama.cpp: token ids {'equal' if not mismatched else f'DIFFER on {len(mismatched)} text(s)'}, "
              f"logits max abs diff {diff:.2e} (limit {atol:g}, f32 KV cache), greedy {GREEDY_TOKENS} tokens "
              f"{'identical' if same_greedy else 'differ'}, "
              f"chat template {'renders the same' if same_template else 'DIFFERS'}")
    return _check(ok, detail, max_abs_diff=diff, token_ids_equal=not mismatched, greedy_equal=same_greedy,
                  template_equal=same_template, atol=atol)


def verify_gguf_transformers(path, gguf_type, reference, tokenizer):
    """A second reader: transformers dequantises the GGUF into a LlamaForCausalLM (logits only)."""
    try:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                     dtype=torch.float32).eval()
    except Exception as exc:  # an old transformers without GGUF support, a missing package...
        return _check(None, f"transformers could not read it: {type(exc).__name__}: {str(exc)[:200]}")
    ids = prompt_ids(tokenizer)
    diff = float((_logits(model, ids) - _logits(reference, ids)).abs().max())
    atol = GGUF_ATOL[gguf_type]
    return _check(diff <= atol, f"transformers (gguf_file=): logits max abs diff {diff:.2e} (limit {atol:g})",
                  max_abs_diff=diff)
