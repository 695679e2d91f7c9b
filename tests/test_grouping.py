"""Runs grouped by a parameter (mmcore.experiments.grouping) and the Logs page's "Group runs by a parameter"."""
import json

import pytest
from _pages_helpers import open_page
from test_runs import ended, steps

from mmcore.access import roles
from mmcore.experiments import grouping
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import metric_stream

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    return JobStore()


def four_runs(store):
    """Two learning rates, two seeds each; each run saves under its own name."""
    ids = []
    for lr, seed, losses in (("1e-3", "1", (4.0, 2.0)), ("1e-3", "2", (4.4, 3.0)), ("5e-4", "1", (5.0, 4.0)),
                             ("5e-4", "2", (5.2, 4.4))):
        ids.append(ended(store, f"lr{lr}-s{seed}", steps(*losses), learning_rate=lr, seed=seed,
                         save_weight=f"w{lr}{seed}"))
    return ids


def test_runs_that_differ_only_in_seed_are_one_group_with_mean_and_min_max(store):
    a, b, c, d = four_runs(store)
    found = grouping.groups([store.get(i) for i in (a, b, c, d)], "seed")
    assert [[j.id for j in members] for _, members in found] == [[a, b], [c, d]]
    assert found[0][0] == "lr1e-3-s1 ×2 (seed: 1, 2)"
    frames = [metric_stream.read(metric_stream.job_dir(store.home, i)) for i in (a, b)]
    table = grouping.band(frames, "loss")
    assert table["mean"].tolist() == pytest.approx([4.2, 2.5])
    assert table["low"].tolist() == [4.0, 2.0] and table["high"].tolist() == [4.4, 3.0] and table["n"].tolist() == [2, 2]
    by_lr = grouping.groups([store.get(i) for i in (a, b, c, d)], "learning_rate")
    assert [[j.id for j in m] for _, m in by_lr] == [[a, c], [b, d]]
    assert grouping.band(frames, "reward").empty


def test_the_logs_page_draws_one_line_with_a_band_per_group(store):
    ids = four_runs(store)
    at = open_page("pages/logs.py", query={"job": ",".join(map(str, ids))}, state={"logs.group_open": True})
    assert not at.exception, at.exception
    assert at.selectbox(key="group.by").value == "seed"
    banded = [json.loads(c.proto.spec) for c in at.get("plotly_chart")
              if any(tr.get("fill") == "tonexty" for tr in json.loads(c.proto.spec)["data"])]
    [spec] = banded  # loss only: no run recorded a reward
    assert spec["layout"]["title"]["text"] == "loss"
    traces = spec["data"]
    means = [tr for tr in traces if tr.get("showlegend") is not False]
    assert len(means) == 2 and len([tr for tr in traces if tr.get("fill") == "tonexty"]) == 2
