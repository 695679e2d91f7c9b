"""The MoE router's auxiliary loss over the positions upstream counts: upstream pads every row to
max_seq_len and its MoEGate averages over all of them, pad positions included. The expected values are
computed here the upstream way: rows padded to max_seq_len explicitly, each layer's router input taken
from that padded forward pass, and the load-balancing loss written out as upstream's MoEGate computes it
(seq_aux: per row, expert pick counts scaled so uniform = 1, times the mean scores; times alpha)."""
import types

import pytest
import torch
import torch.nn.functional as F
from _trainer_helpers import DEMO

from dataset.lm_dataset import SFTDataset, pad_collate
from trainer import trainer_utils as tu
from trainer.train_pretrain import lm_loss

MAX_SEQ_LEN = 64


def upstream_aux(model, rows, pad_id, max_seq_len):
    """Upstream's aux loss of `rows` (lists of ids): padded to max_seq_len, summed over the layers."""
    ids = torch.tensor([r + [pad_id] * (max_seq_len - len(r)) for r in rows])
    inputs = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda m, args, out: inputs.append((m, args[0])))
             for layer in model.model.layers]
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    total = 0.0
    for gate, hidden in inputs:
        bsz, seq_len, h = hidden.shape
        scores = F.linear(hidden.reshape(-1, h), gate.weight).softmax(dim=-1)
        _, picks = torch.topk(scores, k=gate.top_k, dim=-1, sorted=False)
        picks_per_expert = torch.zeros(bsz, gate.n_routed_experts).scatter_add_(
            1, picks.view(bsz, -1), torch.ones(bsz, seq_len * gate.top_k))
        ce = picks_per_expert / (seq_len * gate.top_k / gate.n_routed_experts)
        total = total + (ce * scores.view(bsz, seq_len, -1).mean(dim=1)).sum(dim=1).mean() * gate.alpha
    return total, inputs


@pytest.fixture(scope="module")
def moe_rows():
    torch.manual_seed(0)
    model, tokenizer = tu.init_model(tu.model_config(64, 2, True), "none", ".", "cpu")
    dataset = SFTDataset(str(DEMO / "sft.jsonl"), tokenizer, MAX_SEQ_LEN)
    items = [dataset[i] for i in range(4)]
    lengths = [len(item["input_ids"]) for item in items]
    assert len(set(lengths)) == 4 and max(lengths) < MAX_SEQ_LEN
    return model.train(), tokenizer, items


def test_moe_aux_loss_counts_the_positions_upstream_pads_to(moe_rows):
    model, tokenizer, items = moe_rows
    args = types.SimpleNamespace(use_moe=1, max_seq_len=MAX_SEQ_LEN)
    batch = tu.lm_collate(args, tokenizer)(items)
    assert batch["input_ids"].shape == (4, MAX_SEQ_LEN)
    ours = lm_loss(model, batch)[0] - model(batch["input_ids"], labels=batch["labels"]).loss
    expected, _ = upstream_aux(model, [i["input_ids"].tolist() for i in items], tokenizer.pad_token_id, MAX_SEQ_LEN)
    assert ours.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    assert model(batch["input_ids"], labels=batch["labels"], loss_only=True).aux_loss.item() == pytest.approx(
        expected.item(), rel=1e-5)
    # Padded to the batch's longest row only (dense runs), the aux loss would differ from upstream's.
    longest = pad_collate(tokenizer.pad_token_id)(items)
    shorter = model(longest["input_ids"], labels=longest["labels"], loss_only=True).aux_loss
    assert abs(shorter.item() - expected.item()) > 1e-4
    # The next-token loss is the same either way: padding never counts.
    assert model(longest["input_ids"], labels=longest["labels"]).loss.item() == pytest.approx(
        model(batch["input_ids"], labels=batch["labels"]).loss.item(), rel=1e-5)


def test_pad_positions_route_by_the_row_before_them(moe_rows):
    """Why the pad positions are computed rather than added in closed form: a pad position's router input
    depends on the tokens before it (causal attention), so two rows pad differently."""
    model, tokenizer, items = moe_rows
    rows = [items[1]["input_ids"].tolist(), items[1]["input_ids"].flip(0).tolist()]
    _, inputs = upstream_aux(model, rows, tokenizer.pad_token_id, MAX_SEQ_LEN)
    hidden = inputs[0][1]
    first_pad = len(rows[0])
    assert not torch.allclose(hidden[0, first_pad:], hidden[1, first_pad:], atol=1e-4)


def test_dense_runs_pad_to_the_longest_row():
    tokenizer = types.SimpleNamespace(pad_token_id=0)
    items = [{"input_ids": torch.ones(3, dtype=torch.long), "labels": torch.ones(3, dtype=torch.long)}]
    dense = tu.lm_collate(types.SimpleNamespace(use_moe=0, max_seq_len=64), tokenizer)(items)
    assert dense["input_ids"].shape == (1, 3)
    moe = tu.lm_collate(types.SimpleNamespace(use_moe=1, max_seq_len=8), tokenizer)(items)
    assert moe["input_ids"].tolist() == [[1, 1, 1, 0, 0, 0, 0, 0]] and moe["attention_mask"].sum() == 3
    assert moe["labels"].tolist() == [[1, 1, 1, -100, -100, -100, -100, -100]]
