"""Queue reasons kept as messages (mmcore.queue.queuetext): the reasons the real planner gives
(mmcore.queue.queueplan.plan, a pure function) word exactly as before in English and wholly in Chinese, the
CLI and the API read English whatever the viewer's language, and reasons stored as English text by
older versions still show as they are."""
import json
from types import SimpleNamespace

from mmcore import api
from mmcore.base import i18n
from mmcore.base.gpu import GpuInfo, GpuProcess
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import queueplan, queuetext
from mmcore.train import preset_table

GIB = 1 << 30


def job(job_id, user="bob", resources=None, depends_on=None, gpus=None):
    return SimpleNamespace(id=job_id, user=user, backend="local", resources=resources or {}, depends_on=depends_on,
                           assigned_gpus=gpus)


def gpu(index, processes=()):
    return GpuInfo(index=index, name="H200", memory_used=0, memory_total=140 * GIB, utilization=0,
                   processes=tuple(processes))


def planner_decisions():
    """Every kind of reason the planner gives, from real plans: the decisions of the jobs that wait."""
    gpus = [gpu(0), gpu(1, [GpuProcess(4242, 3 * GIB)]), gpu(2)]
    active = [job(1, "alice", gpus=[0]), job(2, "carol")]
    waiting = [job(10, resources={"gpus": 1}), job(11, resources={"gpus": 1}),  # 11 waits behind 10
               job(12, resources={"gpu_ids": [0, 1]}), job(13, resources={"gpu_ids": [0]}),
               job(14, resources={"gpu_ids": [7]}), job(15, resources={"gpus": 9}), job(16),
               job(17, depends_on=3), job(18, depends_on=4), job(19, resources={"gpus": 2})]
    writes = {16: ["../out/pretrain_64.pth"], 2: ["../out/pretrain_64.pth"]}
    decisions = queueplan.plan(waiting, active, gpus, cpu_slots=1, outputs=lambda j: writes.get(j.id, ()),
                               dependencies={3: ("running", queuetext.stage(3, 0)), 4: ("failed", queuetext.stage(4))})
    cpu = queueplan.plan([job(20), job(21)], [job(2, "carol")], [], cpu_slots=1)
    # A job that waits keeps the free GPU for itself, and the file it will write, from the jobs behind it.
    same = {30: ["../out/sft_64.pth"], 32: ["../out/sft_64.pth"]}
    ahead = queueplan.plan([job(30, resources={"gpus": 2}), job(31, resources={"gpus": 1}), job(32)],
                           [job(1, "alice", gpus=[0])], [gpu(0), gpu(1)], cpu_slots=4,
                           outputs=lambda j: same.get(j.id, ()))
    return [d for d in decisions + cpu + ahead if not d.start]


# The planner's reasons, word for word as it wrote them when it stored English text.
ENGLISH = [
    "#1 in the queue · waiting for 1 GPU; GPU 0 held by job 1 (alice); GPU 1 used by another process "
    "(pid 4242, 3.0 GiB); GPU 2 held by job 10 (bob)",
    "#2 in the queue · waiting for GPUs 0, 1; GPU 0 held by job 1 (alice); GPU 1 used by another process "
    "(pid 4242, 3.0 GiB)",
    "#3 in the queue · waiting for GPU 0; GPU 0 held by job 1 (alice)",
    "#4 in the queue · GPU 7 does not exist on this machine (3 GPUs)",
    "#5 in the queue · asks for 9 GPUs; this machine has 3",
    "#6 in the queue · waiting for job 2 (carol), which writes ../out/pretrain_64.pth",
    "#7 in the queue · waiting for stage 1 (job 3) to succeed",
    "#8 in the queue · waiting for job 4 to succeed",
    "#9 in the queue · waiting for 2 GPUs; GPU 0 held by job 1 (alice); GPU 1 used by another process "
    "(pid 4242, 3.0 GiB); GPU 2 held by job 10 (bob)",
    "#1 in the queue · waiting for a CPU slot (1 of 1 in use: job 2 (carol))",
    "#2 in the queue · waiting for a CPU slot (1 of 1 in use: job 2 (carol))",
    "#1 in the queue · waiting for 2 GPUs; GPU 0 held by job 1 (alice)",
    "#2 in the queue · waiting for 1 GPU; GPU 0 held by job 1 (alice); GPU 1 wanted by job 30 (bob), ahead in the queue",
    "#3 in the queue · waiting for job 30 (bob), ahead in the queue, which writes ../out/sft_64.pth",
]
# Reasons stored outside the planner: queued, handed to Slurm, held by Slurm.
OTHERS = [(queuetext.SCHEDULER, "waiting for the scheduler"), (queuetext.SUBMITTING, "submitting to Slurm"),
          (queuetext.slurm_submitted("77"), "Slurm job 77: submitted"),
          (queuetext.slurm_state("77", "pending", "Resources"), "Slurm job 77: pending (Resources)"),
          (queuetext.slurm_state("77", "pending"), "Slurm job 77: pending")]
# Names and data that stay as they are in Chinese: units, Slurm's own words, owners, paths.
KEPT = {"GPU", "CPU", "GiB", "pid", "Slurm", "pending", "Resources", "alice", "bob", "carol"}


def english_words(text):
    return [w for w in text.replace("(", " ").replace(")", " ").split()
            if w.isascii() and w.isalpha() and w not in KEPT]


def test_planner_reasons_word_as_before_in_english_and_wholly_in_chinese():
    decisions = planner_decisions()
    assert [d.reason for d in decisions] == ENGLISH
    stored = [d.stored for d in decisions] + [text for text, _ in OTHERS]
    for text, expected in zip(stored, ENGLISH + [words for _, words in OTHERS]):
        assert json.loads(text)["parts"], text  # kept as messages, not as words
        with i18n.language("en"):
            assert queuetext.reason_text(text) == expected
        with i18n.language("zh"):
            worded = queuetext.reason_text(text)
            assert queuetext.english(text) == expected  # the CLI's and the API's wording, whatever the viewer's
        assert not english_words(worded), (expected, worded)
    assert not i18n.missing


def test_chinese_wording_of_nested_parts():
    """Jobs, owners, stages and lists inside a reason are worded too, with Chinese punctuation."""
    cpu = queueplan.plan([job(20)], [job(2, "carol"), job(3, None)], [], cpu_slots=2)
    stage = queueplan.plan([job(17, depends_on=3)], [], [], cpu_slots=1, dependencies={3: ("running", queuetext.stage(3, 1))})
    gpus = queueplan.plan([job(12, resources={"gpu_ids": [0, 1]})], [job(1, "alice", gpus=[0])], [gpu(0), gpu(1)],
                          cpu_slots=1)
    with i18n.language("zh"):
        assert queuetext.reason_text(cpu[0].stored) == "队列第 1 位 · 等待 CPU 槽位（2 个中已用 2 个：任务 2（carol）、任务 3）"
        assert queuetext.reason_text(stage[0].stored) == "队列第 1 位 · 等待第 2 阶段（任务 3）成功完成"
        assert queuetext.reason_text(gpus[0].stored) == "队列第 1 位 · 等待 GPU 0、1；GPU 0 被任务 1（alice）占用"


def test_reasons_stored_as_english_text_show_as_they_are():
    old = ["#1 in the queue · waiting for a CPU slot (1 of 1 in use: job 9 (alice))", "waiting for the scheduler",
           "something new; waiting for the scheduler", "{not json", '{"place": 1}']
    for text in old:
        for lang in i18n.LANGUAGES:
            with i18n.language(lang):
                assert queuetext.reason_text(text) == text
        assert queuetext.english(text) == text
    assert queuetext.reason_text(None) == "" and queuetext.english(None) is None


def test_the_api_and_the_cli_give_the_reason_in_english(tmp_path, monkeypatch):
    """`mmcore.api` (and `python -m mmcore queue`, which prints its fields) reads a stored reason in
    English, whatever language the calling thread has; an older English row reads as it is."""
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    store = JobStore(tmp_path / "home" / "jobs.db")
    reasons = [planner_decisions()[0].stored, "#2 in the queue · waiting for a CPU slot"]
    ids = [store.create("pretrain", f"w{i}", preset_table.demo_preset("pretrain"), ["python3", "x.py"], "/tmp", {},
                        user="bob", waiting=1, resources={"gpu_ids": [0]}, queue_reason=reason)
           for i, reason in enumerate(reasons)]
    with i18n.language("zh"):
        assert api.get(ids[0])["queue_reason"] == ENGLISH[0]
        assert [j["queue_reason"] for j in api.list_jobs()] == [reasons[1], ENGLISH[0]]
    store.update(ids[0], waiting=0, status="running", queue_reason=None)
    assert api.get(ids[0])["queue_reason"] is None


def test_slurms_reason_is_stored_as_messages(tmp_path):
    """What squeue says of a pending job (state and reason) is stored as messages, worded when read."""
    from mmcore.queue import slurm
    store = JobStore(tmp_path / "jobs.db")
    job_id = store.create("pretrain", "held", preset_table.demo_preset("pretrain"), ["python3", "x.py"], "/tmp", {},
                          user="bob", backend="slurm")
    store.update(job_id, external_id="77", queue_reason=queuetext.slurm_submitted("77"))
    slurm.SlurmBackend()._apply(store, store.get(job_id), {"job_state": "PENDING", "state_reason": "Priority"})
    stored = store.get(job_id).queue_reason
    assert queuetext.english(stored) == "Slurm job 77: pending (Priority)"
    with i18n.language("zh"):
        assert queuetext.reason_text(stored) == "Slurm 任务 77：pending（Priority）"
    slurm.SlurmBackend()._apply(store, store.get(job_id), {"job_state": "PENDING", "state_reason": "None"})
    assert queuetext.english(store.get(job_id).queue_reason) == "Slurm job 77: pending"


def test_a_launch_says_queued_started_or_ended_as_the_job_stands_in_both_languages(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    values = preset_table.demo_preset("pretrain")
    job_id = store.create("pretrain", "j", values, ["python"], str(tmp_path), {}, waiting=1,
                          queue_reason=queuetext.stored([queueplan.message("reason.cpu_slot", used=1, slots=1,
                                                                           holders=[queuetext.job(3, "al")])], 1))
    assert queuetext.launched_text(job_id, store.get(job_id)) == \
        f"Queued as job {job_id}: #1 in the queue · waiting for a CPU slot (1 of 1 in use: job 3 (al))"
    assert queuetext.launched_text(9, None) == "Queued as job 9."  # a row that cannot be read: what was done
    store.update(job_id, status="running")
    assert queuetext.launched_text(job_id, store.get(job_id)) == f"Started job {job_id}: it is running."
    store.update(job_id, status="failed")
    assert queuetext.launched_text(job_id, store.get(job_id)) == f"Job {job_id} has ended: failed."
    with i18n.language("zh"):
        assert queuetext.launched_text(job_id, store.get(job_id)) == f"任务 {job_id} 已结束：失败。"
        store.update(job_id, status="queued")
        assert queuetext.launched_text(job_id, store.get(job_id)).startswith(f"已作为任务 {job_id} 排队：队列第 1 位")


def test_a_queued_pipeline_names_its_jobs_and_the_one_that_starts_first():
    stages = [(5, "pretrain"), (6, "sft"), (7, "distill_reason"), (8, "grpo")]
    assert queuetext.job_ids_text([5, 6, 7, 8]) == "5–8"
    assert queuetext.job_ids_text([5, 7, 9]) == "5, 7, 9"  # another user's launch came between two stages
    assert queuetext.job_ids_text([5]) == "5"
    assert queuetext.pipeline_queued_text(2, stages).startswith(
        "Queued pipeline 2: jobs 5–8; job 5 (Pretrain) starts first")
    with i18n.language("zh"):
        assert queuetext.job_ids_text([5, 7, 9]) == "5、7、9"
        assert queuetext.pipeline_queued_text(2, stages[1:]).startswith("已将流水线 2 加入队列：任务 6–8；任务 6（SFT")
