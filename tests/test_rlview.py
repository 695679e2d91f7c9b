"""The Logs page's RL views (mmcore.runs.rlview) on real records written by trainer/rules/records.py."""
import pytest

from mmcore.runs import metric_stream, rlview
from trainer.rules import records

PROMPT = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"


def row(prompt, i, reward, advantage, fmt, rule, truncated=False, response=None, reference="42"):
    return {"prompt": prompt, "reference": reference, "response": response or f"<think>\nhm\n</think>\n<answer>\n{i}\n</answer>",
            "reward": reward, "advantage": advantage, "length": 5 + i, "truncated": truncated,
            "parts": {"format": fmt, "rule": rule}, "extras": {"format_ok": 1.0 if fmt >= 1.5 else 0.0,
                                                            "accuracy": rule}}


@pytest.fixture
def run(tmp_path):
    rec = records.RunRecords(tmp_path / "a", "grpo", rollouts=True)
    for step in (1, 2, 3):
        rec.log(step, 0, step, {"loss": 0.1, "reward": 0.5 * step, "reward/format/mean": 0.4,
                                "reward/rule/mean": 0.1 * step, "accuracy": 0.1 * step, "length/mean": 20.0,
                                "frac_reward_zero_std": 0.5, "kl": 0.01, "time/generate_s": 1.0}, step * 2, step * 50)
        rec.add_rollouts(step, 0, [
            [row(PROMPT, 0, 2.5, 1.0, 1.5, 1.0), row(PROMPT, 1, 0.5, -1.0, 0.5, 0.0, truncated=True,
                                                     response="<think>\nnever ends")],
            [row("other", 0, 0.0, 0.0, 0.0, 0.0, reference="b"), row("other", 1, 0.0, 0.0, 0.0, 0.0, reference="b")]])
    rec.close()
    return tmp_path / "a"


def test_panels_pick_the_metrics_present(run):
    df = metric_stream.read(run)
    found = {p.key: cols for p, cols in rlview.panels_for(df)}
    assert found["reward"] == ["reward", "reward/format/mean", "reward/rule/mean"]
    assert found["accuracy"] == ["accuracy"] and found["timing"] == ["time/generate_s"]
    assert "entropy" not in found and "throughput" not in found


@pytest.mark.parametrize("x", list(metric_stream.X_AXES))
def test_panel_figure_x_axes_and_click_back(run, x):
    df = metric_stream.read(run)
    panel = next(p for p in rlview.PANELS if p.key == "reward")
    fig = rlview.panel_figure(panel, [("a", df), ("b", df)], x=x)
    assert len(fig.data) == 6 and fig.data[0].name == "a · reward"
    assert list(fig.data[0].x) == list(df[x]) and list(fig.data[0].customdata) == [1, 2, 3]
    assert rlview.clicked_step({"selection": {"points": [{"x": 4, "customdata": 2}]}}) == 2
    assert rlview.clicked_step({"selection": {"points": []}}) is None and rlview.clicked_step(None) is None


def test_groups_and_filters(run):
    groups = rlview.filtered_groups(run, 2)
    assert [len(g.responses) for g in groups] == [2, 2]
    assert groups[0].prompt == PROMPT and groups[0].reference == "42" and groups[1].rewards_equal
    only_trunc = rlview.filtered_groups(run, 2, truncated="only")
    assert len(only_trunc) == 1 and list(only_trunc[0].responses["sample"]) == [1]
    assert len(rlview.filtered_groups(run, 2, truncated="none")) == 2
    high = rlview.filtered_groups(run, 2, reward_range=(1.0, 3.0))
    assert [len(g.responses) for g in high] == [1]
    fails = rlview.filtered_groups(run, 2, format_failures=True)
    assert sum(len(g.responses) for g in fails) == 3
    assert [g.prompt for g in rlview.filtered_groups(run, 2, text="never ENDS")] == [PROMPT]
    assert len(rlview.filtered_groups(run, 2, text="   ")) == 2  # blank search: no filter


def test_cards_colours_and_text(run):
    g = rlview.filtered_groups(run, 1)[0]
    card = dict(rlview.response_card(g.responses.iloc[0].to_dict(), ["format", "rule"]))
    assert card["reward"] == 2.5 and card["format"] == 1.5 and card["rule"] == 1.0 and card["truncated"] == "no"
    assert card["accuracy"] == 1.0
    assert rlview.advantage_colour(1.0) == "green" and rlview.advantage_colour(-0.7) == "red"
    assert rlview.advantage_colour(0.0) == "gray" and rlview.advantage_colour(float("nan")) == "gray"
    assert rlview.format_value(0.25) == "+0.250" and rlview.format_value(None) == "–"
    assert rlview.short_prompt(PROMPT) == "What is 6*7?" and rlview.short_prompt("x" * 100, 10) == "x" * 9 + "…"
    assert rlview.prompt_choices(rlview.filtered_groups(run, 1))[0] == (g.prompt_id, "What is 6*7?")


def test_prompt_history_and_comparison(run, tmp_path):
    g = rlview.filtered_groups(run, 1)[0]
    hist = rlview.prompt_history(run, g.prompt_id)
    assert list(hist["step"]) == [1, 2, 3] and list(hist["reward_max"]) == [2.5] * 3
    assert list(hist["accuracy"]) == [0.5] * 3 and list(hist["truncated"]) == [0.5] * 3
    other = records.RunRecords(tmp_path / "b", "grpo", rollouts=True)
    other.add_rollouts(7, 0, [[row(PROMPT, 0, 1.5, 0.0, 1.5, 0.0)]])
    other.close()
    step, df = rlview.same_prompt_in(tmp_path / "b", g.prompt, g.reference, step=1)
    assert step == 7 and len(df) == 1
    none_step, none_df = rlview.same_prompt_in(tmp_path / "b", "never asked", "")
    assert none_step is None and len(none_df) == 0


def test_missing_records_say_what_they_lack(run, tmp_path):
    assert rlview.missing_records(run, "grpo") == []
    lacks = rlview.missing_records(tmp_path / "nothing", "grpo")
    assert len(lacks) == 2 and "metrics stream" in lacks[0] and "rollout store" in lacks[1]
    assert len(rlview.missing_records(None, "sft")) == 1
