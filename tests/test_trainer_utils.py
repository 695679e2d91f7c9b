"""Unit tests of trainer/trainer_utils.py and the loss functions of the supervised scripts (in-process)."""
import math
import os
import re
import signal
import types

import pytest
import torch

from trainer import trainer_utils as tu
from trainer.train_distill_reason import TAG_WEIGHT, make_reason_loss_fn, tag_positions
from trainer.train_distillation import distillation_loss
from trainer.train_dpo import dpo_loss, sequence_log_probs

TINY = dict(hidden_size=64, num_hidden_layers=2, use_moe=False)


def test_cosine_schedule_matches_upstream():
    assert tu.get_lr(0, 100, 1e-3) == pytest.approx(1e-3)
    assert tu.get_lr(50, 100, 1e-3) == pytest.approx(0.55e-3)
    assert tu.get_lr(100, 100, 1e-3) == pytest.approx(1e-4)
    assert tu.get_lr(30, 100, 2.0) == pytest.approx(2.0 * (0.1 + 0.45 * (1 + math.cos(math.pi * 0.3))))


def test_file_names_follow_minimind_conventions(tmp_path):
    assert tu.weight_path("../out", "pretrain", 512) == os.path.join("../out", "pretrain_512.pth")
    assert tu.weight_path("../out", "full_sft", 640, use_moe=True).endswith("full_sft_640_moe.pth")
    assert tu.resume_path("dpo", 512, True, directory=str(tmp_path)) == str(tmp_path / "dpo_512_moe_resume.pth")
    assert tu.CHECKPOINT_DIR == os.path.join(os.path.dirname(tu.TRAINER_DIR), "checkpoints")


def test_progress_line_is_the_upstream_format_and_parses():
    line = tu.format_progress(0, 2, 100, 44160, 8.896761, 0.000549999999, 332.0)
    assert line == "Epoch:[1/2](100/44160) loss:8.896761 lr:0.000549999999 epoch_Time:332.0min:"
    extra = tu.format_progress(0, 6, 10, 500, 2.1, 5e-6, 3.0, {"ce": 1.9, "distill": 2.3})
    assert re.fullmatch(r"Epoch:\[1/6\]\(10/500\) loss:2\.100000 ce:1\.900000 distill:2\.300000 lr:\S+ "
                        r"epoch_Time:3\.0min:", extra)
    from mmcore.logparse import LogParser
    parser = LogParser("unused")
    parser.feed((line + "\n" + extra + "\n").encode())
    records = parser.records
    assert records[0]["loss"] == pytest.approx(8.896761) and records[0]["lr"] == pytest.approx(0.000549999999)
    assert records[1]["ce"] == pytest.approx(1.9) and records[1]["distill"] == pytest.approx(2.3)


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


def test_atomic_save_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "w.pth"
    tu.atomic_torch_save({"x": torch.arange(3)}, str(path))
    assert torch.equal(torch.load(path)["x"], torch.arange(3))
    assert os.listdir(path.parent) == ["w.pth"]


def test_resume_state_round_trip_and_world_size_change(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = str(tmp_path / "x_64_resume.pth")
    tu.save_resume(path, model=model, optimizer=optimizer, epoch=1, step=6, world_size=2, global_step=16)
    state = tu.load_resume(path, world_size=2)
    assert (state["epoch"], state["step"], state["world_size"]) == (1, 6, 2)
    assert torch.equal(state["model"]["weight"], model.weight.detach())
    assert state["optimizer"]["state"] and state["scheduler"]["global_step"] == 16
    # Four processes instead of two: the same samples are done after half the steps.
    assert tu.load_resume(path, world_size=4)["step"] == 3
    assert tu.load_resume(path, world_size=1)["step"] == 12
    assert tu.load_resume(str(tmp_path / "missing.pth"), world_size=1) is None


def test_init_model_missing_weight_names_the_path(tmp_path):
    config = tu.model_config(**TINY)
    with pytest.raises(tu.MissingWeightError) as err:
        tu.init_model(config, "pretrain", str(tmp_path), "cpu", tokenizer=False)
    assert str(tmp_path / "pretrain_64.pth") in str(err.value)


def test_init_model_loads_half_precision_weights(tmp_path):
    config = tu.model_config(**TINY)
    torch.manual_seed(0)
    source, _ = tu.init_model(config, "none", str(tmp_path), "cpu", tokenizer=False)
    tu.save_weights(source, tu.weight_path(str(tmp_path), "full_sft", 64))
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


def test_stop_signal_finishes_the_step_once_armed():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        stop = tu.StopSignal()
        with pytest.raises(SystemExit) as exit_info:  # before training: leave at once
            os.kill(os.getpid(), signal.SIGTERM)
        assert exit_info.value.code == tu.SIGTERM_EXIT
        stop.arm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.should_stop()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_script_main_reports_a_data_error_in_one_line(capsys):
    from dataset.lm_dataset import DataFormatError

    def main():
        raise DataFormatError("data.jsonl line 7: invalid JSON")

    with pytest.raises(SystemExit) as exit_info:
        tu.script_main(main)
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == "ERROR: data.jsonl line 7: invalid JSON\n"


def test_tracker_missing_is_a_warning(capsys):
    for name in ("wandb", "swanlab"):
        try:
            __import__(name)
            pytest.skip(f"{name} is installed here")
        except ImportError:
            pass
    args = types.SimpleNamespace(use_wandb=True, wandb_project="p")
    assert tu.init_tracker(args, "run") is None
    assert "WARNING: --use_wandb" in capsys.readouterr().out
    assert tu.init_tracker(types.SimpleNamespace(use_wandb=False), "run") is None


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
