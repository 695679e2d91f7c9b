"""The Runs page never waits for streams that were never summarised: past a small budget a finished run's
stream is left to the background worker (a real child process), the run is listed at once and marked as being
read, and once the worker has kept the summaries in the job store's file every reader gets the values
`runresults.summarize_lines` gives of each stream. Also: the faster stream summary equals `summarize_lines`."""
import json
import os
import random

import pytest
from _pages_helpers import open_page, texts
from _runner_helpers import wait_for
from test_runs import ended, steps

from mmcore.access import roles
from mmcore.experiments import runtable
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import runresults, summary_worker
from mmcore.runs.metric_stream import job_dir

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    runresults._cache.clear()  # as a fresh process: nothing summarised here before
    yield JobStore()
    wait_for(lambda: not summary_worker.running(str(tmp_path / "home" / "jobs.db")), timeout=120,
             what="the summary worker to end")
    summary_worker._state.clear()


def many_runs(store, n):
    """`n` finished runs whose streams no one summarised (as on a restored home), newest first."""
    rng = random.Random(n)
    ids = []
    for i in range(n):
        losses = [rng.uniform(0.5, 9.0) for _ in range(rng.randint(1, 40))]
        extra = [{"global_step": len(losses), "eval/loss": rng.uniform(1, 3)}] if i % 3 == 0 else []
        ids.append(ended(store, f"run-{i}", steps(*losses, reward=rng.uniform(-1, 1)) + extra,
                         learning_rate=rng.choice(["1e-3", "5e-4"])))
    return ids[::-1]


def expected(store, job_id):
    """The results `summarize_lines` gives of the job's stream, as `runresults.results` lays them out."""
    data = (job_dir(store.home, job_id) / "metrics.jsonl").read_bytes()
    summary = runresults.summarize_lines(data[:data.rfind(b"\n") + 1].splitlines())
    return {"final_loss": summary["final_loss"], "best_loss": summary["best_loss"],
            "final_reward": summary["final_reward"], "tokens": summary["tokens"],
            "wall_time_s": store.get(job_id).duration, "steps": summary["steps"], **summary["eval"]}


def test_a_page_lists_every_run_at_once_and_the_worker_keeps_what_summarize_lines_gives(store, monkeypatch):
    ids = many_runs(store, 24)
    sizes = [os.path.getsize(job_dir(store.home, i) / "metrics.jsonl") for i in ids]
    monkeypatch.setattr(runresults, "INLINE_BYTES", sizes[0] + sizes[1])  # room for the two newest streams
    pending = set()
    runs = runtable.runs(store, pending=pending)
    assert [r["id"] for r in runs] == ids  # every run listed
    assert pending == set(ids[2:])  # the rest left to the worker
    for run in runs[2:]:
        assert run["results"] == {"final_loss": None, "best_loss": None, "final_reward": None, "tokens": None,
                                  "wall_time_s": 60.0, "steps": None}  # blank, never a wrong number
    for run in runs[:2]:
        assert run["results"] == expected(store, run["id"])
    df = runtable.frame(runs, pending=pending)
    assert list(df[runtable.READING_COLUMN]) == ["", ""] + ["…"] * 22
    assert list(df.columns).index(runtable.READING_COLUMN) == list(df.columns).index("final_loss") - 1
    wait_for(lambda: summary_worker.left(store.path) == 0, timeout=120, what="the worker to keep the summaries")
    kept = runresults.SummaryStore(store.path).keys()
    assert all(str(job_dir(store.home, i) / "metrics.jsonl") in kept for i in ids)
    runresults._cache.clear()  # a new process: everything from the kept summaries, nothing pending
    pending = set()
    runs = runtable.runs(store, pending=pending)
    assert not pending
    assert {r["id"]: r["results"] for r in runs} == {i: expected(store, i) for i in ids}
    assert "reading" not in runtable.frame(runs, pending=pending).columns


def test_without_pending_every_stream_is_read_and_a_running_jobs_stream_never_waits(store, monkeypatch):
    monkeypatch.setattr(runresults, "INLINE_BYTES", 0)
    done = ended(store, "done", steps(3.0, 2.0))
    running = ended(store, "running", steps(4.0, 1.0), status="running")
    runs = {r["id"]: r for r in runtable.runs(store)}  # the CLI's and the API's way: complete results
    assert runs[done]["results"]["final_loss"] == 2.0 and runs[running]["results"]["best_loss"] == 1.0
    runresults._cache.clear()
    pending = set()
    runs = {r["id"]: r for r in runtable.runs(store, pending=pending)}
    assert runs[running]["results"]["final_loss"] == 1.0  # read at once: it changes, no kept summary would match
    assert pending == set() and runs[done]["results"]["final_loss"] == 2.0  # kept by the first read


def test_a_stream_the_worker_cannot_read_is_read_by_the_page_not_waited_for(store, monkeypatch):
    monkeypatch.setattr(runresults, "INLINE_BYTES", 0)
    job_id = ended(store, "odd")
    store.update(job_id, final_progress={"loss": 4.25, "step": 7})
    (job_dir(store.home, job_id) / "metrics.jsonl").mkdir(parents=True)  # there, but no file to read
    pending = set()
    runtable.runs(store, pending=pending)
    assert pending == {job_id}
    wait_for(lambda: summary_worker.left(store.path) == 0, timeout=120, what="the worker to end")
    pending = set()
    [run] = runtable.runs(store, pending=pending)
    assert not pending and run["results"]["final_loss"] == 4.25  # the row's own progress, as without a stream


def test_the_runs_page_opens_with_every_run_and_marks_those_being_read(store, monkeypatch):
    ids = many_runs(store, 30)
    monkeypatch.setattr(runresults, "INLINE_BYTES", 0)
    at = open_page("pages/runs.py")
    assert not at.exception, at.exception
    df = at.dataframe[0].value
    assert list(df["Job"]) == ids and list(df["Results"]) == ["…"] * 30
    assert df["Final loss"].isna().all()
    assert "30 runs' results are being read" in " ".join(texts(at.caption))
    wait_for(lambda: summary_worker.left(store.path) == 0, timeout=120, what="the worker to keep the summaries")
    at.run()
    assert not at.exception, at.exception
    df = at.dataframe[0].value
    assert "Results" not in df.columns and "being read" not in " ".join(texts(at.caption))
    shown = dict(zip(df["Job"], df["Best loss"]))
    assert shown == {i: expected(store, i)["best_loss"] for i in ids}


LINES = [
    '{"global_step": 1, "loss": 2.5, "tokens": 10, "elapsed_s": 1.0}',
    '{"global_step": 2, "loss": NaN, "reward": Infinity}',
    '{"loss": true, "reward": false, "tokens": 3.7}',
    '{"loss": 3, "global_step": 3.0}',
    '{"eval/loss": 1.5, "eval/accuracy": NaN}',
    '{"eval\\/esc": 2.0, "\\u006coss": 0.25}',
    '  {"loss": 0.75}  ',
    '{"loss": 0.5}{"loss": 0.1}',
    '{"loss": 0.2}, {"loss": 0.05}',
    '[{"loss": 0.01}]',
    '"text"',
    '',
    '{"loss": -Infinity, "reward": 1}',
    '{"loss": 1.0, "nested": {"loss": 0.001, "eval/x": 1}}',
    '{"loss": 1e309}',
    '{"global_step": 1e3, "elapsed_s": -0.0, "名前": "ラン", "eval/中": 3}',
    'not json',
    '{"loss": 0.3',
]


@pytest.mark.parametrize("seed", range(40))
def test_the_fast_stream_summary_equals_summarize_lines(seed):
    rng = random.Random(seed)
    lines = [rng.choice(LINES) for _ in range(rng.randint(0, 30))]
    data = "\n".join(lines).encode() + (b"\n" if lines else b"")
    if seed % 10 == 1:
        data = data.replace(b"\n", b"\r\n", 1)
    elif seed % 10 == 2:
        data = b"\xef\xbb\xbf" + data
    elif seed % 10 == 3:
        data += b'{"loss": 0.0001, "x": "\xff"}\n'
    fast, slow = runresults.summarize_stream(data), runresults.summarize_lines(data.splitlines())
    # as text: NaN equals NaN there, and 1 differs from 1.0
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True), (fast, slow)
