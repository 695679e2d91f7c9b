"""The queue's decisions, with a simulated NVML (several GPUs, other processes using memory) and a
real job store: which waiting job starts, on which GPUs, and what the others are told."""
import itertools
import os
from types import SimpleNamespace

import pytest

from mmcore.base import gpu
from mmcore.base.paths import TRAINER_DIR
from mmcore.base.process_identity import process_start_time
from mmcore.jobs.jobnote import english
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import backends, jobqueue, queueconf, resources, scheduler
from mmcore.train import preset_table

_names = itertools.count()
GIB = 1 << 30
MIB = 1 << 20


class SimNVMLError(Exception):
    pass


class SimNVML:
    """Stands in for pynvml: GPUs with 80 GiB each; `procs[i]` lists (pid, bytes) using GPU i."""
    NVMLError = SimNVMLError

    def __init__(self, count, procs=None):
        self.count = count
        self.procs = procs or {}

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return "NVIDIA H100"

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = sum(m or 0 for _, m in self.procs.get(handle, ()))
        return SimpleNamespace(used=used, total=80 * GIB, free=80 * GIB - used)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=0, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=m) for pid, m in self.procs.get(handle, ())]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return []


@pytest.fixture
def store(tmp_path):
    return JobStore(tmp_path / "jobs.db")


def job(store, resources=None, user="bob", status="queued", assigned=None, save_weight=None, priority=0,
        train_type="pretrain", depends_on=None, trainer_pid=None):
    """A job row as the queue writes it: waiting when queued, holding `assigned` GPUs when running."""
    values = preset_table.demo_preset(train_type)
    values["save_weight"] = save_weight or f"w{next(_names)}"
    waiting = 1 if status == "queued" else 0
    job_id = store.create(train_type, "t", values, ["python3", "x.py"], str(TRAINER_DIR), {}, user=user,
                          resources=resources or {}, waiting=waiting, priority=priority, depends_on=depends_on)
    if status != "queued":
        # This test process stands in for its supervisor, so reconcile() leaves it running.
        store.update(job_id, status=status, assigned_gpus=assigned, trainer_pid=trainer_pid,
                     supervisor_pid=os.getpid(), supervisor_start=process_start_time(os.getpid()))
    return job_id


def decide(store, nvml, **settings):
    queue = scheduler.Queue(store, list_gpus=lambda: gpu.list_gpus(nvml))
    _, decisions = queue.decide(queueconf.QueueSettings(**settings))
    return {d.job_id: d for d in decisions}


def test_any_gpus_skip_held_and_foreign_gpus(store):
    nvml = SimNVML(4, {1: [(4242, 3 * GIB)], 2: [(4343, 100 * MIB)]})
    held = job(store, user="alice", status="running", assigned=[0])
    two = job(store, {"gpus": 2})
    one = job(store, {"gpus": 1})
    d = decide(store, nvml)
    # GPU 0 is ours (alice's job), GPU 1 has a foreign 3 GiB process; 100 MiB on GPU 2 is under the limit.
    assert d[two].start and d[two].gpus == (2, 3)
    assert not d[one].start
    assert d[one].reason == (f"#1 in the queue · waiting for 1 GPU; GPU 0 held by job {held} (alice); "
                             f"GPU 1 used by another process (pid 4242, 3.0 GiB); GPU 2 held by job {two} (bob); "
                             f"GPU 3 held by job {two} (bob)")


def test_foreign_memory_limit_is_a_setting(store):
    nvml = SimNVML(1, {0: [(4242, 3 * GIB)]})
    one = job(store, {"gpus": 1})
    assert not decide(store, nvml)[one].start
    assert decide(store, nvml, foreign_memory_mib=4096)[one].start


def test_processes_of_our_own_jobs_are_not_foreign(store):
    me = os.getpid()  # stands for a running job's trainer, which NVML lists on its GPU
    nvml = SimNVML(2, {0: [(me, 10 * GIB)], 1: [(me, 10 * GIB)]})
    job(store, status="running", assigned=[0], trainer_pid=me)
    one = job(store, {"gpu_ids": [1]})
    d = decide(store, nvml)
    assert d[one].start and d[one].gpus == (1,)


def test_specific_gpus_wait_for_exactly_those(store):
    nvml = SimNVML(3)
    held = job(store, user="alice", status="running", assigned=[0])
    both = job(store, {"gpu_ids": [0, 1]})
    other = job(store, {"gpu_ids": [2]})
    missing = job(store, {"gpu_ids": [7]})
    d = decide(store, nvml)
    assert not d[both].start
    assert d[both].reason == f"#1 in the queue · waiting for GPUs 0, 1; GPU 0 held by job {held} (alice)"
    assert d[other].start and d[other].gpus == (2,)
    assert not d[missing].start and "GPU 7 does not exist" in d[missing].reason


def test_a_waiting_job_keeps_what_it_waits_for_from_later_jobs(store):
    nvml = SimNVML(3)
    job(store, user="alice", status="running", assigned=[0])
    big = job(store, {"gpus": 3})
    small = job(store, {"gpus": 1})
    d = decide(store, nvml)
    assert not d[big].start and not d[small].start  # no starving the 3-GPU job with 1-GPU jobs
    assert f"GPU 1 wanted by job {big} (bob), ahead in the queue" in d[small].reason


def test_more_gpus_than_the_machine_has_is_said(store):
    big = job(store, {"gpus": 5})
    assert "asks for 5 GPUs; this machine has 2" in decide(store, SimNVML(2))[big].reason



def test_one_gpu_on_a_machine_without_one_is_said_in_the_singular(store):
    one = job(store, {"gpus": 1})
    assert "asks for a GPU; this machine has 0" in decide(store, SimNVML(0))[one].reason


def test_cpu_slots_first_come_first_served(store):
    running = job(store, user="alice", status="running")
    first, second, third = job(store), job(store), job(store)
    d = decide(store, SimNVML(0), cpu_slots=2)
    assert d[first].start and not d[second].start and not d[third].start
    in_use = f"waiting for a CPU slot (2 of 2 in use: job {running} (alice), job {first} (bob))"
    assert d[second].reason == f"#1 in the queue · {in_use}"  # places count the jobs that still wait
    assert d[third].reason == f"#2 in the queue · {in_use}"


def test_small_jobs_run_in_their_own_lane_beside_training_that_holds_every_cpu_slot(store):
    training = job(store, user="alice", status="running")  # holds the only CPU slot
    cpu_job = job(store)
    first, second = job(store, {"lane": "small"}), job(store, {"lane": "small"})
    d = decide(store, SimNVML(0), cpu_slots=1)
    assert not d[cpu_job].start and d[first].start and not d[second].start  # one small job at a time
    assert d[cpu_job].reason == f"#1 in the queue · waiting for a CPU slot (1 of 1 in use: job {training} (alice))"
    assert d[second].reason == f"#2 in the queue · waiting for the small-job lane (1 of 1 in use: job {first} (bob))"


def test_a_running_small_job_takes_no_cpu_slot_and_holds_the_lane(store):
    small = job(store, {"lane": "small"}, user="carol", status="running")
    cpu_job, waiting_small = job(store), job(store, {"lane": "small"})
    d = decide(store, SimNVML(0), cpu_slots=1)
    assert d[cpu_job].start and not d[waiting_small].start
    assert d[waiting_small].reason == \
        f"#1 in the queue · waiting for the small-job lane (1 of 1 in use: job {small} (carol))"


def test_priority_and_moves_change_the_order(store):
    a, b, c = job(store), job(store), job(store)
    urgent = job(store, priority=5)
    assert [j.id for j in scheduler.waiting_jobs(store)] == [urgent, a, b, c]
    assert jobqueue.move(store, c, "top")
    assert jobqueue.move(store, a, "down")
    assert [j.id for j in scheduler.waiting_jobs(store)] == [urgent, c, b, a]
    assert jobqueue.move(store, a, "up")
    assert [j.id for j in scheduler.waiting_jobs(store)] == [urgent, c, a, b]
    assert jobqueue.set_priority(store, b, 10)
    d = decide(store, SimNVML(0), cpu_slots=1)
    assert d[b].start and not d[urgent].start
    with pytest.raises(resources.QueueRefused):
        jobqueue.set_priority(store, b, 10 ** 6)


def test_cancel_takes_a_job_out_of_the_queue(store):
    a, b = job(store), job(store)
    assert backends.stop(store, a)
    assert store.get(a).status == "stopped" and english(store.get(a).note) == "cancelled while queued"
    assert not backends.stop(store, a)
    assert [j.id for j in scheduler.waiting_jobs(store)] == [b]


def test_jobs_writing_the_same_weight_file_wait_for_each_other(store):
    running = job(store, user="alice", status="running", save_weight="pretrain")
    same = job(store, save_weight="pretrain")
    other = job(store, save_weight="other")
    later_same = job(store, save_weight="other")
    d = decide(store, SimNVML(0), cpu_slots=4)
    weights = os.path.normpath(TRAINER_DIR / preset_table.DEMO_WEIGHTS / "pretrain_64.pth")
    assert not d[same].start
    assert d[same].reason == f"#1 in the queue · waiting for job {running} (alice), which writes {weights}"
    assert d[other].start
    assert not d[later_same].start and f"waiting for job {other} (bob)" in d[later_same].reason


def test_output_paths_name_weights_and_resume_state(store):
    j = store.get(job(store, save_weight="pretrain"))
    paths = resources.output_paths(j)
    assert paths == (os.path.normpath(TRAINER_DIR / preset_table.DEMO_WEIGHTS / "pretrain_64.pth"),
                     os.path.normpath(TRAINER_DIR / "../checkpoints/pretrain_64_resume.pth"))


def test_stages_wait_for_the_stage_before_and_are_held_when_it_fails(store):
    first = job(store, status="running")
    store.update(first, stage=0)
    second = job(store, depends_on=first)
    third = job(store, depends_on=second)
    d = decide(store, SimNVML(0), cpu_slots=4)
    assert not d[second].start and d[second].reason == f"#1 in the queue · waiting for stage 1 (job {first}) to succeed"
    store.update(first, status="failed")
    queue = scheduler.Queue(store, list_gpus=lambda: [])
    assert queue.block_after_failures() == [second, third]
    assert store.get(third).status == "blocked" and f"job {second}" in english(store.get(third).note)


def test_resources_from_values():
    assert resources.resources_for({"device": "cpu"}) == {}
    assert resources.resources_for({"device": "cuda:1"}) == {"gpu_ids": [1]}
    assert resources.resources_for({"device": "", "gpus": [0, 2]}) == {"gpu_ids": [0, 2]}
    assert resources.resources_for({"device": "auto"}, gpu_count=2) == {"gpus": 1}
    assert resources.resources_for({"device": "auto"}, gpu_count=0) == {}
    assert resources.resources_for({"device": "cpu"}, gpus=2) == {"gpus": 2}
    assert resources.resources_for({}, gpus=[3]) == {"gpu_ids": [3]}
    with pytest.raises(resources.QueueRefused):
        resources.resources_for({}, gpus=-1)
    assert resources.values_for_gpus({"device": "cpu"}, [2]) == {"device": "cuda:2", "gpus": []}
    assert resources.values_for_gpus({"device": "cpu"}, [2, 3]) == {"device": "", "gpus": [2, 3]}


def test_cpu_slots_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(queueconf.CPU_SLOTS_ENV, "3")
    assert queueconf.load(tmp_path).effective_cpu_slots() == 3
    monkeypatch.delenv(queueconf.CPU_SLOTS_ENV)
    queueconf.save(tmp_path, queueconf.QueueSettings(cpu_slots=2, foreign_memory_mib=512))
    assert queueconf.load(tmp_path).effective_cpu_slots() == 2
    assert queueconf.load(tmp_path).foreign_memory_mib == 512
    with pytest.raises(ValueError, match="default_backend"):
        queueconf.save(tmp_path, queueconf.QueueSettings(default_backend="cloud"))
