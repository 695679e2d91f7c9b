"""Stop means every process: a torchrun job with two CPU workers (gloo) under the real supervisor.

A stop reaches torchrun's workers in their own process groups, they save their resume state, the job
is recorded as stopped with exit 143 only once no process is left; a torchrun killed with SIGKILL
takes its workers with it."""
import os
import signal
import sys
import time

import psutil
import pytest
import torch
from _runner_helpers import wait_for
from _trainer_helpers import DEMO, free_port, head_jsonl, make_repo_copy, tiny_args

from mmcore.jobs import runner
from mmcore.jobs.jobstore import JobStore

pytestmark = pytest.mark.timeout(600)


def torchrun_job(tmp_path, store):
    repo = make_repo_copy(tmp_path / "repo")
    data = head_jsonl(DEMO / "pretrain.jsonl", repo / "data" / "pretrain.jsonl", 40, repeat=50)  # long enough
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
            "train_pretrain.py", *tiny_args(data_path=data, save_weight="tree", accumulation_steps=1)]
    job_id = store.create("pretrain", "torchrun tree", {}, argv, str(repo / "trainer"), {"OMP_NUM_THREADS": "1"})
    runner.launch(store, job_id)
    job = wait_for(lambda: (j := store.get(job_id)) and j.trainer_pid and j, timeout=120, what="torchrun to start")
    log = lambda: open(job.log_path, encoding="utf-8", errors="replace").read()  # noqa: E731
    wait_for(lambda: "Epoch:[1/1](2/" in log(), timeout=300, what="two training steps")
    return repo, job, log


def tree(pid):
    """The live processes below `pid` (psutil), and `pid` itself; none when `pid` ends meanwhile."""
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:  # it exited between the caller's look and this one
        return []


def gone(procs):
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return not alive


def test_stop_reaches_every_worker_and_is_resumable(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    repo, job, log = torchrun_job(tmp_path, store)
    procs = tree(job.supervisor_pid)[1:]  # the trainer's whole tree, below its supervisor
    workers = [p for p in procs if "train_pretrain.py" in " ".join(p.cmdline()) and p.pid != job.trainer_pid]
    assert len(workers) >= 2, [p.cmdline() for p in procs]
    assert any(os.getpgid(w.pid) != job.trainer_pid for w in workers)  # torchrun's workers: groups of their own
    assert runner.stop(store, job.id, grace=240, wait=True)
    ended = store.get(job.id)
    assert (ended.status, ended.exit_code) == ("stopped", 143), log()[-3000:]
    assert gone(procs), "a process of the job outlived its stop"  # checked when the end is recorded
    wait_for(lambda: gone(tree(job.supervisor_pid)), timeout=30, what="the supervisor to exit")
    assert "SIGKILL" not in log()
    state = torch.load(repo / "checkpoints" / "tree_64_resume.pth", weights_only=True)
    assert state["world_size"] == 2 and state["step"] >= 2, (state["epoch"], state["step"], state["scheduler"], log()[-1500:])
    assert state["written_by"]["job"] == str(job.id)


def test_workers_do_not_outlive_a_killed_torchrun(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    _, job, log = torchrun_job(tmp_path, store)
    procs = [p for p in tree(job.trainer_pid)]
    assert len(procs) >= 3  # torchrun and two workers
    os.kill(job.trainer_pid, signal.SIGKILL)
    started = time.monotonic()
    wait_for(lambda: gone(procs), timeout=120, what="the workers to end")
    print(f"workers gone {time.monotonic() - started:.1f} s after torchrun's SIGKILL")
    ended = wait_for(lambda: (j := store.get(job.id)) and not j.active and j, timeout=60, what="the job's end")
    assert ended.status == "failed"
    assert "outlived" not in log()
