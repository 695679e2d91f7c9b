"""Unit tests of trainer/trainer_utils.py and the loss functions of the supervised scripts (in-process)."""
import math

import pytest
import torch

from trainer import trainer_utils as tu
from trainer.checkpoint import save_weights
from trainer.rules import specs
from trainer.train_distill_reason import TAG_WEIGHT, make_reason_loss_fn, tag_positions
from trainer.train_distillation import distillation_loss, make_distill_loss_fn
from trainer.dpo_loss import dpo_loss, make_dpo_loss_fn, sequence_log_probs
from trainer.train_pretrain import lm_loss

TINY = dict(hidden_size=64, num_hidden_layers=2, use_moe=False)


def test_skip_batch_sampler():
    batches = list(tu.SkipBatchSampler(range(10), 4))
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    skipped = tu.SkipBatchSampler(range(10), 4, skip_batches=2)
    assert list(skipped) == [[8, 9]] and len(skipped) == 1
    assert list(tu.SkipBatchSampler(range(10), 4, skip_batches=5)) == []


def _indices(loader):
    return [i for batch in loader for i in batch]


def test_loader_order_is_per_epoch_deterministic_and_resumable():
    dataset = list(range(23))
    one = tu.DistInfo(False, 0, 0, 1, "cpu")
    epoch0 = _indices(tu.make_loader(dataset, 4, 0, one, collate_fn=lambda b: b))
    assert sorted(epoch0) == dataset and epoch0 != dataset
    assert _indices(tu.make_loader(dataset, 4, 0, one, collate_fn=lambda b: b)) == epoch0
    assert _indices(tu.make_loader(dataset, 4, 1, one, collate_fn=lambda b: b)) != epoch0
    assert _indices(tu.make_loader(dataset, 4, 0, one, collate_fn=lambda b: b, skip_batches=2)) == epoch0[8:]
    # Two processes split the same order: rank r takes every second sample.
    ranks = [_indices(tu.make_loader(dataset, 4, 0, tu.DistInfo(True, r, r, 2, "cpu"), collate_fn=lambda b: b))
             for r in (0, 1)]
    assert ranks[0][:11] == epoch0[0::2][:11] and ranks[1][:11] == epoch0[1::2][:11]
    assert tu.batches_per_epoch(23, 4, 1) == 6 and tu.batches_per_epoch(23, 4, 2) == 3


def test_init_model_missing_weight_names_the_path(tmp_path):
    config = tu.model_config(**TINY)
    with pytest.raises(tu.MissingWeightError) as err:
        tu.init_model(config, "pretrain", str(tmp_path), "cpu", tokenizer=False)
    assert str(tmp_path / "pretrain_64.pth") in str(err.value)


def test_init_model_loads_half_precision_weights(tmp_path):
    config = tu.model_config(**TINY)
    torch.manual_seed(0)
    source, _ = tu.init_model(config, "none", str(tmp_path), "cpu", tokenizer=False)
    save_weights(source, str(tmp_path / specs.weight_file("full_sft", 64)))
    loaded, tokenizer = tu.init_model(config, "full_sft", str(tmp_path), "cpu")
    assert tokenizer.pad_token_id == 0
    for (name, a), b in zip(source.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a.half().float(), b.float()), name
    wrong = tu.model_config(hidden_size=64, num_hidden_layers=3, use_moe=False)
    with pytest.raises(tu.SetupError, match="does not match the model"):
        tu.init_model(wrong, "full_sft", str(tmp_path), "cpu", tokenizer=False)


def test_precision_helpers_on_cpu():
    assert isinstance(tu.autocast_context("cpu", "bfloat16"), type(tu.nullcontext()))
    assert not tu.make_grad_scaler("cpu", "float16").is_enabled()
    assert tu.device_type("cuda:1") == "cuda" and tu.device_type("cpu") == "cpu"


def test_script_main_reports_a_data_error_in_one_line(capsys):
    from dataset.lm_dataset import DataFormatError

    def main():
        raise DataFormatError("data.jsonl line 7: invalid JSON")

    with pytest.raises(SystemExit) as exit_info:
        tu.script_main(main)
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == "ERROR: data.jsonl line 7: invalid JSON\n"


# -- the supervised scripts' losses ------------------------------------------------------------------------

def test_sequence_log_probs_average_the_labelled_tokens():
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[-100, -100, 3, 4, -100], [-100, 1, 2, 3, 4]])
    logps = torch.log_softmax(logits, -1)
    expected0 = (logps[0, 1, 3] + logps[0, 2, 4]) / 2  # position t predicts label t+1
    expected1 = (logps[1, 0, 1] + logps[1, 1, 2] + logps[1, 2, 3] + logps[1, 3, 4]) / 4
    assert torch.allclose(sequence_log_probs(logits, labels), torch.stack([expected0, expected1]))


def test_dpo_loss_and_gradient_on_replies_of_different_length():
    # Uniform logits over 4 tokens: every token has log p = log(1/4), a reply's mean log-prob too.
    # Chosen: 2 labelled tokens; rejected: 4. Upstream averages, so both rows count alike.
    labels = torch.tensor([[-100, 1, 2, -100, -100, -100], [-100, 1, 2, 3, 0, -100]])
    logits = torch.zeros(2, 6, 4, requires_grad=True)
    logps = sequence_log_probs(logits, labels)
    assert logps.tolist() == pytest.approx([math.log(0.25)] * 2)
    loss, _, _ = dpo_loss(logps[:1], logps[1:], logps[:1].detach(), logps[1:].detach(), beta=0.1)
    assert loss.item() == pytest.approx(math.log(2))
    loss.backward()
    # d loss / d (chosen mean) = -beta * sigmoid(0) = -0.05; d mean / d logit[label] = (1 - 1/4) / tokens.
    assert logits.grad[0, 0, 1].item() == pytest.approx(-0.05 * 0.75 / 2)
    assert logits.grad[1, 0, 1].item() == pytest.approx(0.05 * 0.75 / 4)
    assert logits.grad[0, 3:].abs().sum() == 0  # unlabelled positions get nothing


def test_dpo_loss_is_the_sigmoid_formula():
    pc, pr, rc, rr = torch.tensor([-5.0]), torch.tensor([-9.0]), torch.tensor([-6.0]), torch.tensor([-8.0])
    loss, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta=0.1)
    margin = 0.1 * ((-5 + 6) - (-9 + 8))
    assert loss.item() == pytest.approx(-math.log(1 / (1 + math.exp(-margin))))
    assert chosen.item() == pytest.approx(0.1) and rejected.item() == pytest.approx(-0.1)
    same, _, _ = dpo_loss(pc, pr, pc, pr, beta=0.1)
    assert same.item() == pytest.approx(math.log(2))


def test_distillation_loss_zero_for_identical_logits_and_scaled_by_t2():
    logits = torch.randn(6, 11)
    assert distillation_loss(logits, logits, 2.0).item() == pytest.approx(0, abs=1e-6)
    student, teacher = torch.randn(6, 11), torch.randn(6, 11)
    kl = torch.nn.functional.kl_div(torch.log_softmax(student / 2, -1), torch.softmax(teacher / 2, -1),
                                    reduction="batchmean")
    assert distillation_loss(student, teacher, 2.0).item() == pytest.approx(4 * kl.item(), rel=1e-5)


def test_distillation_alpha_weighs_the_cross_entropy():
    # Upstream: loss = alpha * CE + (1 - alpha) * KL; at alpha 0.9 the CE dominates.
    torch.manual_seed(0)
    student, _ = tu.init_model(tu.model_config(**TINY), "none", ".", "cpu", tokenizer=False)
    teacher, _ = tu.init_model(tu.model_config(**TINY), "none", ".", "cpu", tokenizer=False)
    batch = {"input_ids": torch.tensor([[1, 40, 41, 42, 2]]), "labels": torch.tensor([[-100, -100, 41, 42, 2]])}
    loss, metrics = make_distill_loss_fn(teacher, 0.9, 1.5)(student, batch)
    assert metrics["distill"].item() > 0 and abs(metrics["ce"].item() - metrics["distill"].item()) > 0.1
    assert loss.item() == pytest.approx(0.9 * metrics["ce"].item() + 0.1 * metrics["distill"].item(), rel=1e-5)
    only_ce, metrics = make_distill_loss_fn(teacher, 1.0, 1.5)(student, batch)
    assert only_ce.item() == pytest.approx(metrics["ce"].item()) and metrics["distill"].item() == 0


MOE = dict(hidden_size=64, num_hidden_layers=2, use_moe=True)


def _moe_model(seed=0):
    torch.manual_seed(seed)
    return tu.init_model(tu.model_config(**MOE), "none", ".", "cpu", tokenizer=False)[0]


def test_moe_aux_loss_weight_per_type():
    """As upstream: weight 1 in pretrain/SFT/LoRA and reasoning distillation, alpha in distillation,
    0 in DPO (and in PPO/GRPO/SPO: see test_rl_trainers)."""
    model = _moe_model()
    ids = torch.tensor([[1, 40, 30, 294, 32, 41, 2]])
    labels = torch.tensor([[-100, -100, 30, 294, 32, 41, 2]])
    batch = {"input_ids": ids, "labels": labels}
    out = model(ids, labels=labels)
    aux = out.aux_loss.item()
    assert aux > 1e-3
    assert lm_loss(model, batch)[0].item() == pytest.approx(out.loss.item() + aux, rel=1e-5)
    reason, _ = make_reason_loss_fn([[30, 294, 32]])(model, batch)
    reason_without, _ = make_reason_loss_fn([[30, 294, 32]])(_without_aux(model), batch)
    assert reason.item() - reason_without.item() == pytest.approx(aux, rel=1e-4)
    distill, _ = make_distill_loss_fn(_moe_model(1), 0.9, 1.5)(model, batch)
    distill_without, _ = make_distill_loss_fn(_moe_model(1), 0.9, 1.5)(_without_aux(model), batch)
    assert distill.item() - distill_without.item() == pytest.approx(0.9 * aux, rel=1e-4)
    pair = {"chosen_input_ids": ids, "chosen_labels": labels, "rejected_input_ids": ids[:, :5],
            "rejected_labels": labels[:, :5]}
    dpo, _ = make_dpo_loss_fn(_moe_model(), 0.1, 0)(model, pair)
    assert dpo.item() == pytest.approx(math.log(2), rel=1e-5)  # policy == reference, and no aux term


def _without_aux(model):
    """Calls `model`, but reports a zero auxiliary loss (same logits)."""
    def call(*args, **kwargs):
        out = model(*args, **kwargs)
        out.aux_loss = out.aux_loss * 0
        return out
    return call


def test_reason_tag_positions_match_whole_tags_only():
    labels = torch.tensor([[5, 30, 294, 32, 9, 30, 7, 292, 285, 32, -100]])
    hit = tag_positions(labels, [[30, 294, 32], [292, 285, 32]])
    assert hit.tolist() == [[False, True, True, True, False, False, False, True, True, True, False]]


def test_reason_loss_weights_tag_tokens():
    torch.manual_seed(0)
    model, _ = tu.init_model(tu.model_config(**TINY), "none", ".", "cpu", tokenizer=False)
    ids = torch.tensor([[1, 40, 30, 294, 32, 41, 2]])
    labels = torch.tensor([[-100, -100, 30, 294, 32, 41, 2]])
    loss, _ = make_reason_loss_fn([[30, 294, 32]])(model, {"input_ids": ids, "labels": labels})
    token_loss = torch.nn.functional.cross_entropy(model(ids).logits[0, :-1], ids[0, 1:], reduction="none")
    weights = torch.tensor([0, TAG_WEIGHT, TAG_WEIGHT, TAG_WEIGHT, 1, 1])  # targets 40 (masked), tag, 41, 2
    expected = (token_loss * weights).sum() / 5
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
