"""The jobs table: formatting, rows and URL job ids."""
import re
import time

import pytest
from _tables import html_tables

from mmcore.base.gpu import GpuInfo
from mmcore.jobs import htmltable, jobtable, progress
from mmcore.jobs.jobrow import Job

T0 = 1_767_000_000.0  # a fixed unix time


def make_job(tmp_path, job_id=1, status="running", train_type="pretrain", params=None, started=T0, ended=None,
             log=None):
    path = tmp_path / f"job-{job_id}.log"
    if log is not None:
        path.write_text(log, encoding="utf-8")
    return Job(id=job_id, train_type=train_type, name=f"{train_type}-{job_id}", status=status,
               params=params if params is not None else {"epochs": "2"}, argv=["python", "x.py", "--a", "b c"],
               cwd="/tmp", env={}, log_path=str(path), created_at=T0 - 5, user="ann", host="gpu-box",
               started_at=started, ended_at=ended)


def pretrain_line(epoch, step, total, loss):
    return f"Epoch:[{epoch}/2]({step}/{total}) loss:{loss} lr:0.0005 epoch_Time:3.0min:\n"


@pytest.mark.parametrize("seconds, text", [
    (None, ""), (0, "0s"), (44.6, "45s"), (59, "59s"), (60, "1m 00s"), (725, "12m 05s"),
    (3 * 3600 + 7 * 60 + 5, "3h 07m"), (2 * 86400 + 4 * 3600, "2d 04h"), (-3, "0s")])
def test_format_duration(seconds, text):
    assert jobtable.format_duration(seconds) == text


def test_small_formatters():
    assert jobtable.format_time(None) == ""
    assert len(jobtable.format_time(T0)) == len("2026-01-02 03:04:05")
    assert jobtable.type_short("grpo") == "GRPO"
    assert jobtable.type_short("old_type") == "old_type"
    assert "@" in jobtable.whoami()
    g = GpuInfo(index=1, name="NVIDIA H200", memory_used=2 * 1024 ** 3, memory_total=140 * 1024 ** 3, utilization=35)
    assert jobtable.gpu_line(g) == "GPU 1 · NVIDIA H200 · 2.0 / 140.0 GiB · 35%"
    assert jobtable.needs_refresh({"running": 0, "queued": 1, "failed": 3})
    assert not jobtable.needs_refresh({"running": 0, "queued": 0, "succeeded": 9})


@pytest.mark.parametrize("text, result", [
    (None, (None, None)), ("", (None, None)), ("12", (12, None)), (" 7 ", (7, None))])
def test_parse_job_id(text, result):
    assert jobtable.parse_job_id(text) == result


def test_parse_job_id_rejects_non_numbers():
    job_id, message = jobtable.parse_job_id("abc")
    assert job_id is None and "not a job id" in message


def test_running_row_has_progress_step_metric_and_eta(tmp_path):
    log = "# job 1 · type pretrain · p\n" + pretrain_line(1, 50, 100, 2.5)
    job = make_job(tmp_path, log=log)
    cache = progress.ProgressCache()
    row = jobtable.job_rows([job], cache, now=T0 + 100)[0]
    assert list(row) == list(jobtable.COLUMNS)
    assert row["progress"] == 25.0  # step 50 of 2 epochs x 100 steps
    assert row["step"] == "50/200"
    assert row["metric"] == "loss 2.5"
    assert row["eta"] == "5m 00s"  # 100 s for a quarter: 300 s to go
    assert row["duration"] == "1m 40s"
    assert row["submitted_by"] == "ann@gpu-box"
    assert row["status"] == "running"
    assert row["type"] == "Pretrain"


def test_rl_row_prefers_reward_and_uses_the_params_epochs(tmp_path):
    log = "Epoch: 1, Step: 3/10, Actor Loss: 0.012345, Reward: 0.512300, Avg Response Len: 88.00, LR: 8.00e-08\n"
    job = make_job(tmp_path, train_type="grpo", params={"epochs": "1"}, log=log)
    row = jobtable.job_row(job, progress.ProgressCache().progress(job, T0 + 30), now=T0 + 30)
    assert row["metric"] == "Reward 0.5123"
    assert row["step"] == "3/10" and row["progress"] == 30.0


def test_missing_log_and_finished_rows(tmp_path):
    queued = make_job(tmp_path, job_id=2, status="queued", started=None)
    failed = make_job(tmp_path, job_id=3, status="failed", ended=T0 + 3725)
    succeeded = make_job(tmp_path, job_id=4, status="succeeded", ended=T0 + 1, log="no progress lines\n")
    rows = jobtable.job_rows([queued, failed, succeeded], progress.ProgressCache(), now=T0 + 10_000)
    assert rows[0]["progress"] == 0.0 and rows[0]["step"] == "" and rows[0]["duration"] == ""
    assert rows[1]["duration"] == "1h 02m" and rows[1]["eta"] == ""
    assert rows[2]["progress"] == 100.0  # succeeded means done, whatever the log printed


def test_params_rows_follow_the_command_line_order():
    job = Job(id=1, train_type="grpo", name="g", status="succeeded",
              params={"beta": "0.02", "epochs": "1", "gpus": [0, 1], "zzz": None}, argv=["x"], cwd="", env={},
              log_path="", created_at=time.time())
    rows = jobtable.params_rows(job)
    assert [r["parameter"] for r in rows] == ["epochs", "beta", "gpus", "zzz"]
    assert rows[2]["value"] == "0,1" and rows[3]["value"] == ""


def test_job_label():
    job = Job(id=12, train_type="sft", name="sft-a", status="queued", params={}, argv=["x"], cwd="", env={},
              log_path="", created_at=T0)
    assert jobtable.job_label(job) == "12 — sft-a"


def test_table_shows_every_cell_whole_and_escaped():
    """Name, Started and the latest value are never cut (cells do not wrap; the table scrolls
    sideways), markup in a job's name is shown as text, progress is a bar and a trend a sparkline."""
    rows = [{"id": 7, "name": "sft-lora-medical-zh-20261202-1530-resume <script>x</script>",
             "metric": "Actor loss 0.1234", "started": "12-02 17:39", "progress": 42.0, "trend": [3.0, 2.0, 2.5, 1.0]},
            {"id": 8, "name": "one-point", "metric": "", "started": "", "progress": 0.0, "trend": [0.5]},
            {"id": 9, "name": "no-metrics", "metric": "", "started": "", "progress": 100.0, "trend": []}]
    columns = ("id", "name", "progress", "metric", "trend", "started")
    body = htmltable.table_html(rows, columns, {"id": "ID", "name": "名称"}, {"trend": 'Reward "or" loss'}, theme="dark")
    assert "<script>" not in body and "&lt;script&gt;" in body
    assert "white-space:nowrap" in body and "position:sticky" in body and "#1b1e26" in body
    (table,) = html_tables(body)
    assert table["headers"]["name"] == "名称" and table["headers"]["metric"] == "metric"
    assert 'title="Reward &quot;or&quot; loss"' in body
    first, one, empty = table["rows"]
    assert first["name"] == rows[0]["name"] and first["metric"] == "Actor loss 0.1234" and first["id"] == "7"
    assert first["progress"] == "42%" and 'style="width:42.0%"' in body
    ys = [y for _, y in first["trend"]]
    assert len(ys) == 4 and ys[3] == max(ys) and ys[0] == min(ys)  # the highest value is at the top
    assert len(one["trend"]) == 1 and empty["trend"] == "" and empty["progress"] == "100%"


def test_sparkline_skips_values_that_are_not_numbers():
    assert htmltable.sparkline_svg([]) == htmltable.sparkline_svg([float("nan"), None]) == ""
    flat = html_tables(htmltable.table_html([{"trend": [2.0, 2.0, 2.0]}], ["trend"], {}))[0]["rows"][0]["trend"]
    assert {y for _, y in flat} == {htmltable.SPARK_H / 2}


def test_table_as_csv():
    import csv
    import io
    text = jobtable.rows_csv([{"id": 1, "name": "a,b", "trend": [0.5, 0.25]}], ("id", "name", "trend"), {"name": "Name"})
    assert list(csv.reader(io.StringIO(text))) == [["id", "Name", "trend"], ["1", "a,b", "0.5 0.25"]]


def test_started_is_short():
    import datetime
    now = datetime.datetime(2026, 12, 2, 18, 0).timestamp()
    assert jobtable.format_started(datetime.datetime(2026, 12, 2, 9, 5).timestamp(), now) == "09:05"
    assert jobtable.format_started(datetime.datetime(2026, 11, 30, 9, 5).timestamp(), now) == "11-30 09:05"
    assert jobtable.format_started(datetime.datetime(2025, 11, 30, 9, 5).timestamp(), now) == "2025-11-30 09:05"
    assert jobtable.format_started(None) == ""


def test_table_parts_redraw_only_the_rows_that_change():
    """The jobs table as a header and blocks: finished jobs' blocks keep their exact text when a
    running job's row moves on (so the browser leaves them alone), and all parts share the columns'
    widths (so they line up)."""
    def rows(step):
        return [{"id": 4, "name": "queued", "step": ""}, {"id": 3, "name": "running", "step": f"{step}/900"},
                {"id": 2, "name": "done-名字", "step": "900/900"}, {"id": 1, "name": "done", "step": "900/900"}]
    changing = [True, True, False, False]
    head, blocks = htmltable.table_parts(rows(5), ("id", "name", "step"), {"name": "名称"}, changing=changing,
                                         key="jobs_table")
    later_head, later = htmltable.table_parts(rows(6), ("id", "name", "step"), {"name": "名称"}, changing=changing,
                                              key="jobs_table")
    assert len(blocks) == 2 and later[1] == blocks[1] and later[0] != blocks[0] and later_head == head
    (table,) = html_tables(head, *blocks)
    assert [r["name"] for r in table["rows"]] == ["queued", "running", "done-名字", "done"]
    assert table["headers"]["name"] == "名称"
    cols = re.findall(r"<colgroup>.*?</colgroup>", head + "".join(blocks))
    assert len(cols) == 3 and len(set(cols)) == 1
    assert ".st-key-jobs_table{padding:0}" in head and ".st-key-jobs_table>div:first-child{position:sticky" in head
    widths = htmltable.column_widths(rows(5), ("id", "name", "step"), {"name": "名称"})
    assert widths["name"] >= 2 * 2 + 5  # "done-名字": wide characters count double
    assert widths["step"] >= len("900/900")


def test_parts_height_fits_a_short_table_and_caps_a_long_one():
    assert htmltable.parts_height(2) < htmltable.parts_height(5) < htmltable.TABLE_HEIGHT_PX
    assert htmltable.parts_height(500) == htmltable.TABLE_HEIGHT_PX


def live_rows(step, trend, names=("queued", "running", "done")):
    rows = {"queued": {"id": 4, "name": "queued", "step": "", "progress": 0.0, "trend": []},
            "running": {"id": 3, "name": "running <b>", "step": f"{step}/900", "progress": step / 9, "trend": trend},
            "done": {"id": 2, "name": "done", "step": "900/900", "progress": 100.0, "trend": [3.0, 2.0, 1.0]}}
    return [dict(rows[name]) for name in names]


LIVE_COLUMNS = ("id", "name", "progress", "step", "trend")


def test_live_table_is_drawn_once_then_sent_only_its_changed_cells():
    """The first message draws the whole table (escaped text, a header that stays in view, sparklines as
    inline SVG); the same rows again send nothing new; a running job's step, progress and sparkline
    send those three cells only, and a browser that applies the messages holds what a fresh draw shows."""
    headers = {"id": "ID", "name": "名称"}
    draw, sent = htmltable.table_message(live_rows(5, [3.0, 2.5]), LIVE_COLUMNS, headers, theme="dark")
    assert draw["op"] == "draw" and draw["seq"] == 1
    body = draw["html"]
    assert "<b>" not in body and "running &lt;b&gt;" in body and "position:sticky" in body and "#1b1e26" in body
    assert body.count("<svg") == 2 and "base64" not in body and 'data-row="3"' in body
    held = htmltable.apply_message(None, draw)
    assert [len(row) for row in held["rows"]] == [5, 5, 5]

    same, sent_again = htmltable.table_message(live_rows(5, [3.0, 2.5]), LIVE_COLUMNS, headers, theme="dark", sent=sent)
    assert same == {"op": "same", "epoch": draw["epoch"], "seq": 1} and sent_again == sent
    assert htmltable.apply_message(held, same) is held

    patch, sent = htmltable.table_message(live_rows(6, [3.0, 2.5, 2.0]), LIVE_COLUMNS, headers, theme="dark",
                                          sent=sent)
    assert patch["op"] == "patch" and patch["epoch"] == draw["epoch"] and (patch["after"], patch["seq"]) == (1, 2)
    assert sorted((i, j) for i, j, _ in patch["cells"]) == [(1, 2), (1, 3), (1, 4)]  # progress, step, trend
    assert len(str(patch)) < len(body) / 3
    held = htmltable.apply_message(held, patch)
    fresh = htmltable.apply_message(None, htmltable.table_message(live_rows(6, [3.0, 2.5, 2.0]), LIVE_COLUMNS, headers,
                                                                  theme="dark")[0])
    assert held["rows"] == fresh["rows"] and held["seq"] == 2
    polyline = re.search(r'points="([^"]+)"', held["rows"][1][4]).group(1)
    assert len(polyline.split()) == 3  # the sparkline gained its point

    # A browser that missed a message cannot follow the next one: it asks for a draw.
    later, _ = htmltable.table_message(live_rows(7, [3.0, 2.5, 2.0, 1.5]), LIVE_COLUMNS, headers, theme="dark",
                                       sent=sent)
    assert htmltable.apply_message(htmltable.apply_message(None, draw), later) is None
    assert htmltable.apply_message(held, later)["seq"] == 3


@pytest.mark.parametrize("change", ["new row", "order", "header", "theme", "columns"])
def test_live_table_is_drawn_again_when_its_rows_or_look_change(change):
    rows, headers, theme, columns = live_rows(5, [1.0]), {"name": "Name"}, "light", LIVE_COLUMNS
    _, sent = htmltable.table_message(rows, columns, headers, theme=theme)
    if change == "new row":
        rows = [{"id": 5, "name": "new"}] + rows
    elif change == "order":
        rows = rows[::-1]
    elif change == "header":
        headers = {"name": "名称"}
    elif change == "theme":
        theme = "dark"
    else:
        columns = columns[:-1]
    data, again = htmltable.table_message(rows, columns, headers, theme=theme, sent=sent)
    assert data["op"] == "draw" and data["epoch"] != sent.epoch and again.seq == 1
    assert len(htmltable.apply_message(None, data)["rows"]) == len(rows)
