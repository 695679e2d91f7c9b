"""Health rules on synthetic metrics streams: each fires when it should, with the right start step,
and stays quiet on healthy or merely noisy streams."""
import math

import numpy as np
import pandas as pd
import pytest

from mmcore.base import i18n
from mmcore.runs import health

S = health.HealthSettings(window=5)


def stream(n=30, **columns):
    """A healthy GRPO-like stream of `n` logged steps; keyword columns override (lists or callables of step)."""
    steps = np.arange(1, n + 1)
    rng = np.random.default_rng(0)
    df = pd.DataFrame({
        "global_step": steps, "loss": 0.1 + 0.01 * rng.standard_normal(n), "reward": np.linspace(0.2, 0.8, n),
        "frac_reward_zero_std": np.full(n, 0.25), "length/mean": 80 + rng.standard_normal(n),
        "truncated_frac": np.full(n, 0.05), "kl": np.linspace(0.0, 0.05, n), "rm/clip_frac": np.full(n, 0.1)})
    for name, values in columns.items():
        df[name] = [values(int(s)) for s in steps] if callable(values) else values
    return df


def rules(df, settings=S):
    return {f.rule: f for f in health.evaluate(df, settings)}


def test_healthy_stream_raises_nothing():
    assert rules(stream()) == {}
    assert health.evaluate(pd.DataFrame(), S) == [] and health.badge([]) == ""


def test_no_signal_fires_after_a_window_and_names_its_start():
    df = stream(frac_reward_zero_std=lambda s: 1.0 if s >= 20 else 0.3)
    found = rules(df)
    assert set(found) == {"no_signal"} and found["no_signal"].since_step == 20
    assert "100%" in found["no_signal"].message and found["no_signal"].advice


def test_no_signal_needs_the_whole_window():
    assert "no_signal" not in rules(stream(frac_reward_zero_std=lambda s: 1.0 if s >= 27 else 0.3))  # 4 steps
    # a streak that ended is not reported
    assert "no_signal" not in rules(stream(frac_reward_zero_std=lambda s: 1.0 if 5 <= s <= 20 else 0.3))
    # a run shorter than the window: nothing yet
    assert rules(stream(n=4, frac_reward_zero_std=1.0)) == {}


def test_length_collapse_against_the_early_mean():
    df = stream(**{"length/mean": lambda s: 100.0 if s < 15 else 10.0})
    found = rules(df)
    assert set(found) == {"length_collapse"} and found["length_collapse"].since_step == 15
    # a gradual, moderate shortening is not a collapse
    assert "length_collapse" not in rules(stream(**{"length/mean": lambda s: 100.0 - s}))


def test_mostly_truncated():
    found = rules(stream(truncated_frac=lambda s: 0.9 if s > 10 else 0.1))
    assert set(found) == {"truncated"} and found["truncated"].since_step == 11
    assert "truncated" not in rules(stream(truncated_frac=0.79))


def test_kl_past_bound_and_kl_ref_for_ppo():
    found = rules(stream(kl=lambda s: 0.2 * s))  # above 1.0 from step 6 on
    assert set(found) == {"kl"} and found["kl"].since_step == 6
    ppo = stream().drop(columns=["kl"]).assign(kl_ref=lambda d: 5.0)
    assert rules(ppo)["kl"].since_step == 1
    # one spike is not a trend
    assert "kl" not in rules(stream(kl=lambda s: 3.0 if s == 30 else 0.1))


def test_reward_model_pinned():
    found = rules(stream(**{"rm/clip_frac": lambda s: 1.0 if s >= 24 else 0.0}))
    assert set(found) == {"rm_pinned"} and found["rm_pinned"].since_step == 24
    # rule rewards only: no reward-model metric, no finding
    assert "rm_pinned" not in rules(stream().drop(columns=["rm/clip_frac"]))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_loss_fires_at_once(bad):
    df = stream(loss=lambda s: bad if s >= 29 else 0.1)
    found = rules(df)
    assert set(found) == {"nonfinite_loss"} and found["nonfinite_loss"].since_step == 29
    ppo = stream().assign(critic_loss=lambda d: [0.5] * 29 + [bad])
    assert rules(ppo)["nonfinite_loss"].since_step == 30


def test_supervised_stream_without_rl_metrics():
    df = pd.DataFrame({"global_step": range(1, 50), "loss": np.linspace(5, 2, 49), "lr": 1e-4})
    assert rules(df) == {}


def test_thresholds_are_settings(tmp_path):
    df = stream(frac_reward_zero_std=0.6)
    assert rules(df) == {}
    strict = health.HealthSettings(window=5, zero_std_max=0.5)
    assert "no_signal" in rules(df, strict)
    health.save_settings(tmp_path, strict)
    assert health.load_settings(tmp_path) == strict
    with pytest.raises(ValueError, match="zero_std_max"):
        health.save_settings(tmp_path, health.HealthSettings(zero_std_max=1.5))
    assert health.load_settings(tmp_path) == strict  # nothing saved
    (tmp_path / health.SETTINGS_FILE).write_text("{broken")
    assert health.load_settings(tmp_path) == health.HealthSettings()
    assert health.load_settings(tmp_path / "missing") == health.HealthSettings()


def test_a_bad_threshold_is_refused_in_the_readers_language(tmp_path):
    """The error keeps its messages and is worded when read: English for a log, Chinese for a
    Chinese viewer, naming each bad field by its label."""
    bad = health.HealthSettings(window=0, truncated_max=0.0, kl_max=float("inf"))
    with pytest.raises(ValueError) as raised:
        health.save_settings(tmp_path, bad)
    assert not (tmp_path / health.SETTINGS_FILE).exists()
    assert [m.key for m in raised.value.messages] == ["health.error.window", "health.error.share",
                                                          "health.error.positive"]
    with i18n.language("en"):
        assert str(raised.value) == ("Window (logged steps) (window) must be a whole number of at least 1; "
                                     "Mostly truncated from (truncated_max) must be in (0, 1]; "
                                     "KL bound (kl_max) must be a number above 0")
    with i18n.language("zh"):
        assert str(raised.value) == ("窗口（记录步数）（window）必须是不小于 1 的整数；"
                                     "大多截断阈值（truncated_max）必须大于 0 且不超过 1；"
                                     "KL 上限（kl_max）必须是大于 0 的数")
    assert not i18n.missing


def test_badge_lists_titles():
    found = health.evaluate(stream(frac_reward_zero_std=1.0, truncated_frac=1.0), S)
    assert health.badge(found) == "No learning signal · Mostly truncated"


def test_run_watch_follows_a_growing_stream(tmp_path):
    from mmcore.runs.trend_watch import TREND_POINTS, RunWatch
    from trainer.rules import records
    watch = RunWatch()
    assert watch.summary(tmp_path / "none", "grpo").trend == []
    rec = records.RunRecords(tmp_path / "run", "grpo")
    for step in range(1, 4):
        rec.log(step, 0, step, {"loss": 1.0, "reward": 0.1 * step, "frac_reward_zero_std": 1.0}, step, step)
    first = watch.summary(tmp_path / "run", "grpo", S)
    assert first.trend_name == "reward" and first.trend == [0.1, 0.2, 0.3] and first.findings == []
    assert watch.summary(tmp_path / "run", "grpo", S) is first  # nothing new: nothing recomputed
    for step in range(4, 101):
        rec.log(step, 0, step, {"loss": 1.0, "reward": 0.0, "frac_reward_zero_std": 1.0}, step, step)
    later = watch.summary(tmp_path / "run", "grpo", S)
    assert len(later.trend) == TREND_POINTS and later.records == 100
    assert [f.rule for f in later.findings] == ["no_signal"] and later.findings[0].since_step == 1
    assert watch.summary(tmp_path / "run", "sft", health.HealthSettings(window=200)).trend_name == "loss"
    rec.close()
