"""Change detection shared by every viewer: one look at the store's and the logs' markers per
interval for the whole server, and a tab reruns only when something it shows changed."""
import json
import os
import time

import pytest

from mmcore.base.process_identity import process_start_time
from mmcore.jobs import change_watch
from mmcore.jobs.jobstore import JobStore


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def store(tmp_path):
    return JobStore(tmp_path / "home")


def make_job(store, status="running"):
    """A running job whose supervisor is this test process (alive, so the store keeps it running)."""
    job_id = store.create("sft", "j", {}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status=status, started_at=1.0, supervisor_pid=os.getpid(),
                 supervisor_start=process_start_time(os.getpid()))
    return job_id


def test_a_job_added_elsewhere_bumps_the_store_version_once_per_interval(store):
    clock = Clock()
    watch = change_watch.ChangeWatch(store, interval=1.0, reconcile_every=1e9, clock=clock)
    first = watch.poll()
    assert first.store_version == 1 and first.counts.get("running", 0) == 0
    JobStore(store.path).create("sft", "from another browser", {}, ["python", "x.py"], "/tmp", {})
    assert watch.poll() is first  # within the interval nothing is looked at
    clock.now += 1.0
    second = watch.poll()
    assert second.store_version == 2 and second.counts["queued"] == 1
    assert second.changed_at == clock.now
    clock.now += 1.0
    third = watch.poll()
    assert third.store_version == 2 and third.changed_at == second.changed_at  # nothing new


def test_growing_log_of_an_active_job_bumps_the_logs_version(store):
    clock = Clock()
    job_id = make_job(store)
    log = store.get(job_id).log_path
    with open(log, "w") as f:
        f.write("start\n")
    watch = change_watch.ChangeWatch(store, interval=1.0, reconcile_every=1e9, clock=clock)
    before = watch.poll()
    clock.now += 1.0
    assert watch.poll().logs_version == before.logs_version  # unchanged log: same version
    with open(log, "a") as f:
        f.write("Epoch:[1/1](10/100), loss: 1.0\n")
    clock.now += 1.0
    after = watch.poll()
    assert after.logs_version == before.logs_version + 1
    assert after.store_version == before.store_version  # growing logs are not store changes


def test_a_dead_supervisor_is_noticed_by_the_watch(store):
    """The watch reconciles now and then, so a job whose supervisor died turns `lost` for every tab
    without any tab reading the store."""
    clock = Clock()
    job_id = make_job(store)
    store.update(job_id, supervisor_pid=2 ** 22 + 12345, supervisor_start=1.0)  # no such process
    watch = change_watch.ChangeWatch(store, interval=1.0, reconcile_every=5.0, clock=clock)
    snap = watch.poll()
    assert store.get(job_id).status == "lost"
    assert snap.counts.get("lost") == 1 and snap.counts.get("running", 0) == 0


def test_store_replaced_on_disk_is_followed(store, tmp_path):
    clock = Clock()
    watch = change_watch.ChangeWatch(store, interval=1.0, reconcile_every=1e9, clock=clock)
    v = watch.poll().store_version
    os.unlink(store.path)
    fresh = JobStore(store.path)
    fresh.create("sft", "new", {}, ["python", "x.py"], "/tmp", {})
    clock.now += 1.0
    snap = watch.poll()
    assert snap.store_version > v and snap.counts["queued"] == 1 and snap.error is None


def test_paths_marker_looks_at_each_file_once_per_interval(store, tmp_path):
    clock = Clock()
    watch = change_watch.ChangeWatch(store, interval=1.0, clock=clock)
    path = tmp_path / "upstream.log"
    path.write_text("a\n")
    first = watch.paths_marker([str(path)])
    path.write_text("a\nb\n")
    assert watch.paths_marker([str(path)]) == first
    clock.now += 1.0
    assert watch.paths_marker([str(path)]) != first
    assert watch.paths_marker([str(tmp_path / "missing.log")]) == (None,)


def snap(store_version=1, logs_version=1):
    return change_watch.Snapshot(store_version, logs_version, changed_at=0.0, checked_at=0.0)


def test_should_rerun():
    seen = change_watch.Seen(1, 1, drawn_at=100.0, follow_logs=True, progress_s=5.0)
    assert not change_watch.should_rerun(None, snap(2, 2))  # first draw
    assert not change_watch.should_rerun(seen, snap(1, 1), now=200.0)  # nothing changed
    assert change_watch.should_rerun(seen, snap(2, 1), now=100.5)  # a job added or ended: at once
    assert not change_watch.should_rerun(seen, snap(1, 2), now=103.0)  # a log grew: not before progress_s
    assert change_watch.should_rerun(seen, snap(1, 2), now=105.0)
    quiet = change_watch.Seen(1, 1, drawn_at=100.0)  # a page that does not follow logs (Train)
    assert not change_watch.should_rerun(quiet, snap(1, 9), now=1000.0)
    mine = change_watch.Seen(1, 1, drawn_at=100.0, paths=((10, 1, 1),), progress_s=2.0)  # Logs: its own files
    assert not change_watch.should_rerun(mine, snap(1, 9), paths=((10, 1, 1),), now=1000.0)
    assert change_watch.should_rerun(mine, snap(1, 1), paths=((20, 2, 1),), now=102.0)


def test_the_watch_connection_survives_stores_opened_beside_it(store):
    """Opening a JobStore checks the file; that check must not drop the locks of the watch's open
    connection, or a writer in another process that closes last removes the WAL index under it."""
    import subprocess
    import sys
    watch = change_watch.ChangeWatch(store, interval=0, reconcile_every=1e9)
    watch.poll()
    JobStore(store.path)  # checks the database file in this process
    code = ("import sys; from mmcore.jobs.jobstore import JobStore; "
            "JobStore(sys.argv[1]).create('sft', 'other', {}, ['python'], '/tmp', {})")
    subprocess.run([sys.executable, "-c", code, store.path], check=True)
    snap = watch.poll()
    assert snap.error is None and snap.counts["queued"] == 1
    assert [job.name for job in store.list()] == ["other"]


def test_watched_files_get_a_version_that_moves_when_they_change(store, tmp_path):
    clock = Clock()
    watch = change_watch.ChangeWatch(store, interval=1.0, reconcile_every=1e9, clock=clock)
    path = tmp_path / "upload.log"
    path.write_text("a\n")
    watch.paths_marker([str(path)])  # a tab shows it: watched from now on
    assert watch.file_versions([str(path), "/not/watched"]) == {str(path): 1}
    clock.now += 1.0
    quiet = watch.poll()
    assert quiet.file_versions == {str(path): 1}
    path.write_text("a\nb\n")
    clock.now += 1.0
    grown = watch.poll()
    assert grown.file_versions == {str(path): 2} and grown.changed_at == clock.now
    clock.now += change_watch.FILES_TTL_S + 1  # nobody asked about it since: no longer watched
    assert watch.poll().file_versions == {}


def test_the_marker_file_holds_counters_and_times_only(store, tmp_path):
    watch = change_watch.ChangeWatch(store, interval=0, reconcile_every=1e9)
    secret = tmp_path / "secret-name.log"
    secret.write_text("x\n")
    watch.paths_marker([str(secret)])
    folder = tmp_path / "static"
    folder.mkdir()
    marker = change_watch.MarkerFile(watch, folder, interval=0.05)
    body = marker.write()
    text = marker.path.read_text()
    assert json.loads(text) == body
    assert body["store"] == 1 and body["error"] is False
    assert body["files"] == {change_watch.path_key(str(secret)): 1}
    assert "secret-name" not in text and str(tmp_path) not in text
    assert marker.path.name.startswith(f"live-{os.getpid()}-") and len(marker.path.name) > len("live-1-.json") + 12


def test_the_marker_file_follows_the_store_and_is_removed_on_close(store, tmp_path):
    watch = change_watch.ChangeWatch(store, interval=0, reconcile_every=1e9)
    folder = tmp_path / "static"
    folder.mkdir()
    marker = change_watch.MarkerFile(watch, folder, interval=0.05).start()
    try:
        first = json.loads(marker.path.read_text())
        JobStore(store.path).create("sft", "from another browser", {}, ["python", "x.py"], "/tmp", {})
        deadline = time.time() + 5
        while json.loads(marker.path.read_text())["store"] == first["store"] and time.time() < deadline:
            time.sleep(0.05)
        assert json.loads(marker.path.read_text())["store"] == first["store"] + 1
    finally:
        marker.close()
    assert list(folder.iterdir()) == []


def test_what_runs_before_publishing_sees_the_snapshot_first_and_cannot_stop_the_marker(store, tmp_path, caplog):
    """The fed sections' feeds are written before the marker that announces them; one that fails is
    logged and the marker still comes. Closing removes this server's feed files with its marker."""
    watch = change_watch.ChangeWatch(store, interval=0, reconcile_every=1e9)
    folder = tmp_path / "static"
    folder.mkdir()
    marker = change_watch.MarkerFile(watch, folder, interval=60)
    seen = []

    def feed(snap):
        seen.append((snap.store_version, marker.path.exists()))
        change_watch.publish(folder, f"live-{os.getpid()}-feed-abc.json", {"seq": len(seen)})

    def broken(_snap):
        raise RuntimeError("a feed that fails")
    marker.before_publish += [broken, feed]
    body = marker.write()
    assert seen == [(body["store"], False)]  # given the snapshot before the marker is written
    assert json.loads(marker.path.read_text()) == body and "a feed that fails" in caplog.text
    assert json.loads((folder / f"live-{os.getpid()}-feed-abc.json").read_text()) == {"seq": 1}
    marker.close()
    assert list(folder.iterdir()) == []


def test_markers_of_gone_servers_are_removed(store, tmp_path):
    import subprocess
    import sys
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    folder = tmp_path / "static"
    folder.mkdir()
    stale = folder / f"live-{gone}-0123456789abcdef.json"
    stale.write_text("{}")
    alive = folder / f"live-{os.getppid()}-0123456789abcdef.json"
    alive.write_text("{}")
    other = folder / "logo.png"
    other.write_bytes(b"\x89PNG")
    marker = change_watch.MarkerFile(change_watch.ChangeWatch(store, interval=0, reconcile_every=1e9), folder, interval=60).start()
    try:
        assert not stale.exists() and alive.exists() and other.exists() and marker.path.exists()
    finally:
        marker.close()


def test_an_unwritable_folder_is_refused_at_start(store, tmp_path):
    marker = change_watch.MarkerFile(change_watch.ChangeWatch(store, interval=0, reconcile_every=1e9), tmp_path / "missing")
    with pytest.raises(OSError):
        marker.start()


def test_a_pushed_feed_is_due_once_per_window_shared_by_every_session():
    """A fed section's feed (mmcore.live.livefeed) is pushed when what it follows grew, in a later
    window of its follow interval than what its tab was given: windows every session shares, so tabs
    drawn at different times are pushed in the same check. A store change draws the page instead."""
    from mmcore.live.livefeed import _Feed

    def feed(at, follow_logs=True):
        f = _Feed("session", "jobs.live", "live-1-feed-x.json")
        f.follow_logs, f.paths, f.progress_s = follow_logs, (), 10.0
        f.drawn(store=3, logs=7, files={}, at=at)
        return f

    def snap(checked_at, store=3, logs=8):
        return change_watch.Snapshot(store, logs, checked_at, checked_at)
    early, late = feed(at=101.0), feed(at=109.5)
    assert not early.due(snap(109.9), {}) and not late.due(snap(109.9), {})  # the same window
    assert early.due(snap(110.2), {}) and late.due(snap(110.2), {})  # the next one: both at once
    assert not early.due(snap(110.2, logs=7), {})  # nothing grew
    assert not early.due(snap(110.2, store=4), {})  # a new or ended job: the page is drawn again
    files_only = feed(at=101.0, follow_logs=False)
    files_only.drawn(store=3, logs=7, files={"a1": 1}, at=101.0)
    assert not files_only.due(snap(125.0), {"a1": 1})  # other logs grew, not its files
    assert files_only.due(snap(125.0), {"a1": 2})
