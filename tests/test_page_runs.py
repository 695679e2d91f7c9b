"""The Runs page (AppTest, through the app's entry): the table with its search, filter and sort, the diff showing
only what differs, and tags and notes (the owner's to change; a viewer sees the form disabled)."""
import contextlib
import sqlite3

import pytest
from _pages_helpers import open_page, texts
from test_runs import ended, steps

from mmcore.access import roles
from mmcore.experiments.annotations import Annotations
from mmcore.jobs.jobstore import JobStore

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    return JobStore()


def test_the_table_searches_filters_and_sorts(store):
    a = ended(store, "alpha", steps(2.0), learning_rate="1e-3")
    b = ended(store, "beta", steps(1.0), learning_rate="2e-3")
    c = ended(store, "gamma", steps(3.0), learning_rate="5e-4")
    at = open_page("pages/runs.py")
    assert not at.exception, at.exception
    df = at.dataframe[0].value
    assert list(df["Job"]) == [c, b, a]  # sorted by job, newest first
    assert "learning_rate" in df.columns and "hidden_size" not in df.columns  # the same in every run: hidden
    at.selectbox(key="runs.sort_by").set_value("final_loss").run()
    at.checkbox(key="runs.descending").uncheck().run()
    assert list(at.dataframe[0].value["Job"]) == [b, a, c]
    at.selectbox(key="runs.filter_column").set_value("final_loss").run()
    at.text_input(key="runs.filter_value").set_value(">1.5").run()
    assert list(at.dataframe[0].value["Job"]) == [a, c]
    at.text_input(key="runs.search").set_value("gam").run()
    assert list(at.dataframe[0].value["Job"]) == [c]
    assert "1 of 3 runs" in texts(at.caption)
    at.text_input(key="runs.filter_value").set_value("<x").run()
    assert any("not a number" in e for e in texts(at.error))


def test_the_diff_shows_only_what_differs_and_everything_on_request(store):
    a = ended(store, "alpha", steps(2.0), learning_rate="1e-3")
    b = ended(store, "beta", steps(1.0), learning_rate="2e-3")
    at = open_page("pages/runs.py")
    at.multiselect(key="runs.diff.pick").set_value([a, b]).run()
    assert not at.exception, at.exception
    params = next(d.value for d in at.dataframe if "learning_rate" in list(d.value.index))
    assert list(params.index) == ["learning_rate"]
    assert list(params.loc["learning_rate"]) == ["0.001", "0.002"]
    at.toggle(key="runs.diff.only").set_value(False).run()
    params = next(d.value for d in at.dataframe if "learning_rate" in list(d.value.index))
    assert "hidden_size" in params.index


def test_a_data_file_slow_to_hash_does_not_hold_the_diff(store, tmp_path, monkeypatch):
    """A data file on a slow mount: the page waits HASH_WAIT_S for its hash, says it is still being computed,
    and shows it once the hash (which went on in the background) is known."""
    import hashlib
    import threading
    import types

    from mmcore.experiments import rundiff
    released = threading.Event()

    def slow_digest(f, name):
        released.wait(120)
        return hashlib.file_digest(f, name)

    monkeypatch.setattr(rundiff, "hashlib", types.SimpleNamespace(file_digest=slow_digest))
    monkeypatch.setattr(rundiff, "HASH_WAIT_S", 0.5)
    data = tmp_path / "slow.jsonl"
    data.write_text('{"text": "hello"}\n')
    a = ended(store, "alpha", steps(2.0), learning_rate="1e-3", data_path=str(data))
    b = ended(store, "beta", steps(1.0), learning_rate="2e-3", data_path=str(data))
    at = open_page("pages/runs.py")
    at.multiselect(key="runs.diff.pick").set_value([a, b]).run()
    assert not at.exception, at.exception
    identity = next(d.value for d in at.dataframe if "data_path: SHA-256" in list(d.value.index))
    assert list(identity.loc["data_path: SHA-256"]) == ["still being computed: open the comparison again in a moment"] * 2
    released.set()
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    assert rundiff.file_identity(str(data))["sha256"] == digest  # waits for the hash that went on
    at.run()
    identity = next(d.value for d in at.dataframe if "data_path: SHA-256" in list(d.value.index))
    assert list(identity.loc["data_path: SHA-256"]) == [digest[:16]] * 2


def test_tags_and_notes_are_saved_by_the_owner_and_disabled_for_a_viewer(store):
    job_id = ended(store, "mine", steps(1.0))
    at = open_page("pages/runs.py")
    next(box for box in at.text_input if box.label == "Tags").set_value("baseline, tiny")
    at.text_area[0].set_value("the first one")
    at.button[-1].click().run()
    assert not at.exception, at.exception
    assert Annotations(store.path).get(job_id) == {"tags": ["baseline", "tiny"], "note": "the first one"}
    (store.home / "roles.toml").write_text('default = "viewer"\n')
    at = open_page("pages/runs.py")
    assert at.text_area[0].disabled and at.button[-1].disabled


def test_each_user_chooses_their_events_and_admins_see_failed_deliveries(store):
    from mmcore.jobs import notify

    ended(store, "mine", steps(1.0))
    at = open_page("pages/runs.py")
    at.multiselect(key="notify.events").set_value(["succeeded", "sweep_finished"])
    at.text_input(key="notify.email").set_value("me@example.com")
    next(b for b in at.button if b.label == "Save my notifications").click().run()
    assert not at.exception, at.exception
    assert notify.prefs(store.path, roles.os_user()) == {"events": ["succeeded", "sweep_finished"],
                                                         "email": "me@example.com"}
    with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute("INSERT INTO notify_outbox (created_at, event, job_id, target, body, next_at, attempts, state,"
                     " error) VALUES (0, 'failed', 1, 'webhook:team', '{}', 0, 6, 'failed', 'HTTP 500')")
    at = open_page("pages/runs.py")
    assert any("could not be delivered" in w for w in texts(at.warning))



def test_the_jobs_page_shows_a_runs_tags_and_note(store):
    from mmcore import api

    job_id = ended(store, "tagged", steps(1.0))
    api.annotate(job_id, tags="baseline", note="the reference")
    at = open_page("pages/jobs.py", query={"job": str(job_id)})
    assert not at.exception, at.exception
    assert "Tags: baseline · Note: the reference" in texts(at.caption)
