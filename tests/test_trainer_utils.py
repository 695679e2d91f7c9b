"""Unit tests of trainer/trainer_utils.py and the loss functions of the supervised scripts (in-process)."""
import math

import pytest
import torch

from trainer import specs
from trainer import trainer_utils as tu
from trainer.checkpoint import save_weights
from trainer.train_distill_reason import TAG_WEIGHT, make_reason_loss_fn, tag_positions
from trainer.train_distillation import distillation_loss
from trainer.train_dpo import dpo_loss, sequence_log_probs

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

def test_sequence_log_probs_counts_only_labelled_tokens():
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[-100, -100, 3, 4, -100], [-100, 1, 2, 3, 4]])
    logps = torch.log_softmax(logits, -1)
    expected0 = logps[0, 1, 3] + logps[0, 2, 4]  # position t predicts label t+1
    expected1 = logps[1, 0, 1] + logps[1, 1, 2] + logps[1, 2, 3] + logps[1, 3, 4]
    assert torch.allclose(sequence_log_probs(logits, labels), torch.stack([expected0, expected1]))


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
