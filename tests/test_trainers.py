"""Smoke runs of the six supervised training scripts on CPU: a tiny model on the bundled demo data.

Each run is a real subprocess in a temporary copy of the repository layout (see _trainer_helpers): it
must exit 0, write its weight and resume files, and print progress lines that mmcore.logs.log_parser reads.
"""
import math
import os

import pytest
import torch
from _trainer_helpers import (
    DEMO,
    head_jsonl,
    make_repo_copy,
    proc_output,
    progress_frame,
    run_trainer,
    save_random_weights,
    tiny_args,
)

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A repository copy with tiny random base weights in base/ (hidden 64, 2 layers; teacher 128)."""
    root = make_repo_copy(tmp_path_factory.mktemp("repo"))
    for name in ("full_sft", "dpo"):
        save_random_weights(root / "base", name, seed=1)
    save_random_weights(root / "base", "teacher", hidden_size=128, seed=2)
    return root


def check_run(repo, proc, weight, resume, expected_steps, epochs=1):
    """Exit 0, a model-size first line, the weight and resume files, and parseable progress lines."""
    assert proc.returncode == 0, proc_output(proc)
    assert "Traceback" not in proc.stderr and "Warning:" not in proc.stderr, proc_output(proc)
    assert proc.stdout.splitlines()[0].split(":")[0].endswith("Params"), proc_output(proc)
    assert (repo / "out" / weight).is_file(), proc_output(proc)
    assert (repo / "checkpoints" / resume).is_file(), proc_output(proc)
    frame = progress_frame(proc.stdout)
    assert list(frame["step"]) == list(range(1, expected_steps + 1)) * epochs
    assert list(frame["epoch"]) == [e for e in range(1, epochs + 1) for _ in range(expected_steps)]
    assert set(frame["total_steps"]) == {expected_steps}
    assert frame["loss"].notna().all() and frame["lr"].notna().all()
    return frame


def test_pretrain_learns_a_small_repeated_corpus(repo):
    data = head_jsonl(DEMO / "pretrain.jsonl", repo / "data" / "pretrain.jsonl", 8, repeat=50)  # 100 steps
    proc = run_trainer(repo, "train_pretrain.py", tiny_args(
        data_path=data, learning_rate=5e-3, log_interval=1, save_interval=50))
    assert proc.returncode == 0, proc_output(proc)
    frame = progress_frame(proc.stdout)
    assert list(frame["step"]) == list(range(1, 101))
    first, last = frame["loss"].iloc[0], frame["loss"].iloc[-10:].mean()
    assert first > 8 and last < 0.7 * first, f"loss went from {first} to {last}\n{proc.stdout}"
    # The cosine schedule ends at a tenth of the peak learning rate.
    assert frame["lr"].iloc[-1] == pytest.approx(5e-4, rel=1e-6)

    weights = torch.load(repo / "out" / "pretrain_64.pth")
    assert weights["model.embed_tokens.weight"].dtype == torch.float16
    assert "model.layers.1.self_attn.q_proj.weight" in weights
    state = torch.load(repo / "checkpoints" / "pretrain_64_resume.pth", weights_only=False)
    # The last optimizer boundary (--accumulation_steps 8: after steps 7, 15, ..., 95; 96-100 are not applied).
    assert (state["epoch"], state["step"], state["world_size"]) == (0, 95, 1)
    assert {"model", "optimizer", "scheduler", "rng"} <= state.keys()
    # the structured records, in the command line's default folder: every logged step, the same loss
    from mmcore.runs import metric_stream
    records_dir = metric_stream.records_dir(os.environ["MINIMIND_DASHBOARD_HOME"]) / "pretrain-pretrain_64"
    stream = metric_stream.read(records_dir)
    assert list(stream["global_step"]) == list(range(1, 101))
    assert stream["loss"].tolist() == pytest.approx(frame["loss"].tolist(), abs=1e-6)
    assert list(stream["samples"]) == [4 * s for s in range(1, 101)] and (stream["tokens"].diff().dropna() > 0).all()
    assert {"lr", "time/step_s", "tokens_per_s", "elapsed_s"} <= set(stream.columns)


def test_pretrain_packed_rows_learn(repo):
    """--pack 1: the demo texts packed into full 64-token rows; every row is full, the loss falls."""
    data = head_jsonl(DEMO / "pretrain.jsonl", repo / "data" / "pretrain_pack.jsonl", 16, repeat=10)
    proc = run_trainer(repo, "train_pretrain.py", tiny_args(
        data_path=data, pack=1, max_seq_len=64, batch_size=4, accumulation_steps=1, learning_rate=5e-3, log_interval=1,
        save_interval=1000, save_weight="packed"))
    assert proc.returncode == 0, proc_output(proc)
    frame = progress_frame(proc.stdout)
    assert len(frame) >= 5
    first, last = frame["loss"].iloc[0], frame["loss"].iloc[-3:].mean()
    assert first > 8 and last < 0.8 * first, f"loss went from {first} to {last}\n{proc.stdout}"
    assert (repo / "out" / "packed_64.pth").is_file()


def test_full_sft(repo):
    data = head_jsonl(DEMO / "sft.jsonl", repo / "data" / "sft.jsonl", 16)
    proc = run_trainer(repo, "train_full_sft.py", tiny_args(
        data_path=data, from_weight="full_sft", weight_dir="../base", save_weight="sft_smoke", epochs=2))
    check_run(repo, proc, "sft_smoke_64.pth", "sft_smoke_64_resume.pth", 4, epochs=2)


def test_lora_trains_only_the_adapters(repo):
    data = head_jsonl(DEMO / "lora_identity.jsonl", repo / "data" / "lora.jsonl", 12)
    proc = run_trainer(repo, "train_lora.py", tiny_args(
        data_path=data, from_weight="full_sft", weight_dir="../base", lora_name="lora_smoke",
        save_dir="../out", learning_rate=1e-3))
    check_run(repo, proc, "lora_smoke_64.pth", "lora_smoke_64_resume.pth", 3)
    saved = torch.load(repo / "out" / "lora_smoke_64.pth")
    assert saved and all(".lora.A.weight" in k or ".lora.B.weight" in k for k in saved)
    # The base model stayed frozen: its weights in the resume state equal the starting ones.
    base = torch.load(repo / "base" / "full_sft_64.pth")
    model = torch.load(repo / "checkpoints" / "lora_smoke_64_resume.pth", weights_only=False)["model"]
    for key, value in base.items():
        assert torch.equal(model[key].half(), value), key
    assert any(model[k].abs().sum() > 0 for k in model if k.endswith("lora.B.weight"))  # B moved off zero


def test_dpo_logs_rewards_and_starts_at_log2(repo):
    data = head_jsonl(DEMO / "dpo.jsonl", repo / "data" / "dpo.jsonl", 8)
    proc = run_trainer(repo, "train_dpo.py", tiny_args(
        data_path=data, from_weight="full_sft", weight_dir="../base", learning_rate=1e-4))
    frame = check_run(repo, proc, "dpo_64.pth", "dpo_64_resume.pth", 2)
    # Policy == reference before the first update: zero rewards and a loss of log(2).
    first = frame.iloc[0]
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert first["chosen_reward"] == pytest.approx(0, abs=1e-6)
    assert first["rejected_reward"] == pytest.approx(0, abs=1e-6)
    assert {"accuracy"} <= set(frame.columns)


def test_distill_reason(repo):
    data = head_jsonl(DEMO / "reason.jsonl", repo / "data" / "reason.jsonl", 8)
    proc = run_trainer(repo, "train_distill_reason.py", tiny_args(
        data_path=data, from_weight="dpo", weight_dir="../base", save_weight="reason_smoke"))
    check_run(repo, proc, "reason_smoke_64.pth", "reason_smoke_64_resume.pth", 2)


def test_distillation_from_a_bigger_teacher(repo):
    data = head_jsonl(DEMO / "sft.jsonl", repo / "data" / "distill.jsonl", 8)
    argv = tiny_args(data_path=data, from_student_weight="full_sft", from_teacher_weight="teacher",
                     weight_dir="../base", student_hidden_size=64, student_num_layers=2,
                     teacher_hidden_size=128, teacher_num_layers=2, alpha=0.5, temperature=1.5,
                     hidden_size=None, num_hidden_layers=None)
    proc = run_trainer(repo, "train_distillation.py", argv)
    frame = check_run(repo, proc, "full_dist_64.pth", "full_dist_64_resume.pth", 2)
    assert "Teacher Params" in proc.stdout
    for _, row in frame.iterrows():
        assert row["distill"] > 0
        assert row["loss"] == pytest.approx(0.5 * row["ce"] + 0.5 * row["distill"], rel=1e-4)


def test_missing_base_weight_fails_before_training(repo):
    data = head_jsonl(DEMO / "sft.jsonl", repo / "data" / "sft_missing.jsonl", 4)
    proc = run_trainer(repo, "train_full_sft.py", tiny_args(
        data_path=data, from_weight="no_such_stage", weight_dir="../base", save_weight="never"))
    assert proc.returncode != 0
    expected = str((repo / "base" / "no_such_stage_64.pth").resolve())
    assert expected in proc.stderr, proc_output(proc)
    assert "Traceback" not in proc.stderr and "Epoch:" not in proc.stdout, proc_output(proc)
    assert not (repo / "out" / "never_64.pth").exists()


def test_bad_data_line_is_one_clear_error(repo):
    bad = repo / "data" / "bad.jsonl"
    good = (DEMO / "pretrain.jsonl").read_text(encoding="utf-8").splitlines()[0]
    bad.write_text(good + "\n{\"text\": 12\n", encoding="utf-8")
    proc = run_trainer(repo, "train_pretrain.py", tiny_args(data_path=bad, save_weight="never"))
    assert proc.returncode == 1, proc_output(proc)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR:"), proc_output(proc)
    assert "bad.jsonl" in errors[0] and "line 2" in errors[0]
    assert "Epoch:" not in proc.stdout
