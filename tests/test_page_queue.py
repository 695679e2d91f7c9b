"""The queue on the pages (AppTest): a waiting job's reason and moves on Jobs, a pipeline as one
group with retry, the pipeline templates on Train, a pipeline's stages charted on Logs."""
import pytest
from _pages_helpers import open_page, texts

from mmcore.base import i18n
from mmcore.base.i18n import message
from mmcore.jobs.jobnote import english
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import pipelines, queueconf, queuetext
from mmcore.train import preset_table
from mmcore.widgets import queue_panel


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    # The pages' scheduler would start these jobs: the tests look at them while they wait.
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)
    return tmp_path / "home"


def _waiting(store, name, reason="#1 in the queue · waiting for a CPU slot (1 of 1 in use: job 9 (alice))"):
    return store.create("pretrain", name, preset_table.demo_preset("pretrain"), ["python3", "x.py"], "/tmp", {},
                        user="bob", waiting=1, resources={}, queue_reason=reason)


def test_jobs_shows_a_waiting_jobs_reason_and_moves_it():
    store = JobStore()
    first, second = _waiting(store, "first"), _waiting(store, "second")
    at = open_page("pages/jobs.py", query={"job": str(second)})
    assert not at.exception, at.exception
    assert any("waiting for a CPU slot" in s for s in texts(at.info))
    assert any("Runs on: This machine (queue)" in s for s in texts(at.caption))
    next(b for b in at.button if b.label == "To the top").click().run()
    assert not at.exception, at.exception
    from mmcore.queue import scheduler

    assert [j.id for j in scheduler.waiting_jobs(store)] == [second, first]
    next(b for b in at.button if b.label == "Stop").click().run()
    next(b for b in at.button if b.label == "Yes, stop").click().run()
    assert not at.exception, at.exception
    assert store.get(second).status == "stopped" and english(store.get(second).note) == "cancelled while queued"


def test_a_waiting_jobs_reason_in_the_viewers_language():
    """A reason the scheduler stored (as messages) is worded for each viewer; an older row stored as
    English text shows as it is."""
    store = JobStore()
    stored = queuetext.stored([message("reason.cpu_slot", used=1, slots=1, holders=[queuetext.job(9, "alice")])], 1)
    job_id = _waiting(store, "new", reason=stored)
    old = _waiting(store, "old")
    for lang, shown in (("en", "#1 in the queue · waiting for a CPU slot (1 of 1 in use: job 9 (alice))"),
                        ("zh", "队列第 1 位 · 等待 CPU 槽位（1 个中已用 1 个：任务 9（alice））")):
        with i18n.language(lang):  # AppTest formats widget options in the test's thread
            at = open_page("pages/jobs.py", query={"job": str(job_id)}, state={i18n.STATE_KEY: lang})
        assert not at.exception, at.exception
        assert shown in texts(at.info), texts(at.info)
    with i18n.language("zh"):
        at = open_page("pages/jobs.py", query={"job": str(old)}, state={i18n.STATE_KEY: "zh"})
    assert "#1 in the queue · waiting for a CPU slot (1 of 1 in use: job 9 (alice))" in texts(at.info)


def test_jobs_groups_a_pipeline_and_retries_its_failed_stage():
    store = JobStore()
    pid = pipelines.create(store, "chain", pipelines.TEMPLATES["demo_chain"].stages())
    p = pipelines.get(store, pid)
    store.update(p.stages[0].id, status="failed", waiting=0, exit_code=1)
    for j in p.stages[1:]:
        store.update(j.id, status="blocked", waiting=0)
    at = open_page("pages/jobs.py", query={"job": str(p.stages[2].id)})  # another stage selected
    assert not at.exception, at.exception
    assert at.session_state["jobs.selected"] == p.stages[2].id
    assert any(f"Pipeline {pid} · chain" in s and "failed" in s for s in texts(at.markdown))
    assert any("✗ 1 Pretrain (failed" in s and "⏸ 2 SFT (blocked" in s for s in texts(at.text))
    next(b for b in at.button if b.label == "Resume failed stage").click().run()
    assert not at.exception, at.exception
    p = pipelines.get(store, pid)
    assert [j.status for j in p.stages] == ["queued"] * 4 and p.stages[0].params["from_resume"] == "1"
    # It says it queued the stage's job, which the page selects: its details are shown under the message
    assert f"Queued job {p.stages[0].id}: the pipeline continues from there." in texts(at.success), texts(at.success)
    assert at.session_state["jobs.selected"] == p.stages[0].id and at.query_params["job"] == str(p.stages[0].id)


def test_train_shows_the_pipeline_templates_with_linked_commands():
    at = open_page()
    assert not at.exception, at.exception
    at.radio(key="queue.launch_what").set_value("pipeline").run()
    assert not at.exception, at.exception
    codes = [c.value for c in at.code]
    assert any("train_full_sft.py" in c and "--from_weight pretrain --weight_dir ../out/demo" in c for c in codes)
    assert any("train_grpo.py" in c and "--reasoning 1" in c for c in codes)
    next(b for b in at.button if b.label == "Run pipeline").click().run()
    assert not at.exception, at.exception
    (pid,) = [p.id for p in pipelines.list_pipelines(JobStore())]
    jobs = pipelines.get(JobStore(), pid).job_ids
    assert len(jobs) == 4 and len(JobStore().list(limit=None)) == 4
    # It says which jobs it queued and which starts first, and links to that one on Jobs (not to a bare Jobs page)
    said = f"Queued pipeline {pid}: jobs {jobs[0]}–{jobs[-1]}; job {jobs[0]} (Pretrain) starts first"
    assert any(s.startswith(said) for s in texts(at.success)), texts(at.success)
    assert [e.proto.query_string for e in at.get("page_link") if e.proto.label == f"Open job {jobs[0]} on Jobs"] \
        == [f"job={jobs[0]}"]
    at.run()  # a later run of the page (the live sidebar's) keeps the message and the link
    assert any(s.startswith(said) for s in texts(at.success))
    assert any(e.proto.label == f"Open job {jobs[0]} on Jobs" for e in at.get("page_link"))


def test_train_says_which_jobs_a_pipeline_queued_in_chinese():
    with i18n.language("zh"):  # AppTest formats widget options in the test's thread
        at = open_page(state={i18n.STATE_KEY: "zh"})
        at.radio(key="queue.launch_what").set_value("pipeline").run()
        next(b for b in at.button if b.label == "运行流水线").click().run()
    assert not at.exception, at.exception
    jobs = pipelines.list_pipelines(JobStore())[0].job_ids
    assert any(f"任务 {jobs[0]}–{jobs[-1]}；任务 {jobs[0]}（预训练）最先开始" in s for s in texts(at.success)), \
        texts(at.success)
    assert any(e.proto.label == f"在“任务”页打开任务 {jobs[0]}" and e.proto.query_string == f"job={jobs[0]}"
               for e in at.get("page_link"))


def test_logs_charts_every_stage_of_a_pipeline():
    store = JobStore()
    pid = pipelines.create(store, "chain", pipelines.TEMPLATES["demo_chain"].stages())
    at = open_page("pages/logs.py", query={"pipeline": str(pid)})
    assert not at.exception, at.exception
    assert at.multiselect(key="logs.jobs").value == pipelines.get(store, pid).job_ids
    at = open_page("pages/logs.py", query={"pipeline": "999"})
    assert any("no pipeline with id 999" in s for s in texts(at.error))


def test_queue_settings_are_saved_by_an_admin():
    at = open_page("pages/jobs.py")
    assert not at.exception, at.exception
    assert [e.label for e in at.expander if e.label == "Queue settings"] and not at.number_input  # closed: no fields yet
    at.session_state[queue_panel.SETTINGS_OPEN_KEY] = True  # opened
    at.run()
    assert not at.exception, at.exception
    at.number_input[0].set_value(3)
    next(b for b in at.button if b.label == "Save").click().run()
    assert not at.exception, at.exception
    assert queueconf.load(JobStore().home).cpu_slots == 3


def test_bad_queue_settings_are_refused_in_the_viewers_language():
    with i18n.language("zh"):
        at = open_page("pages/jobs.py", state={i18n.STATE_KEY: "zh", queue_panel.SETTINGS_OPEN_KEY: True})
        next(w for w in at.text_input if w.label == i18n.t("queue.slurm_partition")).set_value("gpu queue")
        next(b for b in at.button if b.label == i18n.t("queue.save")).click().run()
    assert not at.exception, at.exception
    errors = texts(at.error)
    assert errors == ["未保存：Slurm 分区（slurm_partition）只能包含字母、数字和 -_.:,"], errors
    assert queueconf.load(JobStore().home).slurm_partition == ""  # nothing saved
    with pytest.raises(ValueError) as raised:
        queueconf.save(JobStore().home, queueconf.QueueSettings(slurm_partition="gpu queue", slurm_nodes=0))
    assert str(raised.value) == ("Slurm nodes (slurm_nodes) must be 1 or more; "
                                 "Slurm partition (slurm_partition) may hold letters, digits and -_.:, only")
