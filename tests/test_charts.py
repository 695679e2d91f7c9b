"""Tests of the chart helpers (mmcore.logs.charts): smoothing maths, figures, metric choice, CSV export."""
import io
import math

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
    assert 900 <= len(fig.data[0].x) <= 1002
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
    band, line = fig.data
    assert band.fill == "toself" and line.x.min() == 5 and line.x.max() == 10


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
