"""Tiny demo checkpoints for the Models page tests: a reasoning-distill model and the GRPO model trained
from it, written by the real trainers, with job rows in the job store so the catalogue attributes them.

    root = shared_demo_models(tmp_dir / "demo-models", store)   # root/out/reason_64.pth, root/out/grpo_64.pth
"""
import json
import os
import time
from pathlib import Path

import pytest
from _trainer_helpers import DEMO, head_jsonl, make_repo_copy, proc_output, run_trainer, save_random_weights, tiny_args
from filelock import FileLock

from mmcore.base.paths import TRAINER_DIR


def train_demo_models(dest):
    """Train reason_64.pth (2 steps from a random full_sft) and grpo_64.pth (2 steps from it) in `dest`.
    Returns each run's (train type, start, end) for `attribute_demo_models`."""
    root = make_repo_copy(dest)
    out = root / "out"
    save_random_weights(out, "full_sft", seed=1)
    reason_data = head_jsonl(DEMO / "reason.jsonl", root / "data" / "reason.jsonl", 8)
    rl_data = head_jsonl(DEMO / "rlaif.jsonl", root / "data" / "rlaif.jsonl", 4)
    runs = [("distill_reason", "train_distill_reason.py",
             {"data_path": reason_data, "from_weight": "full_sft", "max_seq_len": 96, "learning_rate": 1e-3}),
            ("grpo", "train_grpo.py",
             {"data_path": rl_data, "max_seq_len": 48, "max_gen_len": 12, "batch_size": 2, "num_generations": 2,
              "learning_rate": 1e-4, "reward_model_path": "none", "reasoning": 1})]
    done = []
    for train_type, script, options in runs:
        started = time.time()
        proc = run_trainer(root, script, tiny_args(**options), timeout=300)
        assert proc.returncode == 0, proc_output(proc)
        done.append((train_type, started, time.time()))
    return done


def attribute_demo_models(root, runs, store):
    """The demo runs as succeeded jobs in `store` (their start before their weights' write), so that the
    catalogue attributes reason_64.pth and grpo_64.pth to them."""
    for train_type, started, ended in runs:
        job_id = store.create(train_type, f"demo {train_type}", {"save_dir": str(root / "out"), "hidden_size": "64",
                              "num_hidden_layers": "2"}, ["python", f"train_{train_type}.py"], str(TRAINER_DIR), {})
        store.update(job_id, status="succeeded", started_at=started, ended_at=ended, exit_code=0)


def shared_demo_models(root, store):
    """The demo models in `root`, trained by whichever test process of a run asks first (the others of a
    parallel run wait on the lock and reuse them), attributed to jobs in this process's own `store`."""
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    record = root.parent / f"{root.name}.json"
    with FileLock(str(root.parent / f"{root.name}.lock")):
        if not record.is_file():
            record.write_text(json.dumps(train_demo_models(root)))
    attribute_demo_models(root, json.loads(record.read_text()), store)
    return root


@pytest.fixture
def only_default_write_roots(monkeypatch):
    """The catalogue walks the write roots: keep it to the repository's (the tests' temp folder is one
    too, see conftest); the demo runs' weights are found through their jobs' save folders. Import it
    into a test module with `pytestmark = pytest.mark.usefixtures("only_default_write_roots")`."""
    from trainer.rules import roots
    monkeypatch.setenv(roots.WRITE_ENV, os.pathsep.join(map(str, roots.default_roots().write)))
