"""Tests of the chart helpers (mmcore.logs.charts): smoothing maths, figures, metric choice, CSV export."""
import io
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from test_logparse import DATA

from mmcore.logs import charts
from mmcore.logs.log_parser import parse_file


def run_table(losses, start=1, total=100, **more):
    steps = np.arange(start, start + len(losses))
    return pd.DataFrame({"epoch": 1, "total_epochs": 1, "step": steps, "total_steps": total,
                         "global_step": steps, "loss": losses, **more})


def test_ema_matches_hand_computed_values():
    # weight 0.5: last = 0.5, 1.25, 2.125; debiased by 1 - 0.5**n = 0.5, 0.75, 0.875
    assert charts.ema([1.0, 2.0, 3.0], 0.5) == pytest.approx([1.0, 1.25 / 0.75, 2.125 / 0.875])
    # weight 0.9, two values: last = 0.1 * 10 = 1, then 0.9 + 0.1 * 20 = 2.9; debias 0.1 and 0.19
    assert charts.ema([10.0, 20.0], 0.9) == pytest.approx([10.0, 2.9 / 0.19])


def test_ema_skips_non_finite_values_and_keeps_constants():
    out = charts.ema([1.0, math.nan, 3.0, math.inf], 0.5)
    assert out[0] == 1.0 and math.isnan(out[1]) and out[3] == math.inf
    assert out[2] == pytest.approx(1.75 / 0.75)  # the nan did not count
    assert charts.ema([0.3] * 5, 0.99).tolist() == [0.3] * 5
    assert charts.ema([1.0, 5.0], 0).tolist() == [1.0, 5.0]
    assert charts.ema([], 0.6).tolist() == []
    with pytest.raises(ValueError, match="smoothing"):
        charts.ema([1.0], 1.0)


def test_ema_equals_the_tensorboard_loop():
    rng = np.random.default_rng(0)
    values = rng.normal(size=500)
    last, n, expected = 0.0, 0, []
    for v in values:
        last = last * 0.95 + 0.05 * v
        n += 1
        expected.append(last / (1 - 0.95 ** n))
    assert charts.ema(values, 0.95) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_metric_figure_overlays_runs_raw_faint_and_smoothed_bold():
    runs = {"run A": run_table([3.0, 2.0, 1.0]), "run B": run_table([4.0, math.nan, 2.0, 1.0]),
            "no loss": run_table([1.0]).drop(columns="loss")}
    fig = charts.metric_figure("loss", runs, smoothing=0.5)
    assert [t.name for t in fig.data] == ["run A (raw)", "run A", "run B (raw)", "run B"]
    raw, smooth = fig.data[0], fig.data[1]
    assert raw.opacity == 0.25 and raw.showlegend is False and smooth.line.width > raw.line.width
    assert raw.line.color == smooth.line.color != fig.data[2].line.color
    assert list(raw.x) == [1, 2, 3] and list(raw.y) == [3.0, 2.0, 1.0]
    assert list(smooth.y) == pytest.approx(charts.ema([3.0, 2.0, 1.0], 0.5))
    assert list(fig.data[2].x) == [1, 3, 4]  # the nan is not drawn
    assert fig.layout.xaxis.title.text == "step" and fig.layout.yaxis.type == "linear"
    assert fig.layout.title.text == charts.chart_title("loss")


def test_metric_figure_without_smoothing_and_log_scale():
    fig = charts.metric_figure("loss", [("only", run_table([1.0, -1.0, 0.0, 10.0]))], smoothing=0, log_y=True)
    assert len(fig.data) == 1 and fig.data[0].name == "only"
    assert list(fig.data[0].y) == [1.0, 10.0]  # values <= 0 cannot be drawn on a log axis
    assert fig.layout.yaxis.type == "log"


def test_learning_rates_are_drawn_as_logged_even_when_smoothing():
    df = run_table([1.0, 2.0, 3.0]).rename(columns={"loss": "lr"})
    fig = charts.metric_figure("lr", {"run": df}, smoothing=0.9)
    assert len(fig.data) == 1 and list(fig.data[0].y) == [1.0, 2.0, 3.0]


def test_metric_figure_thins_long_runs():
    df = run_table(np.linspace(5, 1, 100_000), total=100_000)
    fig = charts.metric_figure("loss", {"long": df}, smoothing=0.6, max_points=1000)
    assert 500 <= len(fig.data[0].x) <= 1000  # buckets of a power-of-two size: between half and all
    assert fig.data[0].x[0] == 1 and fig.data[0].x[-1] == 100_000  # the first and last points are always kept
    assert list(fig.data[0].x) == sorted(fig.data[0].x)


def test_thinning_keeps_the_spikes():
    """A one-step loss spike (or dip) in a long run still shows after thinning, at its step."""
    y = np.full(50_000, 2.0)
    y[12_345], y[40_000] = 9.0, 0.5
    df = run_table(y, total=50_000)
    fig = charts.metric_figure("loss", {"long": df}, smoothing=0, max_points=500)
    xs, ys = list(fig.data[0].x), list(fig.data[0].y)
    assert len(xs) <= 502 and max(ys) == 9.0 and min(ys) == 0.5
    assert xs[ys.index(9.0)] == df["global_step"][12_345] and xs[ys.index(0.5)] == df["global_step"][40_000]


def test_metric_order_and_defaults():
    grpo = ["Actor Loss", "Reward", "Avg Response Len", "LR", "Reward Std", "KL"]
    assert charts.order_metrics(grpo, "grpo") == ["Reward", "Reward Std", "Actor Loss", "KL", "Avg Response Len", "LR"]
    spo = ["Actor Loss", "Reward", "Baseline", "KL", "Rho", "Avg Response Len", "LR"]
    assert charts.order_metrics(spo)[:2] == ["Reward", "Actor Loss"]  # reward first when one is logged
    pretrain = ["loss", "lr", "epoch_Time"]
    assert charts.order_metrics(pretrain, "pretrain") == ["loss", "lr", "epoch_Time"]
    assert charts.default_metrics(pretrain, "pretrain") == ["loss", "lr"]
    assert charts.default_metrics(["epoch_Time"]) == []  # minutes left: shown as the ETA, never charted
    distill = ["loss", "ce", "distill", "lr", "epoch_Time"]
    assert charts.order_metrics(distill, "distillation") == ["loss", "ce", "distill", "lr", "epoch_Time"]
    assert charts.metric_kind("Actor LR") == "lr" and charts.metric_kind("KL_ref") == "kl"
    assert charts.metric_kind("Critic Loss") == "loss"


def test_csv_export_round_trips():
    df = parse_file(DATA / "dashboard_grpo.log")
    back = pd.read_csv(io.BytesIO(charts.to_csv(df)))
    assert list(back.columns) == list(df.columns)
    assert back["Actor Loss"].tolist() == df["Actor Loss"].tolist()
    assert back["LR"].tolist() == [8e-08, 7.5e-08, 7e-08]
    both = charts.to_csv({"a": df, "b": parse_file(DATA / "upstream_pretrain.log")})
    table = pd.read_csv(io.BytesIO(both))
    assert table.columns[0] == "run" and table["run"].tolist() == ["a"] * 3 + ["b"] * 4
    assert math.isnan(table.loc[0, "loss"]) and table.loc[3, "loss"] == 8.896761
    assert charts.metric_columns(table)[:2] == ["Actor Loss", "Reward"]


def test_csv_is_named_after_its_runs():
    from mmcore.logs import charts
    assert charts.csv_file_name({"12 — sft-tiny": None, "13 — grpo/x (uploaded)": None}) == \
        "minimind-12-sft-tiny_13-grpo-x-uploaded.csv"
    long = charts.csv_file_name({"r" * 300: None})
    assert long.startswith("minimind-rrr") and long.endswith("-and-more.csv") and len(long) < 160
    assert charts.csv_file_name({"???": None}) == "minimind-metrics.csv"


def frame(steps, **columns):
    return pd.DataFrame({"global_step": steps, **columns})


def test_one_name_per_metric_across_types():
    grpo = charts.unify(frame([1, 2], **{"Actor Loss": [1.0, 0.9], "LR": [1e-6, 1e-6], "Reward": [0.1, 0.2]}))
    pretrain = charts.unify(frame([1, 2], loss=[5.0, 4.0], lr=[5e-4, 5e-4], epoch_Time=[3.0, 2.0]))
    assert charts.metric_columns(grpo) == ["loss", "lr", "reward"]
    assert charts.metric_columns(pretrain) == ["loss", "lr", "eta_min"]
    assert charts.chartable(charts.metric_columns(pretrain)) == ["loss", "lr"]  # the ETA is not a chart
    fig = charts.metric_figure("loss", {"grpo": grpo, "pretrain": pretrain}, smoothing=0)
    assert [t.name for t in fig.data] == ["grpo", "pretrain"]  # one chart holds both
    assert "actor" in fig.layout.title.text.lower() and "loss" in fig.layout.title.text.lower()
    every, lacking = charts.comparable({"grpo": grpo, "pretrain": pretrain})
    assert every == ["loss", "lr"] and lacking == {"reward": ["pretrain"]}


def test_single_point_is_a_marker_and_steps_tick_on_whole_numbers():
    fig = charts.metric_figure("loss", {"a": frame([1], loss=[2.0])}, smoothing=0.6)
    assert all(t.mode == "lines+markers" for t in fig.data)
    assert fig.layout.xaxis.tickformat == ",d" and fig.layout.xaxis.dtick == 1
    wide = charts.metric_figure("loss", {"a": frame(list(range(0, 500, 10)), loss=list(range(50)))})
    assert wide.layout.xaxis.tickformat == ",d" and wide.layout.xaxis.dtick is None


def test_log_scale_y_range_step_range_and_band():
    df = frame(list(range(1, 21)), reward=np.linspace(0, 1, 20), reward_std=np.full(20, 0.1))
    fig = charts.metric_figure("reward", {"r": df}, smoothing=0, log_y=True, y_range=(0.01, 10), x_range=(5, 10))
    assert fig.layout.yaxis.type == "log" and list(fig.layout.yaxis.range) == [-2, 1]
    low, high, line = fig.data  # the band: a lower edge, and an upper one filled down to it
    assert high.fill == "tonexty" and low.fill is None and low.legendgroup == high.legendgroup == line.legendgroup
    # Translucent, under the line, and named in the legend (the edges themselves are not).
    alpha = float(re.fullmatch(r"rgba\(\d+, \d+, \d+, ([\d.]+)\)", high.fillcolor).group(1))
    assert 0 < alpha <= 0.35 and high.opacity in (None, 1) and low.opacity in (None, 1)
    assert (high.name, high.showlegend, low.showlegend) == ("r ± std", True, False)
    assert list(high.y - low.y) == pytest.approx([0.2] * 6) and list(low.x) == list(line.x)
    assert line.x.min() == 5 and line.x.max() == 10


def test_x_axis_by_samples_where_records_give_it():
    with_records = frame([1, 2, 3], loss=[3.0, 2.0, 1.0], samples=[32, 64, 96])
    log_only = frame([1, 2, 3], loss=[3.0, 2.5, 2.0])
    assert charts.x_choices({"a": with_records, "b": log_only}) == ["step", "samples"]
    fig = charts.metric_figure("loss", {"a": with_records, "b": log_only}, smoothing=0, x="samples")
    assert [t.name for t in fig.data] == ["a"] and list(fig.data[0].x) == [32, 64, 96]


def test_auto_smoothing_follows_the_noise():
    rng = np.random.default_rng(0)
    steps = np.arange(400)
    clean = 5 * np.exp(-steps / 100) + rng.normal(0, 0.002, 400)
    noisy_reward = np.linspace(0.1, 0.4, 400) + rng.normal(0, 0.3, 400)
    assert charts.auto_smoothing(clean) < 0.3  # the trend is plain: barely smoothed
    assert charts.auto_smoothing(noisy_reward) >= 0.9  # the trend hides in the noise: smoothed hard
    assert charts.auto_smoothing([1.0, 2.0]) == 0.0
    fig = charts.metric_figure("reward", {"r": frame(steps, reward=noisy_reward)}, smoothing="auto")
    raw, smooth = fig.data
    assert np.std(np.diff(smooth.y)) < np.std(np.diff(raw.y)) / 5


# -- thinning, zoomed ranges and what a live chart sends -----------------------------------------------

def test_thinning_is_bounded_keeps_ends_and_spikes_and_its_full_buckets_stay_put():
    rng = np.random.default_rng(1)
    y = rng.normal(size=30_000)
    y[7_777] = 50.0  # a spike
    for n in (1_999, 2_000, 2_001, 4_000, 9_000, 16_000, 30_000):
        index, stable = charts.thin_index(y[:n], 2_000)
        assert 1_000 <= len(index) <= 2_000 or n <= 2_000
        assert list(index) == sorted(set(index)) and index[0] == 0 and index[-1] == n - 1 and stable < len(index) + 1
        if n > 7_777:
            assert 7_777 in index
        if n <= 2_000:
            assert list(index) == list(range(n)) and stable == n
    # Appending one point at a time never changes the stable part, until the bucket size doubles.
    index, stable = charts.thin_index(y[:9_000], 2_000)
    for n in range(9_001, 9_400):
        grown, grown_stable = charts.thin_index(y[:n], 2_000)
        assert list(grown[:stable]) == list(index[:stable]) and grown_stable >= stable
        index, stable = grown, grown_stable
    assert stable > 1_000  # most of it: only the last bucket is sent again


def test_a_zoomed_view_has_every_point_of_its_range_and_the_rest_coarsely():
    x = np.arange(1, 200_001, dtype=float)
    y = np.sin(x / 1000)
    index, stable = charts.view_index(x, y, (50_000, 51_000), max_points=2_000)
    inside = index[(x[index] >= 50_000) & (x[index] <= 51_000)]
    assert list(x[inside]) == list(np.arange(50_000, 51_001))  # every point of the window
    assert len(index) <= 2_000 and index[0] == 0 and index[-1] == len(x) - 1
    # The window's points stay while the run grows past it; only the part after it changes.
    grown, _ = charts.view_index(np.arange(1, 200_101, dtype=float), np.sin(np.arange(1, 200_101) / 1000),
                                 (50_000, 51_000), max_points=2_000)
    assert list(grown[:stable]) == list(index[:stable]) and stable > 1_001
    # A window wider than 80% of the points is thinned too; none inside: the whole run.
    wide, _ = charts.view_index(x, y, (0, 100_000), max_points=2_000)
    assert len(wide) <= 2_000
    assert list(charts.view_index(x, y, (-5, -1))[0]) == list(charts.thin_index(y)[0])
    assert list(charts.view_index(x, y, None)[0]) == list(charts.thin_index(y)[0])


def test_a_metric_chart_is_plain_data_with_one_x_per_run():
    df = frame(list(range(1, 5001)), reward=np.linspace(0, 1, 5000), reward_std=np.full(5000, 0.1))
    chart = charts.metric_chart("reward", {"r": df, "s": df}, smoothing=0.5, max_points=1000,
                                marks=[(np.int64(2500), "resumed as 7")])
    assert json.loads(json.dumps([chart.layout, chart.traces])) == [chart.layout, chart.traces]  # JSON as it is
    assert [t["name"] for t in chart.traces] == ["r (- std)", "r ± std", "r (raw)", "r", "s (- std)", "s ± std",
                                                "s (raw)", "s"]
    assert {t["x"] for t in chart.traces[:4]} == {"0.x"}  # the run's traces share its x
    assert chart.drawn_only == {"0.smooth", "0.low", "0.high", "1.smooth", "1.low", "1.high"}
    assert set(chart.points()) == {len(chart.arrays["0.x"])} and len(chart.arrays["0.x"]) <= 1000
    assert chart.layout["shapes"][0]["x0"] == 2500 and chart.layout["annotations"][0]["text"] == "resumed as 7"
    zoomed = charts.metric_chart("reward", {"r": df}, smoothing=0, max_points=1000, view=(100, 300))
    xs = zoomed.arrays["0.x"]
    assert list(xs[(xs >= 100) & (xs <= 300)]) == list(range(100, 301))


def test_chart_of_a_figure_thins_each_trace_with_its_customdata():
    import plotly.graph_objects as go
    steps = np.arange(10_000)
    fig = go.Figure(go.Scatter(x=steps * 32, y=np.cos(steps / 50), customdata=steps, mode="lines", name="r"))
    fig.update_layout(title=dict(text="panel"), height=300)
    chart = charts.chart_of(fig, max_points=500)
    assert "template" not in chart.layout and chart.layout["height"] == 300
    trace = chart.traces[0]
    assert trace["name"] == "r" and trace["customdata"] == "0.customdata"
    assert len(chart.arrays["0.x"]) <= 500
    assert list(chart.arrays["0.x"]) == list(chart.arrays["0.customdata"] * 32)  # still aligned
    assert json.loads(json.dumps(chart.traces)) == chart.traces


def grown_chart(steps, smoothing=0.0, max_points=1000):
    return charts.metric_chart("loss", {"a": run_table(np.cos(np.arange(steps) / 30) + 2)}, smoothing=smoothing,
                               max_points=max_points)


def test_a_live_chart_sends_its_points_once_then_only_what_changed():
    from mmcore.live import livechart_wire as wire

    data, sent = wire.chart_message(grown_chart(500))
    assert data["op"] == "draw" and data["seq"] == 1
    held = wire.apply(None, data)
    assert held["arrays"]["0.x"].tolist() == list(range(1, 501))
    for steps in (503, 520, 1_500, 1_900, 4_000, 4_010):  # growing past the point budget: thinned
        chart = grown_chart(steps)
        data, sent = wire.chart_message(chart, sent)
        assert data["op"] == "extend" and data["after"] == data["seq"] - 1
        held = wire.apply(held, data)
        for key, values in chart.arrays.items():  # the browser holds exactly the chart
            assert held["arrays"][key].tolist() == pytest.approx(values.tolist())
        if steps == 520:  # a few new points: only they travel
            assert data["arrays"]["0.x"]["keep"] == 503 and len(wire.decode(data["arrays"]["0.x"]["tail"])) == 17
        if steps == 4_010:  # thinned: the full buckets stay, the last one and the new points travel
            assert data["arrays"]["0.x"]["keep"] >= len(chart.arrays["0.x"]) - 4
    same, same_sent = wire.chart_message(grown_chart(4_010), sent)
    assert same == {"op": "same", "epoch": sent.epoch, "seq": sent.seq} and same_sent == sent
    assert wire.apply(held, same) is held
    # An older message of the chain (the element's own data, after its feed brought newer ones) changes nothing.
    first_draw = wire.chart_message(grown_chart(500))[0]
    assert wire.apply(held, {**first_draw, "epoch": sent.epoch}) is held
    # Another look (smoothing adds a trace): drawn anew. A browser that missed a message cannot follow.
    redrawn, _ = wire.chart_message(grown_chart(4_010, smoothing=0.5), sent)
    assert redrawn["op"] == "draw" and redrawn["epoch"] != sent.epoch
    _, later = wire.chart_message(grown_chart(4_020), sent)
    skipped, _ = wire.chart_message(grown_chart(4_030), later)
    assert wire.apply(held, skipped) is None and wire.apply(None, skipped) is None


def test_changed_points_are_sent_again_whole_and_numbers_travel_exactly():
    from mmcore.live import livechart_wire as wire

    _, sent = wire.chart_message(grown_chart(300))
    table = run_table(np.cos(np.arange(300) / 30) + 2)
    table.loc[5, "loss"] = 9.0  # an earlier point changed (a resumed run rewrote its tail)
    data, _ = wire.chart_message(charts.metric_chart("loss", {"a": table}, smoothing=0.0, max_points=1000), sent)
    assert data["op"] == "extend" and data["arrays"]["0.y"]["keep"] == 0
    assert "0.x" not in data["arrays"]  # unchanged
    for values, dtype in (([1, 2, 3], "i4"), ([0.5, 0.25], "f4"), ([0.1, 2.5e-7], "f8"), ([1.0, np.nan], "f4"),
                          ([2.0 ** 40], "f4"), ([2.0 ** 40 + 1], "f8")):
        encoded = wire.encode(values)
        assert encoded["dtype"] == dtype and wire.decode(encoded).tolist() == pytest.approx(values, nan_ok=True)
    assert wire.encode([0.1], drawn_only=True)["dtype"] == "f4"


def test_a_log_tail_sends_its_new_lines_only():
    from mmcore.live import livechart_wire as wire

    lines = [f"line {i}" for i in range(200)]
    data, sent = wire.tail_message(lines[:100], "<html>")
    assert data == {"op": "draw", "epoch": sent.epoch, "seq": 1, "html": "<html>", "count": 100}
    data, sent = wire.tail_message(lines[3:103], "<html>", sent)  # three lines more, the oldest three gone
    assert (data["op"], data["drop"], data["keep"], data["add"]) == ("extend", 3, 97, lines[100:103])
    bar = lines[3:102] + ["step 7 [####      ]"]
    data, sent = wire.tail_message(bar, "<html>", sent)
    redrawn = lines[3:102] + ["step 7 [##########]"]  # a progress bar rewrote its line
    data, sent = wire.tail_message(redrawn, "<html>", sent)
    assert (data["drop"], data["keep"], data["add"]) == (0, 99, ["step 7 [##########]"])
    assert wire.tail_message(redrawn, "<html>", sent)[0]["op"] == "same"
    assert wire.tail_message(["another log"], "<html>", sent)[0]["op"] == "draw"


def test_shared_work_is_done_once_per_version_and_forgotten_when_unused(tmp_path):
    from mmcore.jobs import run_selection
    from mmcore.live import livechart_cache

    now = [0.0]
    memo = livechart_cache.Memo(slots=2, ttl_s=60, clock=lambda: now[0])
    assert memo.get("a", 1, lambda: "a1") == "a1" and memo.get("a", 1, lambda: "other") == "a1"
    assert memo.get("a", 2, lambda: "a2") == "a2" and memo.made == 2 and len(memo) == 1  # a new version replaces
    memo.get("b", 1, lambda: "b1")
    memo.get("c", 1, lambda: "c1")
    assert len(memo) == 2 and memo.get("a", 2, lambda: "again") == "again"  # at most two slots: "a" went first
    now[0] = 100.0
    memo.get("d", 1, lambda: "d1")
    assert len(memo) == 1  # the others were not asked for within a minute

    log = tmp_path / "run.log"
    log.write_text("".join(f"Epoch:[1/1]({s}/100) loss:{5 - s / 10} lr:0.001\n" for s in range(1, 11)))
    shared = livechart_cache.Shared(clock=lambda: now[0])
    run = run_selection.Run("run", str(log))
    first, version = shared.read(run, "en")
    again, same_version = shared.read(run_selection.Run("run", str(log)), "en")  # another session's run
    assert again is first and same_version == version and shared.readings.made == 1
    parser = shared._parsers[str(log)]
    with open(log, "a") as f:
        f.write("Epoch:[1/1](11/100) loss:3.9 lr:0.001\n")
    grown, new_version = shared.read(run, "en")
    assert new_version != version and grown.table["global_step"].tolist() == list(range(1, 12))
    assert shared._parsers[str(log)] is parser and parser.records_from(0)  # the same parser read on
    assert shared.read(run, "zh")[0] is not grown  # texts in another language


def test_a_metrics_stream_is_read_once_per_version_and_incrementally_once_it_grows(tmp_path):
    from mmcore.jobs import run_selection
    from mmcore.runs import metric_stream
    from mmcore.live import livechart_cache

    folder = tmp_path / "records"
    folder.mkdir()
    stream = folder / metric_stream.METRICS_FILE

    def append(*steps):
        with open(stream, "a") as f:
            f.write("".join(json.dumps({"global_step": s, "samples": 8 * s, "loss": 1.0 / s}) + "\n" for s in steps))
    append(1, 2, 3)
    shared = livechart_cache.Shared()
    frame, version = shared.metrics(folder)
    assert frame["global_step"].tolist() == [1, 2, 3] and shared.metrics(folder)[0] is frame
    reader = shared._streams[str(stream)]
    append(4)
    grown, new_version = shared.metrics(folder)
    assert new_version != version and grown["global_step"].tolist() == [1, 2, 3, 4]
    assert frame["global_step"].tolist() == [1, 2, 3]  # what was handed out stays as it was
    append(5)
    assert shared.metrics(folder)[0]["global_step"].tolist() == [1, 2, 3, 4, 5]
    assert shared._streams[str(stream)] is reader and reader.offset == stream.stat().st_size  # read on
    # A run's reading (its log joined with the samples of its records) reads on with the same reader.
    log = tmp_path / "run.log"
    log.write_text("".join(f"Epoch:[1/1]({s}/100) loss:{5 - s / 10} lr:0.001\n" for s in range(1, 7)))
    reading, _ = shared.read(run_selection.Run("run", str(log), run_dir=folder))
    assert shared._streams[str(stream)] is reader and len(reader) == 5
    assert reading.table["samples"].tolist()[:5] == [8, 16, 24, 32, 40] and np.isnan(reading.table["samples"].iloc[5])


def test_a_slow_value_holds_up_only_those_who_want_it():
    import threading

    from mmcore.live import livechart_cache

    memo = livechart_cache.Memo()
    release, started = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(10)
        return "slow"
    got = []
    first = threading.Thread(target=lambda: got.append(memo.get("big run", 1, slow)))
    second = threading.Thread(target=lambda: got.append(memo.get("big run", 1, lambda: "again")))
    first.start()
    started.wait(10)
    second.start()
    assert memo.get("small run", 1, lambda: "small") == "small"  # not held up by the big one
    release.set()
    first.join(10)
    second.join(10)
    assert got == ["slow", "slow"] and memo.made == 2  # the second asker waited for the first's value


def same_chart(a, b):
    assert a.layout == b.layout and a.traces == b.traces and a.stable == b.stable and a.drawn_only == b.drawn_only
    assert a.arrays.keys() == b.arrays.keys()
    for key in a.arrays:
        assert np.array_equal(a.arrays[key], b.arrays[key], equal_nan=True), key


def test_when_one_of_many_runs_grows_only_its_part_of_a_chart_is_computed_again(monkeypatch):
    from mmcore.runs import rlview
    from mmcore.live import livechart_cache

    rng = np.random.default_rng(5)
    tables = {f"run {i}": run_table(rng.normal(size=3000) + i, reward=rng.random(3000), samples=np.arange(3000) * 8,
                                    **{"time/step_s": rng.random(3000)}) for i in range(6)}
    versions = [(i, 1) for i in range(6)]
    computed = []
    run_traces = charts.run_traces
    monkeypatch.setattr(charts, "run_traces", lambda i, name, *a, **k: (computed.append(name), run_traces(i, name, *a, **k))[1])
    shared = livechart_cache.Shared()
    options = dict(smoothing="auto", log_y=False, x="global_step", x_range=(None, None), y_range=(None, None), marks=())
    chart = shared.metric_chart("loss", tables, versions, "en", **options)
    same_chart(chart, charts.metric_chart("loss", tables, **options))
    assert sorted(computed) == sorted(tables) and shared.metric_chart("loss", tables, versions, "en", **options) is chart
    computed.clear()
    tables["run 3"] = run_table(np.concatenate([tables["run 3"]["loss"], [1.0, 2.0]]))  # run 3 grew
    versions[3] = (3, 2)
    grown = shared.metric_chart("loss", tables, versions, "en", **options)
    assert computed == ["run 3"]  # the other runs' thinned and smoothed traces were kept
    same_chart(grown, charts.metric_chart("loss", tables, **options))

    # The RL panels, the same way: one run's figure when it changes.
    frames = [(label, df) for label, df in tables.items()]
    figures = []
    panel_figure = rlview.panel_figure
    monkeypatch.setattr(rlview, "panel_figure", lambda panel, runs, **k: (figures.append(
        [label for label, df in runs if len(df)]), panel_figure(panel, runs, **k))[1])
    timing = next(panel for panel in rlview.PANELS if panel.key == "timing")
    chart = shared.panel_chart(timing, frames, tuple(versions), "global_step", "en")
    figures.clear()
    whole = charts.chart_of(rlview.panel_figure(timing, frames, x="global_step"))
    same_chart(chart, whole)
    frames[1] = ("run 1", tables["run 1"].iloc[:2500])
    versions[1] = (1, 2)
    figures.clear()
    shrunk = shared.panel_chart(timing, frames, tuple(versions), "global_step", "en")
    assert figures == [["run 1"]]
    same_chart(shrunk, charts.chart_of(panel_figure(timing, frames, x="global_step")))


def test_auto_smoothing_of_a_growing_run_keeps_its_weight_and_its_drawn_line():
    """"auto" chooses a run's weight from its first `settled_length` points: as the run grows by a few
    points the weight and the smoothed line drawn so far stay, and a live chart sends only the new tail."""
    from mmcore.live import livechart_wire as wire

    assert [charts.settled_length(n) for n in (7, 64, 100, 4_095, 4_096, 4_200, 200_001)] == [
        7, 64, 100, 4_032, 4_096, 4_096, 196_608]
    rng = np.random.default_rng(2)
    y = np.linspace(1, 0, 6_000) + rng.normal(0, 0.3, 6_000)
    sent, held = None, None
    for n in (5_000, 5_001, 5_010, 5_050):
        chart = charts.metric_chart("reward", {"r": frame(np.arange(1, n + 1), reward=y[:n])}, smoothing="auto")
        data, sent = wire.chart_message(chart, sent)
        held = wire.apply(held, data)
        if n > 5_000:
            assert data["op"] == "extend" and data["arrays"]["0.smooth"]["keep"] > 900  # the line drawn so far stays
    long_noisy = np.linspace(0.1, 0.4, 100_000) + rng.normal(0, 0.3, 100_000)
    long_clean = 5 * np.exp(-np.arange(100_000) / 25_000) + rng.normal(0, 0.002, 100_000)
    assert charts.auto_smoothing(long_noisy) >= 0.9 and charts.auto_smoothing(long_clean) < 0.3


def test_a_long_trace_of_a_figure_is_drawn_without_markers():
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(x=np.arange(5_000), y=np.sin(np.arange(5_000) / 50), mode="lines+markers"),
                     go.Scatter(x=np.arange(50), y=np.arange(50.0), mode="lines+markers")])
    chart = charts.chart_of(fig)
    assert chart.traces[0]["mode"] == "lines" and chart.traces[1]["mode"] == "lines+markers"
