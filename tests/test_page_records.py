"""Logs and Jobs pages with structured records (AppTest): RL charts, health checks, the Rollouts view,
and the Jobs table's trend and health. The records are written by trainer/rules/records.py into real files."""
import time

import pytest
from _pages_helpers import open_page as open_through_app
from _tables import page_tables
from streamlit.testing.v1 import AppTest

from mmcore.base import i18n
from mmcore.base.paths import ROOT
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import health, metric_stream
from trainer.rules import records

TIMEOUT_S = 60
PROMPT = "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def response(i, reward, advantage, truncated=False, text=None, prompt=PROMPT, reference="42"):
    fmt = 1.5 if reward >= 1.5 else 0.5
    return {"prompt": prompt, "reference": reference, "response": text or f"<think>\nx\n</think>\n<answer>\n{i}\n</answer>",
            "reward": reward, "advantage": advantage, "length": 4 + i, "truncated": truncated,
            "parts": {"format": fmt, "rule": reward - fmt}, "extras": {"format_ok": float(fmt == 1.5)}}


def recorded_job(store, steps=12, zero_std=0.25, name="grpo demo"):
    """A finished GRPO job whose records folder holds `steps` steps of metrics and rollouts."""
    job_id = store.create("grpo", name, {"epochs": "1"}, ["python", "../trainer/train_grpo.py"], "/tmp", {})
    now = time.time()
    store.update(job_id, status="succeeded", started_at=now - 60, ended_at=now, exit_code=0)
    open(store.get(job_id).log_path, "w").write("Epoch: 1, Step: 1/12, Actor Loss: 0.1, Reward: 0.5, "
                                                "Avg Response Len: 5.00, LR: 1.00e-07\n")
    rec = records.RunRecords(metric_stream.job_run_dir(store.get(job_id), store.home), "grpo", rollouts=True)
    for step in range(1, steps + 1):
        rec.log(step, 0, step, {"loss": 0.1, "reward": 0.1 * step, "reward/format/mean": 0.5, "reward/rule/mean": 0.1,
                                "accuracy": 0.2, "length/mean": 5.0, "truncated_frac": 0.25,
                                "frac_reward_zero_std": zero_std, "kl": 0.01, "entropy": 2.0,
                                "time/generate_s": 0.5, "time/update_s": 0.2}, 2 * step, 40 * step)
        rec.add_rollouts(step, 0, [
            [response(0, 2.5, 1.0), response(1, 0.5, -1.0, truncated=True, text=f"cut off at step {step}")],
            [response(0, 0.5, 0.0, prompt="another", reference="x"), response(1, 0.5, 0.0, prompt="another",
                                                                             reference="x")]])
    rec.close()
    return job_id


def open_page(page, query=None):
    at = AppTest.from_file(str(ROOT / "pages" / page), default_timeout=TIMEOUT_S)
    if query:
        at.query_params.update(query)
    return at.run()


def codes(at):
    return [c.value for c in at.code]


def test_rl_charts_rollouts_and_following_a_prompt():
    store = JobStore()
    job_id = recorded_job(store)
    at = open_page("logs.py", {"job": str(job_id)})
    assert not at.exception, at.exception
    titles = [s.value for s in at.subheader]
    assert "Run records" in titles and "Rollouts" in titles
    # the Rollouts view sits under the charts: a link at the top of the page goes to its heading
    assert next(s for s in at.subheader if s.value == "Rollouts").proto.anchor == "rollouts"
    assert any("(#rollouts)" in m.value and "Rollouts view" in m.value for m in at.markdown[:3])
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Reward and its parts" in s for s in specs) and any("Groups with all-equal rewards" in s for s in specs)
    assert not at.warning  # healthy
    # the last step opens first: each group's prompt, reference and responses, with their parts
    shown = codes(at)
    assert PROMPT.strip() in shown and "42" in shown and "cut off at step 12" in shown
    assert any("format +1.500" in t.value and "rule +1.000" in t.value for t in at.text)
    assert any("advantage +1.000" in m.value and "green" in m.value for m in at.markdown)
    # another step
    at.select_slider(key="logs.rollouts.step").set_value(3).run()
    groups = codes(at)[:8]  # the step's two groups (the prompt history's expanders follow)
    assert "cut off at step 3" in groups and "cut off at step 12" not in groups
    # filters
    at.selectbox(key="logs.rollouts.truncated").set_value("only").run()
    assert sum("advantage" in m.value for m in at.markdown) == 1
    at.selectbox(key="logs.rollouts.truncated").set_value("all").run()
    at.text_input(key="logs.rollouts.text").set_value("ANOTHER").run()
    assert "another" in codes(at) and PROMPT.strip() not in codes(at)
    at.text_input(key="logs.rollouts.text").set_value("").run()
    at.checkbox(key="logs.rollouts.format").check().run()
    assert sum("advantage" in m.value for m in at.markdown) == 3
    # follow one prompt over the steps
    follow = at.selectbox(key="logs.rollouts.follow")
    follow.set_value(next(o for o in follow.options if o.startswith("What is 6*7?"))).run()
    history = at.dataframe[0].value  # the prompt history (the page has no other table)
    assert list(history["step"]) == list(range(1, 13)) and list(history["reward_max"]) == [2.5] * 12
    assert not at.exception


def test_two_runs_side_by_side_and_x_axes():
    store = JobStore()
    a, b = recorded_job(store, name="a"), recorded_job(store, steps=4, name="b")
    at = open_page("logs.py", {"job": str(a)})
    at.multiselect(key="logs.jobs").set_value([a, b]).run()
    assert not at.exception, at.exception
    at.radio(key="logs.rl.x").set_value("samples").run()
    import json
    spec = json.loads(at.get("plotly_chart")[-1].proto.spec)
    assert spec["layout"]["xaxis"]["title"]["text"] == "Samples seen"
    compare = at.selectbox(key="logs.rollouts.compare")
    assert compare.options and "b" in compare.options[0]
    shown = codes(at)
    assert "cut off at step 12" in shown and "cut off at step 4" in shown  # same prompt, both runs


def test_health_warning_and_jobs_table():
    store = JobStore()
    sick = recorded_job(store, steps=12, zero_std=1.0, name="sick")
    well = recorded_job(store, steps=12, name="well")
    at = open_page("logs.py", {"job": str(sick)})
    warnings = [w.value for w in at.warning]
    assert any("No learning signal" in w and "since step 1" in w and "Try:" in w for w in warnings)
    jobs = open_through_app("pages/jobs.py")
    assert not jobs.exception, jobs.exception
    table = next(t for t in page_tables(jobs) if "health" in t["headers"])
    row = {int(r["id"]): r for r in table["rows"]}
    assert row[sick]["health"] == "No learning signal" and row[well]["health"] == ""
    ys = [y for _, y in row[well]["trend"]]  # a sparkline of the 12 rising values: drawn ever higher
    assert len(ys) == 12 and ys == sorted(ys, reverse=True) and ys[0] > ys[-1]


def test_the_thresholds_fields_are_built_only_while_their_expander_is_open(home):
    job_id = recorded_job(JobStore())
    at = open_through_app("pages/logs.py", query={"job": str(job_id)})
    assert not at.exception, at.exception
    assert [e.label for e in at.expander if e.label == "Health check thresholds"]
    assert not [n for n in at.number_input if n.key and n.key.startswith("logs.health.")]
    at.session_state["logs.thresholds_open"] = True  # what opening it in the browser does (then a rerun)
    at.run()
    fields = [n.key for n in at.number_input if n.key and n.key.startswith("logs.health.")]
    assert "logs.health.zero_std_max" in fields and len(fields) == len(vars(health.load_settings(home)))


def test_a_bad_threshold_is_refused_in_the_viewers_language(home):
    """Logs' threshold form, viewed in Chinese: a bad value gets the Chinese message and saves nothing."""
    job_id = recorded_job(JobStore())
    with i18n.language("zh"):
        at = open_through_app("pages/logs.py", query={"job": str(job_id)}, state={i18n.STATE_KEY: "zh", "logs.thresholds_open": True})
        at.number_input(key="logs.health.zero_std_max").set_value(0.0)
        next(b for b in at.button if b.label == "保存阈值").click().run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert errors == ["未保存：无学习信号阈值（zero\\_std\\_max）必须大于 0 且不超过 1"], errors
    assert not (home / health.SETTINGS_FILE).exists()


def test_old_log_without_records_says_what_it_lacks():
    store = JobStore()
    job_id = store.create("grpo", "old", {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status="succeeded", started_at=time.time() - 5, ended_at=time.time(), exit_code=0)
    open(store.get(job_id).log_path, "w").write(
        "Epoch: 1, Step: 1/2, Actor Loss: 0.1, Reward: 0.5, Avg Response Len: 5.00, LR: 1.00e-07\n")
    at = open_page("logs.py", {"job": str(job_id)})
    assert not at.exception
    note = " ".join(c.value for c in at.caption)
    assert "no metrics stream" in note and "no rollout store" in note
    assert at.get("plotly_chart")  # its log lines are still charted
