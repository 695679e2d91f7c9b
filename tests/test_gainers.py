"""The responses behind a reward-hacking finding (mmcore.runs.gainers) one click away: the finding on Jobs
and on Logs links to the Logs page's Rollouts view opened on the responses that gained the most training
reward and the least held-out score (AppTest, records written by the trainers' writers and rescored by the
dashboard's rescore, as in test_reward_hacking)."""
import urllib.parse

import pytest
from _pages_helpers import open_page
from _rescore_helpers import write_run
from test_reward_hacking import S, length_run

from mmcore.base import i18n
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import gainers, health, metric_stream
from mmcore.widgets import rollouts_panel


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_gainers_are_the_responses_the_reward_paid_for_without_a_held_out_gain(tmp_path):
    df = length_run(tmp_path / "flat")
    [finding] = health.evaluate(df, S)
    top = gainers.gainers(tmp_path / "flat", finding.since_step)
    assert top.attrs["held_out"] == "rescore/rule" and len(top) == gainers.LIMIT
    assert (top["step"] >= finding.since_step).all() and (top["gain"] > 0).all() and (top["held_out"] == 0).all()
    order = top["gain"] - top["held_out_gain"]
    assert list(order) == sorted(order, reverse=True)
    assert top.iloc[0]["reward"] == top["reward"].max()  # the longest reply first
    assert gainers.gainers(tmp_path / "flat", 10**6).empty  # no step that late
    # Without a second opinion, the held-out score is the rule's check of the answer: a response whose
    # answer became right gained held-out score, and is not listed.
    write_run(tmp_path / "plain", steps=6)
    top = gainers.gainers(tmp_path / "plain")
    assert top.attrs["held_out"] == "rule" and len(top)
    assert set(top["held_out"]) <= {0.0, 1.0} and (top["held_out_gain"] <= 0).all() and (top["gain"] > 0).all()


def finding_job(tmp_path):
    """A finished GRPO job whose records fire the reward-hacking check."""
    store = JobStore()
    job_id = store.create("grpo", "length pays", {}, ["python", "../trainer/train_grpo.py"], "/tmp", {})
    store.update(job_id, status="succeeded", exit_code=0)
    open(store.get(job_id).log_path, "w").write("")
    length_run(metric_stream.job_run_dir(store.get(job_id), store.home))
    return job_id


def _link(markdown_text):
    url = markdown_text[markdown_text.rindex("](") + 2:-1]
    path, query = url.split("?", 1)
    return path, dict(urllib.parse.parse_qsl(query.split("#")[0]))


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_finding_links_to_the_rollouts_view_opened_on_its_gainers(tmp_path, language):
    with i18n.language(language):  # the test's reading of the widgets in the page's language too
        shown(tmp_path, language)


def shown(tmp_path, language):
    job_id = finding_job(tmp_path)
    state = {i18n.STATE_KEY: language}
    jobs = open_page("pages/jobs.py", {"job": str(job_id)}, state=state)
    assert not jobs.exception, jobs.exception
    opener = i18n.t("logs.gainers.open")
    [warning] = [w.value for w in jobs.warning if opener in w.value]
    path, query = _link(warning)
    assert path == "/logs" and query["job"] == str(job_id) and query[gainers.GAINERS_PARAM] == "1"
    since = int(query[gainers.STEP_PARAM])
    # The link opens Logs with the Rollouts view on those responses.
    logs = open_page("pages/logs.py", query, state=state)
    assert not logs.exception, logs.exception
    assert logs.session_state[rollouts_panel.GAINERS_KEY][1] == since
    table = next(d.value for d in logs.dataframe if "held_out_gain" in d.value.columns)
    run_dir = metric_stream.job_run_dir(JobStore().get(job_id), JobStore().home)
    expected = gainers.gainers(run_dir, since)
    assert list(table["response"]) == list(expected["response"]) and len(table)
    # The Logs page's own finding links there too, and "show every response" closes the list.
    [own] = [w.value for w in logs.warning if opener in w.value]
    assert _link(own)[1][gainers.STEP_PARAM] == str(since)
    logs.button(key="logs.rollouts.gainers_all").click().run()
    assert rollouts_panel.GAINERS_KEY not in logs.session_state
    assert not any("held_out_gain" in d.value.columns for d in logs.dataframe)
