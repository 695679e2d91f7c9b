"""Named saved views of the Logs page (mmcore.logs.savedviews, real SQLite in the job store's file) and the
page's section (AppTest): save the view under a name, reopen it by its link in a new session."""
import time

import pytest
from _pages_helpers import open_page, texts

from mmcore.base import i18n
from mmcore.jobs.jobstore import JobStore
from mmcore.logs import savedviews


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def views():
    return savedviews.ViewStore(JobStore().path)


def test_save_list_replace_and_share(views):
    a = views.save("alice", "reward runs", {"job": "3,4", "smooth": "0.6", "other": "x"})
    b = views.save("alice", "private", {"job": "5"})
    c = views.save("bob", "bob's shared", {"job": "7", "x": "tokens"}, shared=True)
    views.save("bob", "bob's own", {"job": "8"})
    assert views.get(a).params == {"job": "3,4", "smooth": "0.6"}  # only the view's own parameters
    assert [v.name for v in views.visible_to("alice")] == ["private", "reward runs", "bob's shared"]
    assert [v.name for v in views.visible_to("carol")] == ["bob's shared"]
    # The same name again replaces the view in place: links to it follow.
    assert views.save("alice", "reward runs", {"job": "9"}, shared=True) == a
    assert views.get(a).params == {"job": "9"} and views.get(a).shared
    assert views.get(b, viewer="bob") is None and views.get(c, viewer="alice").owner == "bob"
    assert savedviews.label(views.get(a), "alice") == "reward runs (shared)"
    assert savedviews.label(views.get(c), "alice") == "bob's shared — bob"


def test_bad_names_and_other_peoples_views_are_refused(views):
    for name in ("", "   ", "two\nlines", "x" * (savedviews.NAME_MAX + 1)):
        with pytest.raises(savedviews.ViewRefused):
            views.save("alice", name, {"job": "1"})
    view_id = views.save("alice", "mine", {"job": "1"}, shared=True)
    with pytest.raises(savedviews.ViewRefused, match="only its owner or an admin"):
        views.delete(view_id, "bob")
    assert views.get(view_id) is not None
    views.delete(view_id, "root", admin=True)
    assert views.get(view_id) is None
    with pytest.raises(savedviews.ViewRefused):
        views.delete(view_id, "alice")
    with i18n.language("zh"):
        with pytest.raises(savedviews.ViewRefused, match="名称"):
            views.save("alice", "", {})


def test_a_view_link_replaces_the_urls_view_and_keeps_the_rest(views):
    view_id = views.save("alice", "v", {"job": "2", "smooth": "0.3"}, shared=True)
    query = {"view": str(view_id), "job": "9", "m": "loss", "pipeline": "4"}
    assert savedviews.open_requested({}, query, views, "bob") is None
    assert query == {"pipeline": "4", "job": "2", "smooth": "0.3"}
    state = {savedviews.OPEN_KEY: view_id}
    query = {"job": "1"}
    assert savedviews.open_requested(state, query, views, "alice") is None and query == {"job": "2", "smooth": "0.3"}
    assert savedviews.OPEN_KEY not in state
    private = views.save("alice", "p", {"job": "3"})
    for wanted in (str(private), "nope", "999"):
        query = {"view": wanted, "job": "1"}
        assert "not shared with you" in savedviews.open_requested({}, query, views, "bob")
        assert query == {"job": "1"}  # nothing changed but the unusable view parameter


def finished_job(name):
    store = JobStore()
    job_id = store.create("sft", name, {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status="succeeded", started_at=time.time() - 60, ended_at=time.time(), exit_code=0)
    with open(store.get(job_id).log_path, "w") as f:
        f.write("".join(f"Epoch:[1/1]({s}/40) loss:{3 - s / 40:.4f} lr:0.0005 epoch_Time:0.0min:\n" for s in range(1, 41)))
    return job_id


def test_save_this_view_on_logs_then_open_it_by_its_link_in_a_new_session():
    first, second = finished_job("run-a"), finished_job("run-b")
    at = open_page("pages/logs.py", query={"job": f"{first},{second}", "smooth": "0.3"})
    assert not at.exception
    assert at.session_state["logs.jobs"] == [first, second]
    at.text_input(key="views.name").set_value("both runs")
    at.checkbox(key="views.share").check()
    at.button(key="views.save").click().run()
    assert not at.exception
    saved = [s for s in texts(at.success) if "both runs" in s]
    assert saved, texts(at.success) + texts(at.error)
    view_id = savedviews.ViewStore(JobStore().path).visible_to("nobody-else")[0].id
    assert any(f"?view={view_id}" in c.value for c in at.code)

    # A new session (a teammate's browser) opens the link: the same runs and smoothing.
    other = open_page("pages/logs.py", query={"view": str(view_id)})
    assert not other.exception
    assert other.session_state["logs.jobs"] == [first, second]
    assert other.session_state["logs.smoothing"] == 0.3
    assert "view" not in other.query_params

    # Opening a view from the list in a session that shows something else.
    other.multiselect(key="logs.jobs").set_value([first]).run()
    other.button(key="views.open_button").click().run()
    assert other.session_state["logs.jobs"] == [first, second]
