"""Inputs on which three behaviours were compared with upstream MiniMind's own code, and upstream's
values on them (`UPSTREAM`), for tests/test_upstream_cases.py.

The values were computed once, on CPU in float32, by running upstream's code on exactly the inputs the
builders below make (this project's bundled tokenizer, the seeded tiny models built here; the parameter
names are upstream's): the revisions are those docs/UPSTREAM.md names.

- PPO (`ppo_window`): the loss of upstream's `ppo_train_epoch` on each micro-batch (summed response
  log-probs from the logits, ratio to the old actor, clipped surrogate, MSE value loss, `kl_coef` times
  the mean log-ratio to the reference), backpropagated either whole (the PR 524-era script) or divided
  by `accumulation_steps` (revision 42a4e8c; 00da959's rewritten PPO divides its own, per-token loss
  too), then `clip_grad_norm_` and an AdamW step.
- MoE (`moe_batch`): each row as upstream's older `SFTDataset`/`PretrainDataset` (revision 020bd44)
  encodes it (padded to max_seq_len), the model fed `input_ids[:-1]` (those revisions' `X`) or all
  max_seq_len positions (the `(input_ids, labels)` datasets of revision 3a5aba8, as 00da959's scripts
  read them), and the router loss summed over the layers by upstream's `MoEGate.forward` (revision
  9d89857) on each layer's router input.
- DPO (`DPO_PAIR`): the token ids of upstream's `DPODataset` (the chat template without `tools`,
  revisions 020bd44 and 3a5aba8 alike) and of upstream's `SFTDataset` (the system turn's `functions`
  passed as `tools`) for the same conversations.
"""
import json
import types

import torch

from dataset.lm_dataset import PretrainDataset, SFTDataset
from trainer import trainer_utils as tu

#: PPO: 2 micro-batches of 2 rows, a 6-token prompt and a 5-token response each (no padding), with
#: `--accumulation_steps 3`, whose first window holds micro-batches 1 and 2 (upstream's boundary).
PPO = dict(rows=2, prompt=6, response=5, accumulation_steps=3, clip_epsilon=0.1, vf_coef=0.5, kl_coef=0.02,
           learning_rate=1e-4, grad_clip=1.0)
MOE_MAX_SEQ_LEN = 64

_TOOLS = [{"name": "get_time", "description": "当前时间", "parameters": {"type": "object", "properties": {}}}]
_SYSTEM = {"role": "system", "content": "你可以调用工具。", "functions": _TOOLS}
_QUESTION = {"role": "user", "content": "现在几点？"}
DPO_PAIR = {
    "chosen": [_SYSTEM, _QUESTION, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_time", "arguments": {}}}]}],
    "rejected": [_SYSTEM, _QUESTION, {"role": "assistant", "content": "我不知道。"}],
}
DPO_MAX_LENGTH = 512


def ppo_window():
    """A seeded tiny dense actor (64 x 2) and the window's micro-batches: (ids [2, 11], rewards [2],
    the critic's values [2]); the old actor and the reference are the actor's start weights."""
    torch.manual_seed(0)
    model, _ = tu.init_model(tu.model_config(64, 2, False), "none", ".", "cpu", tokenizer=False)
    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(2):
        ids = torch.randint(3, 6400, (PPO["rows"], PPO["prompt"] + PPO["response"]), generator=gen)
        batches.append((ids, torch.randn(PPO["rows"], generator=gen), torch.randn(PPO["rows"], generator=gen)))
    return model.train(), batches


def moe_model():
    """A seeded tiny MoE model (64 x 2) in training mode (the router loss is computed only there)."""
    torch.manual_seed(0)
    model, tokenizer = tu.init_model(tu.model_config(64, 2, True), "none", ".", "cpu")
    return model.train(), tokenizer


def moe_records(demo_dir):
    """The first 4 demo SFT conversations, and the first 4 demo texts wrapped in the markers upstream's
    pretraining data carries (so both sides' pretraining ids are the same)."""
    def head(name):
        with open(demo_dir / name, encoding="utf-8") as f:
            return [json.loads(next(f)) for _ in range(4)]
    return {"sft": head("sft.jsonl"),
            "pretrain": [{"text": f"<|im_start|>{r['text']}<|im_end|>"} for r in head("pretrain.jsonl")]}


def moe_batch(kind, tokenizer, records, tmp_dir):
    """This project's MoE batch of `kind` (`sft`, `pretrain`): the records through its dataset and the
    trainers' collate (rows padded to max_seq_len with --use_moe 1)."""
    path = tmp_dir / f"moe_{kind}.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records[kind]), encoding="utf-8")
    dataset = {"sft": SFTDataset, "pretrain": PretrainDataset}[kind](str(path), tokenizer, MOE_MAX_SEQ_LEN)
    args = types.SimpleNamespace(use_moe=1, max_seq_len=MOE_MAX_SEQ_LEN)
    return tu.lm_collate(args, tokenizer)([dataset[i] for i in range(len(dataset))])


#: Upstream's values on the inputs above (see the module docstring).
UPSTREAM = {
    "ppo": {  # the window's gradient norm (no clipping) and the update (--grad_clip 1.0), AdamW lr 1e-4
        "grad_norm_undivided": 96.79611206054688,
        "grad_norm_divided": 32.26536178588867,
        "update_norm_undivided": 0.0708174929022789,
        "update_norm_divided": 0.0708174929022789,
        "update_max_abs_diff": 6.295740604400635e-07,
    },
    "moe": {  # the router loss summed over the layers, the model fed input_ids[:-1] or input_ids
        "sft": {"input_ids[:-1]": 0.21974369883537292, "input_ids": 0.21970488131046295},
        "pretrain": {"input_ids[:-1]": 0.23346394300460815, "input_ids": 0.23346245288848877},
    },
    "dpo": {  # token ids: upstream's DPODataset (no tools block) and SFTDataset (functions as tools)
        "chosen": {
            "dpo_dataset": [
                1, 287, 201, 1326, 2299, 3089, 949, 3169, 269, 2, 201, 1, 278, 201, 4641, 4609, 416, 4137, 327, 2,
                201, 1, 277, 201, 30, 86, 535, 78, 65, 69, 343, 78, 32, 201, 93, 4, 80, 659, 4, 28, 223, 4, 439, 86,
                65, 86, 418, 71, 4, 14, 223, 4, 67, 84, 496, 79, 570, 86, 85, 4, 28, 223, 93, 95, 95, 201, 315, 86,
                535, 78, 65, 69, 343, 78, 32, 2, 201],
            "sft_dataset": [
                1, 287, 201, 1326, 2299, 3089, 949, 3169, 269, 201, 201, 5, 223, 54, 535, 78, 85, 201, 201, 290,
                325, 730, 298, 343, 78, 301, 80, 71, 301, 84, 325, 81, 279, 223, 294, 80, 69, 474, 85, 396, 81, 259,
                262, 260, 86, 466, 75, 312, 462, 223, 278, 445, 267, 91, 16, 201, 201, 290, 288, 223, 82, 995, 88,
                75, 70, 526, 466, 75, 312, 223, 294, 80, 69, 474, 308, 536, 80, 309, 87, 279, 85, 466, 75, 312, 271,
                223, 30, 86, 535, 78, 85, 32, 315, 86, 535, 78, 85, 32, 223, 58, 47, 46, 396, 67, 73, 85, 28, 201,
                30, 86, 535, 78, 85, 32, 201, 93, 4, 80, 659, 4, 28, 223, 4, 439, 86, 65, 86, 418, 71, 4, 14, 223,
                4, 70, 348, 577, 75, 82, 474, 4, 28, 223, 4, 4160, 4271, 2452, 4536, 4, 14, 223, 4, 82, 67, 490,
                652, 86, 267, 85, 4, 28, 223, 93, 4, 86, 91, 82, 71, 4, 28, 223, 4, 81, 68, 76, 71, 69, 86, 4, 14,
                223, 4, 82, 995, 82, 267, 86, 75, 348, 4, 28, 223, 93, 95, 95, 95, 201, 315, 86, 535, 78, 85, 32,
                201, 201, 40, 1090, 223, 71, 67, 576, 223, 294, 80, 69, 474, 298, 343, 78, 14, 223, 279, 86, 87, 84,
                80, 259, 223, 76, 85, 447, 301, 68, 76, 71, 69, 86, 466, 75, 312, 223, 294, 80, 69, 474, 661, 813,
                259, 84, 496, 79, 570, 86, 85, 466, 75, 312, 271, 223, 30, 86, 535, 78, 65, 69, 343, 78, 32, 315,
                86, 535, 78, 65, 69, 343, 78, 32, 223, 58, 47, 46, 396, 67, 73, 85, 28, 201, 30, 86, 535, 78, 65,
                69, 343, 78, 32, 201, 93, 4, 80, 659, 4, 28, 223, 30, 294, 80, 69, 474, 15, 80, 659, 32, 14, 223, 4,
                67, 84, 496, 79, 570, 86, 85, 4, 28, 223, 30, 67, 84, 73, 85, 15, 76, 85, 447, 15, 81, 68, 76, 71,
                69, 86, 32, 95, 201, 315, 86, 535, 78, 65, 69, 343, 78, 32, 2, 201, 1, 278, 201, 4641, 4609, 416,
                4137, 327, 2, 201, 1, 277, 201, 30, 86, 535, 78, 65, 69, 343, 78, 32, 201, 93, 4, 80, 659, 4, 28,
                223, 4, 439, 86, 65, 86, 418, 71, 4, 14, 223, 4, 67, 84, 496, 79, 570, 86, 85, 4, 28, 223, 93, 95,
                95, 201, 315, 86, 535, 78, 65, 69, 343, 78, 32, 2, 201],
        },
        "rejected": {
            "dpo_dataset": [
                1, 287, 201, 1326, 2299, 3089, 949, 3169, 269, 2, 201, 1, 278, 201, 4641, 4609, 416, 4137, 327, 2,
                201, 1, 277, 201, 1289, 269, 2, 201],
            "sft_dataset": [
                1, 287, 201, 1326, 2299, 3089, 949, 3169, 269, 201, 201, 5, 223, 54, 535, 78, 85, 201, 201, 290,
                325, 730, 298, 343, 78, 301, 80, 71, 301, 84, 325, 81, 279, 223, 294, 80, 69, 474, 85, 396, 81, 259,
                262, 260, 86, 466, 75, 312, 462, 223, 278, 445, 267, 91, 16, 201, 201, 290, 288, 223, 82, 995, 88,
                75, 70, 526, 466, 75, 312, 223, 294, 80, 69, 474, 308, 536, 80, 309, 87, 279, 85, 466, 75, 312, 271,
                223, 30, 86, 535, 78, 85, 32, 315, 86, 535, 78, 85, 32, 223, 58, 47, 46, 396, 67, 73, 85, 28, 201,
                30, 86, 535, 78, 85, 32, 201, 93, 4, 80, 659, 4, 28, 223, 4, 439, 86, 65, 86, 418, 71, 4, 14, 223,
                4, 70, 348, 577, 75, 82, 474, 4, 28, 223, 4, 4160, 4271, 2452, 4536, 4, 14, 223, 4, 82, 67, 490,
                652, 86, 267, 85, 4, 28, 223, 93, 4, 86, 91, 82, 71, 4, 28, 223, 4, 81, 68, 76, 71, 69, 86, 4, 14,
                223, 4, 82, 995, 82, 267, 86, 75, 348, 4, 28, 223, 93, 95, 95, 95, 201, 315, 86, 535, 78, 85, 32,
                201, 201, 40, 1090, 223, 71, 67, 576, 223, 294, 80, 69, 474, 298, 343, 78, 14, 223, 279, 86, 87, 84,
                80, 259, 223, 76, 85, 447, 301, 68, 76, 71, 69, 86, 466, 75, 312, 223, 294, 80, 69, 474, 661, 813,
                259, 84, 496, 79, 570, 86, 85, 466, 75, 312, 271, 223, 30, 86, 535, 78, 65, 69, 343, 78, 32, 315,
                86, 535, 78, 65, 69, 343, 78, 32, 223, 58, 47, 46, 396, 67, 73, 85, 28, 201, 30, 86, 535, 78, 65,
                69, 343, 78, 32, 201, 93, 4, 80, 659, 4, 28, 223, 30, 294, 80, 69, 474, 15, 80, 659, 32, 14, 223, 4,
                67, 84, 496, 79, 570, 86, 85, 4, 28, 223, 30, 67, 84, 73, 85, 15, 76, 85, 447, 15, 81, 68, 76, 71,
                69, 86, 32, 95, 201, 315, 86, 535, 78, 65, 69, 343, 78, 32, 2, 201, 1, 278, 201, 4641, 4609, 416,
                4137, 327, 2, 201, 1, 277, 201, 1289, 269, 2, 201],
        },
    },
}
