"""The Logs page's held-out view (AppTest): training reward against the held-out signals on one chart, the
per-prompt table and a prompt's groups across steps, in English and in Chinese. Records are written by the
trainers' writers (trainer/rules/records.py) and rescored by mmcore.runs.rescore, into real files."""
import pytest
from test_page_records import open_page, recorded_job

from mmcore import rollouts
from mmcore.base import i18n
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import heldout_view, metric_stream
from trainer.rules import records


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def evaluated_job():
    """A finished GRPO job with held-out evaluations at steps 0, 6 and 12, rescored by the rule."""
    store = JobStore()
    job_id = recorded_job(store)
    run_dir = metric_stream.job_run_dir(store.get(job_id), store.home)
    writer = records.MetricsWriter(str(run_dir), resume_step=12)  # as a resumed run appends
    for step, accuracy in ((0, 0.1), (6, 0.2), (12, 0.2)):  # a step's record holds its evaluation, as the loop's
        trained = {"loss": 0.1, "reward": 0.1 * step} if step else {}
        writer.write(step, 0, step, {**trained, "eval/reward/mean": 0.4 + accuracy, "eval/accuracy": accuracy}, 0, 0)
    writer.close()
    rollouts.rescore(run_dir, "format")
    return job_id, run_dir


def test_signals_are_one_long_table_of_every_series(tmp_path):
    _, run_dir = evaluated_job()
    long = heldout_view.signals(metric_stream.read(run_dir))
    assert list(dict.fromkeys(long["signal"])) == ["reward", "eval/reward/mean", "eval/accuracy",
                                                   "rescore/format/mean"]
    assert list(long[long["signal"] == "eval/accuracy"]["global_step"]) == [0, 6, 12]
    assert long["value"].notna().all() and len(long[long["signal"] == "reward"]) == 12


@pytest.mark.parametrize("language", ["en", "zh"])
def test_logs_shows_the_chart_and_the_prompt_table(language):
    job_id, run_dir = evaluated_job()
    at = open_page("logs.py", {"job": str(job_id)})
    if language == "zh":
        at.session_state[i18n.STATE_KEY] = "zh"
        at.run()
    assert not at.exception, at.exception
    headers = [h.value for h in at.subheader]
    with i18n.language(language):
        assert i18n.t("logs.heldout") in headers and i18n.t("logs.prompts") in headers
    charts = at.get("vega_lite_chart")  # st.line_chart of the long table: one line per signal
    assert charts, "no held-out chart"
    table = next(d for d in at.dataframe if "flag" in d.value.columns)
    assert len(table.value) == 2 and set(table.value["flag"]) <= {"always_right", "always_wrong", "learned",
                                                                  "forgotten", "learnable"}
