"""Pretraining under torchrun with two CPU processes (gloo): completes, logs and saves once."""
import sys

import pytest
import torch
from _trainer_helpers import (
    DEMO,
    free_port,
    head_jsonl,
    make_repo_copy,
    proc_output,
    progress_frame,
    run_trainer,
    tiny_args,
)

pytestmark = pytest.mark.timeout(1200)


def test_torchrun_two_cpu_processes(tmp_path):
    repo = make_repo_copy(tmp_path / "repo")
    data = head_jsonl(DEMO / "pretrain.jsonl", repo / "data" / "pretrain.jsonl", 30)  # 15 a rank: 4 steps
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    proc = run_trainer(repo, "train_pretrain.py", tiny_args(data_path=data, save_interval=2, accumulation_steps=2),
                       launcher=launcher)
    assert proc.returncode == 0, proc_output(proc)
    # Rank 0 alone prints: one model-size line and one progress line per step.
    assert proc.stdout.count("Model Params") == 1, proc_output(proc)
    frame = progress_frame(proc.stdout)
    assert list(frame["step"]) == [1, 2, 3, 4] and set(frame["total_steps"]) == {4}
    assert (repo / "out" / "pretrain_64.pth").is_file()
    state = torch.load(repo / "checkpoints" / "pretrain_64_resume.pth", weights_only=False)
    # The last optimizer boundary: acc 2 steps after micro-batches 1 and 3 (2 and 4 run without an all-reduce).
    assert (state["world_size"], state["epoch"], state["step"]) == (2, 0, 3)
    leftovers = [p.name for p in (repo / "out").iterdir()] + [p.name for p in (repo / "checkpoints").iterdir()]
    # No temp files: the weight and the resume state, each with its metadata (trainer/rules/weight_meta.py).
    assert sorted(leftovers) == ["pretrain_64.pth", "pretrain_64.pth.meta.json", "pretrain_64_resume.pth",
                                 "pretrain_64_resume.pth.meta.json"]
