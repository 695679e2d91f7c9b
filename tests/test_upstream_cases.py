"""Three behaviours against upstream MiniMind's values on the same inputs (tests/_upstream_cases.py, whose
docstring says how upstream's code computed them; docs/UPSTREAM.md says what each difference is and why).

- PPO under gradient accumulation: the trainer loop divides the PPO loss by `--accumulation_steps`, as
  upstream's revisions 42a4e8c and 00da959 do; the PR 524-era script did not (its window's gradient is acc
  times ours). Under AdamW with upstream's `--grad_clip 1.0` the update is the same either way.
- MoE router loss: every max_seq_len position counts (upstream's later `(input_ids, labels)` datasets);
  upstream's older datasets feed `input_ids[:-1]`, which this model reproduces when fed that slice.
- DPO with tool definitions: a pair is rendered as upstream's SFTDataset renders a conversation (the system
  turn's `functions` as the chat template's `tools`); upstream's DPODataset leaves the tools block out.
"""
import json
import signal
import types

import pytest
import torch
from _trainer_helpers import DEMO
from _upstream_cases import DPO_MAX_LENGTH, DPO_PAIR, PPO, UPSTREAM, moe_batch, moe_model, moe_records, ppo_window

from dataset.lm_dataset import DPODataset
from trainer import loop, stopping
from trainer import trainer_utils as tu
from trainer.rl import losses
from trainer.rl.rollout import completion_logps
from trainer.rules import specs


# --- PPO under gradient accumulation -------------------------------------------------------------------

def _ppo_window_through_the_loop(tmp_path, grad_clip):
    """One accumulation window (micro-batches 1 and 2 with --accumulation_steps 3) of PPO's loss through
    `loop.train`, the loop every trainer runs. Returns (the gradient norm the optimizer step saw, the
    parameter update)."""
    actor, batches = ppo_window()
    items = []
    with torch.no_grad():  # the old actor and the reference hold the start weights
        for ids, rewards, values in batches:
            start = completion_logps(actor, ids, torch.ones_like(ids), PPO["response"])[0].sum(dim=1)
            items.append({"input_ids": ids, "rewards": rewards, "values": values, "old": start, "ref": start})
    options = {**specs.spec("ppo").defaults(), "device": "cpu", "dtype": "float32", "num_workers": 0, "epochs": 1,
               "batch_size": 1, "log_interval": 1, "save_interval": 1000, "save_dir": str(tmp_path),
               "accumulation_steps": PPO["accumulation_steps"], "grad_clip": grad_clip,
               "learning_rate": PPO["learning_rate"], "run_dir": str(tmp_path / "records")}
    run = loop.Run("ppo", types.SimpleNamespace(**options), tu.DistInfo(False, 0, 0, 1, "cpu"), stopping.StopSignal())
    run.resume_path = lambda: str(tmp_path / "ppo_resume.pth")
    part = run.part("actor", actor, PPO["learning_rate"])
    before = torch.cat([p.detach().flatten() for p in actor.parameters()])
    seen = []
    part.optimizer.register_step_pre_hook(lambda *_: seen.append(
        torch.cat([p.grad.flatten() for p in actor.parameters() if p.grad is not None]).norm().item()))

    def step_fn(batch):  # the PPO loss of train_ppo.step_fn on a fixed rollout (no sampling, no critic)
        ids = batch["input_ids"]
        logp = completion_logps(part.model, ids, torch.ones_like(ids), PPO["response"])[0].sum(dim=1)
        out = losses.ppo_losses(logp, batch["old"], batch["ref"], batch["values"], batch["rewards"],
                                PPO["clip_epsilon"], PPO["vf_coef"], PPO["kl_coef"])
        return out["loss"], {}

    previous = signal.getsignal(signal.SIGTERM)
    try:
        loop.train(run, [part], items, lambda rows: rows[0], step_fn, run_name="ppo-window",
                   schedule=lambda step, total, lr: lr)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert len(seen) == 1  # one optimizer step, after micro-batch 2 (upstream's boundary)
    return seen[0], torch.cat([p.detach().flatten() for p in actor.parameters()]) - before


def test_ppo_divides_its_loss_by_accumulation_steps_as_upstream_at_42a4e8c(tmp_path):
    up = UPSTREAM["ppo"]
    grad_norm, _ = _ppo_window_through_the_loop(tmp_path / "unclipped", grad_clip=1e9)
    assert grad_norm == pytest.approx(up["grad_norm_divided"], rel=1e-5)
    # The PR 524-era script backpropagates each micro-batch's loss whole: acc times the gradient.
    assert up["grad_norm_undivided"] / grad_norm == pytest.approx(PPO["accumulation_steps"], rel=1e-5)
    # Clipped to upstream's --grad_clip 1.0 and normalised by AdamW, the step is the same under both rules.
    _, update = _ppo_window_through_the_loop(tmp_path / "clipped", grad_clip=PPO["grad_clip"])
    assert update.norm().item() == pytest.approx(up["update_norm_divided"], rel=1e-5)
    assert up["update_norm_undivided"] == pytest.approx(up["update_norm_divided"], rel=1e-5)
    assert up["update_max_abs_diff"] < 0.01 * PPO["learning_rate"]


# --- MoE router loss positions -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["sft", "pretrain"])
def test_moe_router_loss_counts_every_position_as_upstreams_later_datasets(kind, tmp_path):
    model, tokenizer = moe_model()
    batch = moe_batch(kind, tokenizer, moe_records(DEMO), tmp_path)
    up = UPSTREAM["moe"][kind]
    ours = model(batch["input_ids"], labels=batch["labels"], loss_only=True).aux_loss.item()
    assert ours == pytest.approx(up["input_ids"], rel=1e-5)
    # Upstream's older datasets run the model on input_ids[:-1]: this model fed that slice gives their value.
    older = model(batch["input_ids"][:, :-1]).aux_loss.item()
    assert older == pytest.approx(up["input_ids[:-1]"], rel=1e-5)
    assert abs(up["input_ids"] - up["input_ids[:-1]"]) > 1e-7  # the last column's router input counts


# --- DPO with tool definitions -------------------------------------------------------------------------

def _dpo_item(tmp_path, pair):
    path = tmp_path / "dpo.jsonl"
    path.write_text(json.dumps(pair, ensure_ascii=False) + "\n", encoding="utf-8")
    return DPODataset(str(path), tu.load_tokenizer(), DPO_MAX_LENGTH)[0]


def test_dpo_renders_tools_as_upstreams_sft_dataset_and_upstreams_dpo_dataset_leaves_them_out(tmp_path):
    item = _dpo_item(tmp_path, DPO_PAIR)
    tok = tu.load_tokenizer()
    for side in ("chosen", "rejected"):
        up = UPSTREAM["dpo"][side]
        ids = item[f"{side}_input_ids"].tolist()
        assert ids == up["sft_dataset"], side  # the tools block, as upstream's SFT shows the same turns
        assert len(ids) > len(up["dpo_dataset"]) and "<tools>" in tok.decode(ids)
        assert "<tools>" not in tok.decode(up["dpo_dataset"]) and "当前时间" not in tok.decode(up["dpo_dataset"])
    # Without `functions` the pair gives upstream DPODataset's ids exactly: the tools block is the difference.
    plain = {side: [{k: v for k, v in m.items() if k != "functions"} for m in DPO_PAIR[side]] for side in DPO_PAIR}
    item = _dpo_item(tmp_path, plain)
    for side in ("chosen", "rejected"):
        assert item[f"{side}_input_ids"].tolist() == UPSTREAM["dpo"][side]["dpo_dataset"], side
