"""Queue reasons in the viewer's language (mmcore.queuetext): the reasons the real planner writes
(mmcore.queueplan.plan, a pure function) read the same in English and are reworded in Chinese."""
from types import SimpleNamespace

from mmcore import i18n, queueplan, queuetext
from mmcore.gpu import GpuInfo, GpuProcess

GIB = 1 << 30


def job(job_id, user="bob", resources=None, depends_on=None, gpus=None):
    return SimpleNamespace(id=job_id, user=user, backend="local", resources=resources or {}, depends_on=depends_on,
                           assigned_gpus=gpus)


def gpu(index, processes=()):
    return GpuInfo(index=index, name="H200", memory_used=0, memory_total=140 * GIB, utilization=0,
                   processes=tuple(processes))


def planner_reasons():
    """Every kind of reason the planner gives, from real plans."""
    gpus = [gpu(0), gpu(1, [GpuProcess(4242, 3 * GIB)]), gpu(2)]
    active = [job(1, "alice", gpus=[0]), job(2, "carol")]
    waiting = [job(10, resources={"gpus": 1}), job(11, resources={"gpus": 1}),  # 11 waits behind 10
               job(12, resources={"gpu_ids": [0, 1]}), job(13, resources={"gpu_ids": [0]}),
               job(14, resources={"gpu_ids": [7]}), job(15, resources={"gpus": 9}), job(16),
               job(17, depends_on=3), job(18, depends_on=4), job(19, resources={"gpus": 2})]
    writes = {16: ["../out/pretrain_64.pth"], 2: ["../out/pretrain_64.pth"]}
    decisions = queueplan.plan(waiting, active, gpus, cpu_slots=1, outputs=lambda j: writes.get(j.id, ()),
                               dependencies={3: ("running", "stage 1 (job 3)"), 4: ("failed", "job 4")})
    reasons = [d.reason for d in decisions if not d.start]
    cpu = queueplan.plan([job(20), job(21)], [job(2, "carol")], [], cpu_slots=1)
    # A job that waits keeps the free GPU for itself, and the file it will write, from the jobs behind it.
    same = {30: ["../out/sft_64.pth"], 32: ["../out/sft_64.pth"]}
    ahead = queueplan.plan([job(30, resources={"gpus": 2}), job(31, resources={"gpus": 1}), job(32)],
                           [job(1, "alice", gpus=[0])], [gpu(0), gpu(1)], cpu_slots=4,
                           outputs=lambda j: same.get(j.id, ()))
    return reasons + [d.reason for d in cpu + ahead if not d.start]


STORED = ["waiting for the scheduler", "submitting to Slurm", "Slurm job 77: submitted",
          "Slurm job 77: pending (Resources)", "Slurm job 77: pending"]


def test_queue_reasons_read_the_same_in_english_and_are_reworded_in_chinese():
    reasons = planner_reasons() + STORED
    kinds = " | ".join(reasons)
    for needle in ("held by job 1 (alice)", "used by another process (pid 4242, 3.0 GiB)", "waiting for GPUs 0, 1",
                   "does not exist on this machine", "asks for 9 GPUs", "which writes", "to succeed", "CPU slot",
                   "waiting for 1 GPU", "waiting for 2 GPUs", "wanted by job", "ahead in the queue, which writes"):
        assert needle in kinds, needle  # the plans above give every kind of reason
    for reason in reasons:
        with i18n.language("en"):
            assert queuetext.reason_text(reason) == reason
        with i18n.language("zh"):
            worded = queuetext.reason_text(reason)
        ascii_words = [w for w in worded.replace("(", " ").replace(")", " ").split()
                       if w.isascii() and w.isalpha() and w not in ("GPU", "CPU", "GiB", "pid", "Slurm", "pending", "Resources",
                                                                   "alice", "bob", "carol")]
        assert not ascii_words, (reason, worded)
    assert queuetext.reason_text("something new; waiting for the scheduler") == "something new; waiting for the scheduler"
    assert not i18n.missing
