"""Stop a pretraining run with SIGTERM and resume it: the result equals an uninterrupted run."""
import signal

import pytest
import torch
from _trainer_helpers import (
    DEMO,
    head_jsonl,
    make_repo_copy,
    proc_output,
    progress_frame,
    run_trainer,
    start_trainer,
    tiny_args,
    wait_for_text,
)

pytestmark = pytest.mark.timeout(1500)

STEPS = 40


def test_sigterm_then_resume_matches_an_uninterrupted_run(tmp_path):
    repo = make_repo_copy(tmp_path / "repo")
    data = head_jsonl(DEMO / "pretrain.jsonl", repo / "data" / "pretrain.jsonl", 8, repeat=20)  # 40 steps
    common = dict(data_path=data, learning_rate=2e-3, accumulation_steps=2, log_interval=1, save_interval=1000)

    straight = run_trainer(repo, "train_pretrain.py", tiny_args(save_weight="straight", **common))
    assert straight.returncode == 0, proc_output(straight)

    log = tmp_path / "stopped.log"
    proc = start_trainer(repo, "train_pretrain.py", tiny_args(save_weight="stopped", **common), log)
    wait_for_text(log, f"(3/{STEPS})", proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 143, log.read_text()
    stopped_text = log.read_text()
    assert "Stopped by SIGTERM" in stopped_text and "--from_resume 1" in stopped_text
    assert "Traceback" not in stopped_text
    state = torch.load(repo / "checkpoints" / "stopped_64_resume.pth", weights_only=False)
    assert 0 < state["step"] < STEPS and state["step"] % 2 == 1  # an optimizer boundary: (step + 1) % 2 == 0
    stopped_at = state["step"]

    resumed = run_trainer(repo, "train_pretrain.py", tiny_args(save_weight="stopped", from_resume=1, **common))
    assert resumed.returncode == 0, proc_output(resumed)
    assert f"skipping the first {stopped_at} steps" in resumed.stdout

    # Same losses from the first resumed step on, and the same final weights.
    straight_loss = progress_frame(straight.stdout).set_index("step")["loss"]
    resumed_loss = progress_frame(resumed.stdout).set_index("step")["loss"]
    assert resumed_loss.index[0] == stopped_at + 1 and resumed_loss.index[-1] == STEPS
    assert resumed_loss.to_dict() == pytest.approx(straight_loss.loc[resumed_loss.index].to_dict(), abs=1e-5)
    a = torch.load(repo / "out" / "straight_64.pth")
    b = torch.load(repo / "out" / "stopped_64.pth")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key].float(), b[key].float(), atol=1e-3), key
    full_a = torch.load(repo / "checkpoints" / "straight_64_resume.pth", weights_only=False)["model"]
    full_b = torch.load(repo / "checkpoints" / "stopped_64_resume.pth", weights_only=False)["model"]
    for key in full_a:
        assert torch.allclose(full_a[key], full_b[key], atol=1e-6), key
