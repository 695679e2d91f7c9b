"""The Logs page (AppTest): charts of job logs, files and uploads; messages instead of empty charts."""
import base64
import json
import os
import shutil
import sys
import time

import numpy as np
import pytest
from _pages_helpers import open_page, texts
from streamlit.testing.v1 import AppTest
from test_logparse import DATA

from mmcore.base.paths import ROOT
from mmcore.jobs import change_watch
from mmcore.jobs.jobstore import JobStore
from mmcore.logs import charts
from mmcore.runs import metric_stream
from mmcore.live import livechart_wire

TIMEOUT_S = 60


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def finished_job(store, train_type, sample, name="run", params=None):
    """A finished job whose log is a copy of a sample log (None: no log file)."""
    job_id = store.create(train_type, name, params or {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    now = time.time()
    store.update(job_id, status="succeeded", started_at=now - 60, ended_at=now, exit_code=0)
    if sample is not None:
        shutil.copy(DATA / sample, store.get(job_id).log_path)
    return job_id


def open_logs(query=None):
    at = AppTest.from_file(str(ROOT / "pages" / "logs.py"), default_timeout=TIMEOUT_S)
    if query:
        at.query_params.update(query)
    return at.run()


def log_tails(at):
    """The log tails on the page as first drawn (HTML boxes that open at their end)."""
    return [json.loads(e.proto.json)["html"] for e in at.get("bidi_component")
            if e.proto.component_name == "minimind_live_tail"]


def decoded(values):
    """Plotly sends numeric arrays as base64 ({"dtype", "bdata"}): back to a list."""
    if isinstance(values, dict) and "bdata" in values:
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def chart_specs(at):
    """The page's Plotly figures as JSON data, with x and y decoded to lists (AppTest serves no static
    files: the charts are Streamlit's own, see mmcore.live.livechart)."""
    specs = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        for trace in spec["data"]:
            trace["x"], trace["y"] = decoded(trace["x"]), decoded(trace["y"])
        specs.append(spec)
    return specs


def live_charts(at):
    """The messages of the page's live charts (where Plotly.js is served), in page order."""
    return [json.loads(e.proto.json) for e in at.get("bidi_component") if e.proto.component_name == "minimind_live_chart"]


def multiselect(at, label):
    return next(w for w in at.multiselect if w.label == label)


def test_nothing_to_show_yet():
    at = open_logs()
    assert not at.exception
    assert at.title[0].value == "Logs"
    assert any("No jobs yet" in t for t in texts(at.info))
    assert not chart_specs(at)


def test_job_from_query_param_is_charted():
    store = JobStore()
    other = finished_job(store, "pretrain", "upstream_pretrain.log", name="other")
    job_id = finished_job(store, "grpo", "dashboard_grpo.log", name="grpo demo")
    at = open_logs({"job": str(job_id)})
    assert not at.exception
    assert multiselect(at, "Jobs").value == [job_id]
    assert len(multiselect(at, "Jobs").options) == 2 and other != job_id
    # GRPO: reward charts come first; every metric is charted by default, under one name per quantity.
    assert multiselect(at, "Metrics").value == ["reward", "reward_std", "loss", "kl", "response_len", "lr"]
    specs = chart_specs(at)  # two columns: the element tree lists the left column first
    assert sorted(s["layout"]["title"]["text"] for s in specs) == sorted(
        charts.chart_title(m) for m in multiselect(at, "Metrics").value)
    assert specs[0]["layout"]["title"]["text"] == charts.chart_title("reward")
    low, high, *reward = specs[0]["data"]  # the trainer logs the reward's std: a band around it
    assert high["fill"] == "tonexty" and "fill" not in low
    assert high["fillcolor"].startswith("rgba(") and high["name"].endswith(" ± std") and high["showlegend"]
    # Smoothing defaults to "auto": two points are too few to smooth, so the raw line is the line.
    assert [t["name"] for t in reward] == [f"{job_id} — grpo demo"]
    assert reward[0]["x"] == [3, 5] and reward[0]["y"] == [0.5123, 0.75]  # the nan is not drawn
    summary = " ".join(texts(at.markdown))
    assert "step 5 / 10 (50%)" in summary and "Reward 0.75" in summary
    assert at.get("download_button")
    assert "Epoch: 1, Step: 5/10" in " ".join(log_tails(at))  # the log tail, opened at its end


def test_logs_opened_with_nothing_chosen_charts_the_latest_run():
    from mmcore.jobs import run_selection
    store = JobStore()
    older = finished_job(store, "pretrain", "upstream_pretrain.log", name="older")
    newer = finished_job(store, "distill_reason", "upstream_pretrain.log", name="newer")
    store.update(older, started_at=time.time() - 3600)
    at = open_logs()  # as the sidebar opens it: no job in the URL
    assert not at.exception
    assert multiselect(at, "Jobs").value == [newer] and chart_specs(at)
    # Reasoning distill's weighted loss is explained beside its chart
    assert any("weighs the tokens of its four tags" in c and ") 10× (" in c for c in texts(at.caption))
    multiselect(at, "Jobs").set_value([]).run()  # a choice of nothing stays nothing
    assert multiselect(at, "Jobs").value == [] and not chart_specs(at)
    assert not any("four tags" in c for c in texts(at.caption))

    jobs = {job.id: job for job in store.list()}
    assert run_selection.default_jobs(jobs) == [newer]
    store.update(older, status="running")
    assert run_selection.default_jobs({job.id: job for job in store.list()}) == [older]  # running first
    assert run_selection.default_jobs({}) == []


def test_controls_change_the_charts():
    store = JobStore()
    a = finished_job(store, "pretrain", "upstream_pretrain.log", name="a")
    b = finished_job(store, "pretrain", "upstream_pretrain.log", name="b")
    at = open_logs()
    multiselect(at, "Jobs").set_value([a, b]).run()
    assert not at.exception
    assert multiselect(at, "Metrics").value == ["loss", "lr"]  # epoch_Time (minutes left) is not charted by default
    assert len(chart_specs(at)[0]["data"]) == 2  # auto smoothing: five points are too few to smooth
    at.select_slider(key="logs.smoothing").set_value(0.6).run()
    loss = chart_specs(at)[0]["data"]
    assert len(loss) == 4 and {t["line"]["color"] for t in loss[:2]} != {t["line"]["color"] for t in loss[2:]}

    at.select_slider(key="logs.smoothing").set_value(0.0)
    multiselect(at, "Log scale").set_value(["loss"])
    at.number_input(key="logs.x_from").set_value(300)
    at.run()
    specs = chart_specs(at)
    assert len(specs) == 2 and len(specs[0]["data"]) == 2  # raw lines only, one per run
    assert specs[0]["layout"]["yaxis"]["type"] == "log"  # log scale on the loss chart only
    assert specs[1]["layout"]["yaxis"]["type"] == "linear"
    assert min(decoded(specs[0]["data"][0]["x"])) >= 300  # the x range
    # The whole view is in the URL: a teammate opening it sees the same.
    query = dict(at.query_params)
    # (loss and lr are the default metrics here: left out)
    assert query == {"job": f"{a},{b}", "smooth": "0", "log": "loss", "from": "300"}, query
    again = open_logs(query)
    assert not again.exception
    assert chart_specs(again) == specs


def test_a_link_with_bad_values_says_so_and_shows_the_rest():
    store = JobStore()
    a = finished_job(store, "pretrain", "upstream_pretrain.log", name="a")
    at = open_logs({"job": f"{a}", "smooth": "lots", "x": "parsecs"})
    assert not at.exception
    assert any("smooth='lots'" in w for w in texts(at.warning)) and any("x='parsecs'" in w for w in texts(at.warning))
    assert chart_specs(at)


def test_log_without_progress_lines_says_so_and_shows_the_error():
    store = JobStore()
    job_id = finished_job(store, "sft", "dashboard_failed.log")
    at = open_logs({"job": str(job_id)})
    assert not at.exception
    assert not chart_specs(at)
    assert any("no progress lines" in t for t in texts(at.info))
    assert any("DataFormatError: ../dataset/bad.jsonl line 3" in c.value for c in at.code)


def test_missing_log_file_is_a_message():
    store = JobStore()
    job_id = finished_job(store, "dpo", None)
    at = open_logs({"job": str(job_id)})
    assert not at.exception
    assert any("does not exist" in t for t in texts(at.warning))


def test_other_log_files_and_a_non_minimind_log(home):
    store = JobStore()
    store.logs_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / "not_minimind.log", store.logs_dir / "nginx.log")
    shutil.copy(DATA / "dashboard_spo_ppo.log", store.logs_dir / "old-spo.log")
    at = open_logs()
    files = multiselect(at, "Log files")
    assert sorted(files.options) == ["nginx.log", "old-spo.log"]
    files.set_value(["nginx.log", "old-spo.log"]).run()
    assert not at.exception
    assert any("nginx.log is not a MiniMind training log" in t for t in texts(at.warning))
    assert "reward" in multiselect(at, "Metrics").value and chart_specs(at)


def test_uploaded_log_is_charted():
    at = open_page("pages/logs.py")  # through the app's entry: the local user, who may upload (a viewer may not)
    at.file_uploader(key="logs.upload").upload("upstream.log", (DATA / "upstream_pretrain.log").read_bytes())
    at.run()
    assert not at.exception
    specs = chart_specs(at)
    assert specs[0]["layout"]["title"]["text"] == charts.chart_title("loss")
    assert specs[0]["data"][0]["name"] == "upstream.log (uploaded)"  # four points: too few to smooth
    assert specs[0]["data"][0]["y"] == [8.896761, 7.123456, 6.5, 3.25]


def test_bad_query_param():
    at = open_logs({"job": "abc"})
    assert not at.exception
    assert any("job='abc' was ignored" in t for t in texts(at.warning))
    at = open_logs({"job": "999"})
    assert any("There is no job with id 999" in t for t in texts(at.error))


def test_running_job_shows_eta_and_refreshes():
    from _pages_helpers import wait_for

    from mmcore.jobs import runner

    store = JobStore()
    script = "import time; print('Epoch:[1/2](5/10) loss:1.5 lr:0.001', flush=True); time.sleep(120)"
    job_id = store.create("pretrain", "live", {"epochs": "2"}, [sys.executable, "-c", script], str(ROOT), {})
    runner.launch(store, job_id)
    try:
        log = store.get(job_id).log_path
        wait_for(lambda: os.path.exists(log) and "Epoch:[1/2]" in open(log, encoding="utf-8").read(),
                 what="the progress line")
        at = open_logs({"job": str(job_id)})
        assert not at.exception
        tickers = [json.loads(e.proto.json) for e in at.get("bidi_component")
                   if e.proto.component_name == "minimind_live_ticker"]
        # the page's live part follows the job's log (its ticker reruns that part alone)
        assert any(d["scope"] == "fragment" and change_watch.path_key(log) in d["files"] for d in tickers)
        summary = " ".join(texts(at.markdown))
        assert "step 5 / 20 (25%)" in summary and "ETA" in summary and "loss 1.5" in summary
    finally:
        runner.stop(store, job_id, grace=1, wait=True)


def test_a_resumed_job_continues_its_parents_curve():
    store = JobStore()
    parent = finished_job(store, "pretrain", None, name="long")
    with open(store.get(parent).log_path, "w") as f:
        f.write("".join(f"Epoch:[1/1]({s}/1000) loss:{5 - s / 1000} lr:0.0005 epoch_Time:1.0min:\n"
                        for s in (100, 200, 300, 400, 500)))
    records = metric_stream.job_dir(store.home, parent)
    resumed = store.create("pretrain", "long-resume", {"epochs": "1", "from_resume": "1"},
                           ["python", "x.py", "--run_dir", str(records)], "/tmp", {})
    store.update(resumed, status="succeeded", started_at=time.time() - 30, ended_at=time.time())
    with open(store.get(resumed).log_path, "w") as f:
        f.write("".join(f"Epoch:[1/1]({s}/1000) loss:{4 - s / 1000} lr:0.0005 epoch_Time:1.0min:\n"
                        for s in (410, 420, 600)))
    at = open_logs({"job": str(resumed)})
    assert not at.exception
    loss = next(s for s in chart_specs(at) if s["layout"]["title"]["text"] == charts.chart_title("loss"))
    lines = [t for t in loss["data"] if t.get("mode", "lines").startswith("lines")]
    assert len(lines) == 1  # one run, one line
    assert decoded(lines[0]["x"]) == [100, 200, 300, 400, 410, 420, 600]
    assert lines[0]["name"] == f"{resumed} — long-resume (resumed from {parent})"
    assert [shape["x0"] for shape in loss["layout"]["shapes"]] == [410]  # the resume point


def test_live_charts_send_their_points_once_then_only_the_new_ones(monkeypatch):
    """Where Plotly.js is served, each chart is the live component: drawn whole on the first run, then
    sent nothing while its log stands still and only the new point when it grew; the log tail the same."""
    from mmcore.live import livechart

    monkeypatch.setattr(livechart, "published_urls", lambda: {"plotly": "app/static/p.js", "module": "app/static/c.js"})
    store = JobStore()
    job_id = finished_job(store, "pretrain", "upstream_pretrain.log")
    at = open_logs({"job": str(job_id)})
    assert not at.exception and not at.get("plotly_chart")
    first = live_charts(at)
    assert [m["op"] for m in first] == ["draw", "draw"]
    assert first[0]["layout"]["title"]["text"] == charts.chart_title("loss")
    held = [livechart_wire.apply(None, m) for m in first]
    assert held[0]["arrays"]["0.y"].tolist() == [8.896761, 7.123456, 6.5, 3.25]
    at.run()
    assert [m["op"] for m in live_charts(at)] == ["same", "same"]
    with open(store.get(job_id).log_path, "a", encoding="utf-8") as f:
        f.write("Epoch:[2/2](200/44160) loss:3.000000 lr:0.0001 epoch_Time:99.0min:\n")
    at.run()
    grown = live_charts(at)
    assert [m["op"] for m in grown] == ["extend", "extend"]
    loss = grown[0]["arrays"]["0.y"]
    assert loss["keep"] == 4 and livechart_wire.decode(loss["tail"]).tolist() == [3.0]  # the new point only
    held = [livechart_wire.apply(h, m) for h, m in zip(held, grown)]
    assert held[0]["arrays"]["0.x"].tolist() == [100, 200, 300, 44260, 44360]
    tail = [json.loads(e.proto.json) for e in at.get("bidi_component") if e.proto.component_name == "minimind_live_tail"]
    assert tail[0]["op"] == "extend" and tail[0]["add"] == ["Epoch:[2/2](200/44160) loss:3.000000 lr:0.0001 "
                                                            "epoch_Time:99.0min:"]
    assert not at.exception


def test_of_many_runs_no_log_tail_is_read_nor_sent_until_chosen():
    """With many runs no tail is shown until its run is chosen (20 runs' tails would be most of each
    update), and one choice of runs stands for them all (not a box per run); choosing one shows its
    tail, under its run's name."""
    store = JobStore()
    a = finished_job(store, "pretrain", "upstream_pretrain.log", name="a")
    b = finished_job(store, "pretrain", "upstream_pretrain.log", name="b")
    at = open_logs({"job": f"{a},{b}"})
    choice = at.button_group(key="logs.tails_shown")
    assert not at.exception and choice.label == "Show the log tail of"
    assert [o.content for o in choice.proto.options] == ["1 — a", "2 — b"] and not choice.value
    assert log_tails(at) == [] and not [e for e in at.expander if e.label.startswith("Log tail")]
    choice.set_value([store.get(b).log_path]).run()  # the user chooses b
    assert "**Log tail: 2 — b**" in [m.value for m in at.markdown]
    assert len(log_tails(at)) == 1 and "Epoch:[1/" in log_tails(at)[0]


def test_the_run_picker_names_each_job_with_its_tags(home):
    """Tags are shown where a run is named: the Jobs picker's options read "12 — runs-a [baseline, lr]"; the
    page reads them without writing (no tags table is made by drawing it)."""
    import sqlite3
    from contextlib import closing

    from mmcore.actions import experiment_acts

    store = JobStore()
    plain = finished_job(store, "pretrain", "upstream_pretrain.log", name="runs-b")
    tagged = finished_job(store, "pretrain", "upstream_pretrain.log", name="runs-a")
    at = open_logs()
    assert not at.exception, at.exception
    with closing(sqlite3.connect(store.path)) as conn:
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'run_annotations'").fetchone()
    assert experiment_acts.annotate(store, tagged, tags=["lr", "baseline"]).kind == "success"
    at = open_logs()
    assert not at.exception, at.exception
    assert sorted(multiselect(at, "Jobs").options) == sorted([f"{tagged} — runs-a [baseline, lr]",
                                                               f"{plain} — runs-b"])
