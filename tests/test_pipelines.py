"""Pipelines: stages linked by their weights, queued behind each other, held after a failure and
released by a retry. (The Demo chain runs end to end in the browser test.)"""
import os

import pytest

from mmcore.base.process_identity import process_start_time
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import pipelines, scheduler
from mmcore.train import preset_table


@pytest.fixture
def store(tmp_path, monkeypatch):
    # No scheduler process: these tests drive the queue's rounds themselves.
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)
    return JobStore(tmp_path / "jobs.db")


def test_demo_chain_links_each_stage_to_the_weights_before_it():
    stages = pipelines.TEMPLATES["demo_chain"].stages()
    assert [t for t, _ in stages] == ["pretrain", "sft", "distill_reason", "grpo"]
    sft, reason, grpo = (v for _, v in stages[1:])
    assert (sft["from_weight"], sft["weight_dir"]) == ("pretrain", preset_table.DEMO_WEIGHTS)
    assert reason["from_weight"] == "full_sft"
    assert (grpo["reasoning"], grpo["weight_dir"], grpo["reward_model_path"]) == ("1", preset_table.DEMO_WEIGHTS, "none")
    shown = pipelines.commands(stages)
    assert "--from_weight pretrain --weight_dir ../out/demo" in shown[1]
    assert "--from_weight full_sft --weight_dir ../out/demo" in shown[2]
    assert pipelines.check(stages, gpu_count=0) == []  # later stages' base weights are not yet there


def test_demo_chain_stages_are_the_demo_presets():
    """One place for the demo's sizes: a Demo chain stage runs what Demo preset fills in for its type
    (only the links to the stage before and the CPU device differ)."""
    linked = {"weight_dir", "from_weight", "reasoning", "device"}
    for train_type, values in pipelines.TEMPLATES["demo_chain"].stages():
        preset = preset_table.demo_preset(train_type)
        assert {k: v for k, v in values.items() if k not in linked} == \
            {k: v for k, v in preset.items() if k not in linked}, train_type
        assert values["epochs"] == preset["epochs"]


def test_minimind_full_chains_dpo_then_reasoning_then_grpo():
    stages = pipelines.TEMPLATES["minimind_full"].stages()
    assert [t for t, _ in stages] == ["pretrain", "sft", "dpo", "distill_reason", "grpo"]
    assert [v.get("from_weight") for _, v in stages[1:4]] == ["pretrain", "full_sft", "dpo"]
    assert stages[4][1]["reasoning"] == "1"


def test_stages_of_other_sizes_or_outputs_are_refused():
    pre = {**preset_table.demo_preset("pretrain")}
    sft = {**preset_table.demo_preset("sft"), "hidden_size": "128"}
    with pytest.raises(pipelines.PipelineRefused, match="Stage 2 .* another model size"):
        pipelines.link([("pretrain", pre), ("sft", sft)])
    with pytest.raises(pipelines.PipelineRefused, match="Stage 2 .* starts from reason or full_sft"):
        pipelines.link([("pretrain", pre), ("grpo", preset_table.demo_preset("grpo"))])


def test_create_queues_stages_behind_each_other_and_retry_releases_them(store):
    pid = pipelines.create(store, "chain", pipelines.TEMPLATES["demo_chain"].stages(), user="alice")
    p = pipelines.get(store, pid)
    assert [j.stage for j in p.stages] == [0, 1, 2, 3] and all(j.in_queue for j in p.stages)
    assert [j.depends_on for j in p.stages] == [None] + p.job_ids[:3]
    assert p.stages[1].name == "chain · 2 SFT" and p.stages[0].user == "alice"

    # Stage 1 runs (this process stands in for its supervisor), then fails: the rest is held.
    first = p.stages[0].id
    store.update(first, status="running", waiting=0, supervisor_pid=os.getpid(),
                 supervisor_start=process_start_time(os.getpid()))
    queue = scheduler.Queue(store, list_gpus=lambda: [])
    store.update(first, status="failed", exit_code=1)
    assert queue.block_after_failures() == p.job_ids[1:]
    p = pipelines.get(store, pid)
    assert p.status == "failed" and [j.status for j in p.stages[1:]] == ["blocked"] * 3

    new = pipelines.retry(store, pid, resume=True)
    p = pipelines.get(store, pid)
    assert p.stages[0].id == new and p.stages[0].params["from_resume"] == "1"
    assert [j.status for j in p.stages] == ["queued"] * 4 and p.stages[1].depends_on == new
    _, decisions = queue.decide(scheduler.queueconf.QueueSettings(cpu_slots=1))
    starts = [d.job_id for d in decisions if d.start]
    assert starts == [new]  # only the retried stage; the others wait for it
    with pytest.raises(pipelines.PipelineRefused, match="no failed or stopped stage"):
        pipelines.retry(store, pid)
