"""Notifications (mmcore.jobs.notify): a real supervisor's job end reaching a local HTTP receiver through the
outbox's sender process; the Slack-, Feishu- and DingTalk-compatible bodies; e-mail through a local SMTP server
(aiosmtpd); retries with backoff, and deliveries that failed for good listed for admins."""
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from _runner_helpers import wait_for
from aiosmtpd.controller import Controller

from mmcore import api
from mmcore.access import roles
from mmcore.jobs import notify, runner
from mmcore.jobs.jobstore import JobStore

pytestmark = pytest.mark.timeout(300)
ME = roles.os_user()


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps every JSON body posted to it; answers `status` (a list: one per
    request, the last repeated)."""

    def __init__(self, statuses=(200,)):
        self.bodies, self.statuses = [], list(statuses)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                if status == 200:
                    outer.bodies.append((self.path, body))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    found = Receiver()
    yield found
    found.close()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def config(home, text):
    (home / notify.FILE_NAME).write_text('dashboard_url = "http://trainbox:8501"\n' + text)


def test_a_finished_jobs_event_reaches_a_local_webhook(home, receiver, tmp_path):
    """The issue's check: with a webhook in notify.toml, a finished job's event reaches the receiver."""
    config(home, f'[[webhook]]\nname = "team"\nurl = "{receiver.url}/hook"\n')
    store = JobStore()
    api.set_notifications(["succeeded", "failed"])
    job_id = store.create("pretrain", "notified", {}, [sys.executable, "-c", "print('step 1')"], str(tmp_path), {})
    runner.launch(store, job_id)
    wait_for(lambda: store.get(job_id).finished, timeout=60, what="the job to end")
    [(path, body)] = wait_for(lambda: receiver.bodies, timeout=60, what="the webhook's message")
    assert path == "/hook"
    assert (body["event"], body["job"], body["name"], body["owner"], body["status"]) == (
        "succeeded", job_id, "notified", ME, "succeeded")
    assert body["link"] == f"http://trainbox:8501/logs?job={job_id}" and f"job {job_id} notified" in body["text"]
    wait_for(lambda: not notify.pending(store.path)[0], timeout=30, what="the outbox to empty")


def test_events_the_owner_did_not_choose_are_not_sent(home, receiver, tmp_path):
    config(home, f'[[webhook]]\nurl = "{receiver.url}"\n')
    store = JobStore()
    job_id = store.create("pretrain", "quiet", {}, ["true"], str(tmp_path), {})
    store.update(job_id, status="succeeded")
    assert notify.job_ended(store, job_id) == 0  # by default only failures and guards' stops are sent
    store.update(job_id, status="failed")
    assert notify.job_ended(store, job_id) == 1
    wait_for(lambda: receiver.bodies, timeout=60, what="the message")  # (its sender process ends once it is sent)
    assert receiver.bodies[0][1]["event"] == "failed"
    wait_for(lambda: not notify.pending(store.path)[0], timeout=30, what="the outbox to empty")


def test_slack_feishu_and_dingtalk_bodies(home, receiver, tmp_path):
    config(home, "".join(f'[[webhook]]\nname = "{f}"\nurl = "{receiver.url}/{f}"\nformat = "{f}"\n'
                         for f in ("slack", "feishu", "dingtalk")))
    store = JobStore()
    job_id = store.create("pretrain", "run", {}, ["true"], str(tmp_path), {})
    store.update(job_id, status="failed", final_progress={"step": 7, "loss": 2.5})
    assert notify.enqueue(store.path, store.get(job_id), "failed", notify.load_config(home)) == 3
    assert notify.deliver_due(store.path, home) == (3, 0)
    got = dict(receiver.bodies)
    text = got["/slack"]["text"]
    assert f"job {job_id} run ({ME}): failed" in text and "loss 2.5" in text and "step 7" in text
    assert got["/feishu"] == {"msg_type": "text", "content": {"text": text}}
    assert got["/dingtalk"] == {"msgtype": "text", "text": {"content": text}}


class Inbox:
    def __init__(self):
        self.mails = []

    async def handle_DATA(self, server, session, envelope):
        self.mails.append((envelope.rcpt_tos, envelope.content.decode("utf-8", "replace")))
        return "250 OK"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_e_mail_goes_through_a_local_smtp_server(home, tmp_path):
    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        config(home, f'[smtp]\nhost = "127.0.0.1"\nport = {port}\nsender = "dashboard@example.com"\n')
        store = JobStore()
        api.set_notifications(["guard_stopped"], "owner@example.com")
        job_id = store.create("pretrain", "guarded", {}, ["true"], str(tmp_path), {})
        store.update(job_id, status="stopped", note='{"key": "note.guard_stopped", "params": {"reason": "loss"}}')
        assert notify.job_ended(store, job_id) == 1
        wait_for(lambda: inbox.mails, timeout=60, what="the e-mail")
        [(to, content)] = inbox.mails
        assert to == ["owner@example.com"] and f"job {job_id} guarded" in content and "guard stopped" in content
    finally:
        controller.stop()


def test_a_failing_endpoint_is_retried_with_backoff_then_reported(home, tmp_path):
    flaky = Receiver(statuses=(500, 200))
    dead = f"http://127.0.0.1:{free_port()}/nobody"
    try:
        config(home, f'[[webhook]]\nname = "flaky"\nurl = "{flaky.url}"\n[[webhook]]\nname = "dead"\nurl = "{dead}"\n')
        store = JobStore()
        job_id = store.create("pretrain", "r", {}, ["true"], str(tmp_path), {})
        store.update(job_id, status="failed")
        notify.enqueue(store.path, store.get(job_id), "failed", notify.load_config(home))
        assert notify.deliver_due(store.path, home) == (0, 0)  # both failed once: tried again later
        count, due = notify.pending(store.path)
        assert count == 2 and due > time.time()
        assert notify.deliver_due(store.path, home) == (0, 0)  # not due yet: nothing is tried
        sent = failed = 0
        for _ in range(notify.MAX_ATTEMPTS):
            done = notify.deliver_due(store.path, home, now=time.time() + 3600)
            sent, failed = sent + done[0], failed + done[1]
        assert (sent, failed) == (1, 1) and len(flaky.bodies) == 1
        [failure] = api.notification_failures()
        assert failure["target"] == "webhook:dead" and failure["attempts"] == notify.MAX_ATTEMPTS and failure["error"]
    finally:
        flaky.close()


def test_bad_choices_and_a_bad_config_say_why(home):
    with pytest.raises(api.Refused, match="unknown event 'crashed'"):
        api.set_notifications(["crashed"])
    with pytest.raises(api.Refused, match="not an e-mail address"):
        api.set_notifications(["failed"], "nobody")
    config(home, '[[webhook]]\nurl = "ftp://x"\n')
    with pytest.raises(notify.NotifyConfigError, match="http:// or https://"):
        notify.load_config(home)


def test_a_run_that_ended_with_a_health_check_holding_sends_the_health_event(home, receiver, tmp_path):
    from mmcore.runs.metric_stream import job_dir

    config(home, f'[[webhook]]\nurl = "{receiver.url}/h"\n')
    store = JobStore()
    api.set_notifications(["health"])
    job_id = store.create("pretrain", "sick", {}, ["true"], str(tmp_path), {})
    store.update(job_id, status="succeeded")
    folder = job_dir(home, job_id)
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"global_step": s, "loss": v}) + "\n"
                                                  for s, v in ((1, 3.0), (2, float("nan")))))
    assert notify.job_ended(store, job_id) == 1
    wait_for(lambda: receiver.bodies, timeout=60, what="the health message")
    body = receiver.bodies[0][1]
    assert body["event"] == "health" and "health:" in body["text"]
    wait_for(lambda: not notify.pending(store.path)[0], timeout=30, what="the outbox to empty")


def test_a_health_check_that_fires_while_the_run_runs_is_sent_then_and_only_once(home, receiver, tmp_path,
                                                                                monkeypatch):
    """The supervisor follows a running job's records with the health checks: the first time one fires, the
    "health" event reaches the receiver while the job still runs, and the job's end does not send it again."""
    from _runner_helpers import script

    monkeypatch.setenv("MINIMIND_HEALTH_CHECK_S", "0.5")  # (the supervisor's; 30 s by default)
    config(home, f'[[webhook]]\nurl = "{receiver.url}/h"\n')
    store = JobStore()
    api.set_notifications(["health", "succeeded"])
    run_dir, release = tmp_path / "run", tmp_path / "release"
    trainer = script(tmp_path, "kl_trainer.py", f"""
        import json, os, sys, time
        run_dir = sys.argv[sys.argv.index("--run_dir") + 1]
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
            for step in range(1, 13):  # KL past its bound (1.0) for more than the window (10 logged steps)
                f.write(json.dumps({{"global_step": step, "loss": 2.0, "kl": 5.0}}) + "\\n")
        deadline = time.time() + 120
        while not os.path.exists({str(release)!r}) and time.time() < deadline:
            time.sleep(0.1)
    """)
    job_id = store.create("grpo", "drifting", {}, [*trainer, "--run_dir", str(run_dir)], str(tmp_path), {})
    runner.launch(store, job_id)
    [(path, body)] = wait_for(lambda: receiver.bodies, timeout=120, what="the health message")
    assert store.get(job_id).status == "running"  # told while it runs, not when it ended
    assert (path, body["event"], body["job"], body["status"]) == ("/h", "health", job_id, "running")
    assert "health: KL past bound" in body["text"] and body["metrics"] == {"step": 12, "loss": 2.0}, body
    release.touch()
    wait_for(lambda: store.get(job_id).finished, timeout=60, what="the job to end")
    wait_for(lambda: len(receiver.bodies) >= 2, timeout=60, what="the end's message")
    wait_for(lambda: not notify.pending(store.path)[0], timeout=30, what="the outbox to empty")
    assert [b["event"] for _, b in receiver.bodies] == ["health", "succeeded"]  # the finding is not sent twice
    assert notify.health_sent(store.path, job_id)
