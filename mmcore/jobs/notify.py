"""Notifications: a run's events (failed, succeeded, stopped by a guard, a sweep finished) sent to webhooks and
e-mail, through an outbox that never holds up a job or the queue.

An admin writes `<dashboard home>/notify.toml`::

    dashboard_url = "http://trainbox:8501"        # the messages' links to a run's Logs view
    default_events = ["failed", "guard_stopped"]   # for users who chose nothing
    [[webhook]]
    name = "team"
    url = "https://hooks.slack.com/services/..."
    format = "slack"                               # json (default), slack, feishu or dingtalk
    [smtp]
    host = "smtp.example.com"
    port = 587
    sender = "dashboard@example.com"
    starttls = true                                # username / password when the server wants them

The "health" event is a health check that fired (`mmcore.runs.health`): sent once per run, by its supervisor the
first time a check holds while it runs (`health_fired`), or when it ends with one holding. Each user chooses
which of their runs' events reach them, and an e-mail address (`save_prefs`: the act
`mmcore.actions.experiment_acts.set_notifications`). When a job ends its supervisor calls `job_ended`: one
outbox row (`notify_outbox` in the job store's file) per webhook and e-mail the event goes to, then a sender
process (`python -m mmcore.jobs.notify --db PATH`, one at a time) delivers them: a failed delivery is tried
again with a growing pause (`BACKOFF_S`), and after `MAX_ATTEMPTS` it is kept as failed, with the error, for
admins to see (`failures`, `python -m mmcore notify --failures`).
"""
import argparse
import fcntl
import json
import smtplib
import sqlite3
import subprocess
import sys
import time
import tomllib
import urllib.request
from contextlib import closing
from email.message import EmailMessage
from pathlib import Path

from mmcore.base import regular_file
from mmcore.base.paths import ROOT

FILE_NAME = "notify.toml"
EVENTS = ("failed", "succeeded", "guard_stopped", "health", "sweep_finished")
DEFAULT_EVENTS = ("failed", "guard_stopped")
FORMATS = ("json", "slack", "feishu", "dingtalk")
MAX_ATTEMPTS = 6
BACKOFF_S = (2, 10, 30, 120, 600)  # the pause before each retry
TIMEOUT_S = 10
SCHEMA = """
CREATE TABLE IF NOT EXISTS notify_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created_at REAL NOT NULL, event TEXT NOT NULL, job_id INTEGER,
    target TEXT NOT NULL, body TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_at REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending', error TEXT);
CREATE INDEX IF NOT EXISTS notify_due ON notify_outbox (state, next_at);
CREATE TABLE IF NOT EXISTS notify_prefs (user TEXT PRIMARY KEY, events TEXT NOT NULL, email TEXT NOT NULL DEFAULT '');
"""


class NotifyConfigError(ValueError):
    """notify.toml cannot be read or holds something it should not."""


def _connect(store_path):
    conn = sqlite3.connect(str(store_path), timeout=30)
    conn.executescript(SCHEMA)
    return conn


def load_config(home):
    """The admin's configuration: {"dashboard_url", "default_events", "webhooks": [...], "smtp": {...} or None};
    empty (nothing is sent) without a file. NotifyConfigError for a file that is wrong."""
    path = Path(home) / FILE_NAME
    try:
        data = tomllib.loads(regular_file.read_text(path))
    except FileNotFoundError:
        return {"dashboard_url": "", "default_events": list(DEFAULT_EVENTS), "webhooks": [], "smtp": None}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise NotifyConfigError(f"{path}: {exc}") from None
    hooks = data.get("webhook", [])
    for hook in hooks:
        if not isinstance(hook, dict) or not str(hook.get("url", "")).startswith(("http://", "https://")):
            raise NotifyConfigError(f"{path}: every [[webhook]] needs a url starting with http:// or https://")
        if hook.setdefault("format", "json") not in FORMATS:
            raise NotifyConfigError(f"{path}: webhook format {hook['format']!r}; formats are {', '.join(FORMATS)}")
        hook.setdefault("name", hook["url"])
    defaults = data.get("default_events", list(DEFAULT_EVENTS))
    if not set(defaults) <= set(EVENTS):
        raise NotifyConfigError(f"{path}: default_events may hold {', '.join(EVENTS)}")
    smtp = data.get("smtp")
    if smtp is not None and not (smtp.get("host") and smtp.get("sender")):
        raise NotifyConfigError(f"{path}: [smtp] needs host and sender")
    return {"dashboard_url": str(data.get("dashboard_url", "")).rstrip("/"), "default_events": list(defaults),
            "webhooks": hooks, "smtp": smtp}


def save_prefs(store_path, user, events, email=""):
    """Keep `user`'s choice: which of their runs' events reach them, and where e-mail goes ("" for none).
    ValueError for an unknown event or an address without "@"."""
    events = sorted(set(events))
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise ValueError(f"unknown event {unknown[0]!r}; events are {', '.join(EVENTS)}")
    email = (email or "").strip()
    if email and ("@" not in email or any(c.isspace() for c in email)):
        raise ValueError(f"{email!r} is not an e-mail address")
    with closing(_connect(store_path)) as conn, conn:
        conn.execute("INSERT OR REPLACE INTO notify_prefs (user, events, email) VALUES (?, ?, ?)",
                     (str(user).lower(), json.dumps(events), email))
    return {"events": events, "email": email}


def prefs(store_path, user, config=None):
    """{"events", "email"} of `user` (the configuration's default events when they chose nothing)."""
    with closing(_connect(store_path)) as conn:
        row = conn.execute("SELECT events, email FROM notify_prefs WHERE user = ?", (str(user).lower(),)).fetchone()
    if row is None:
        return {"events": list((config or {}).get("default_events", DEFAULT_EVENTS)), "email": ""}
    return {"events": json.loads(row[0]), "email": row[1]}


def event_of(job):
    """The event a job's end is: "succeeded", "failed", "guard_stopped", or None (stopped by a person, lost)."""
    if job.status == "succeeded":
        return "succeeded"
    if job.status in ("failed", "lost"):
        return "failed"
    if job.status == "stopped" and job.note and "note.guard_stopped" in job.note:
        return "guard_stopped"
    return None


def compose(job, event, config, extra=None, metrics=None):
    """The message of a run's event: {"event", "job", "name", "owner", "status", "metrics", "link", "text"}.
    `metrics`: the last values of a run that has no final ones yet (it still runs)."""
    from mmcore.jobs import jobnote  # (the English wording of the job's note)

    progress = job.final_progress or metrics or {}
    metrics = {k: progress[k] for k in ("step", "total", "loss", "reward") if progress.get(k) is not None}
    link = f"{config['dashboard_url']}/logs?job={job.id}" if config.get("dashboard_url") else f"/logs?job={job.id}"
    note = jobnote.english(job.note) or ""
    shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())
    text = (f"[MiniMind] job {job.id} {job.name} ({job.user}): {event.replace('_', ' ')}, status {job.status}"
            + (f"; {shown}" if shown else "") + (f"; {note}" if note else "") + (f"; {extra}" if extra else "")
            + f" {link}")
    return {"event": event, "job": job.id, "name": job.name, "owner": job.user, "status": job.status,
            "metrics": metrics, "note": note, "link": link, "text": text}


def webhook_body(msg, fmt):
    """The request body for a webhook of format `fmt` (generic JSON, or Slack-, Feishu-, DingTalk-compatible)."""
    if fmt == "slack":
        return {"text": msg["text"]}
    if fmt == "feishu":
        return {"msg_type": "text", "content": {"text": msg["text"]}}
    if fmt == "dingtalk":
        return {"msgtype": "text", "text": {"content": msg["text"]}}
    return msg


def enqueue(store_path, job, event, config, extra=None, metrics=None):
    """Put the event's messages in the outbox (one per webhook, one e-mail when the owner gave an address), when
    the owner chose this event; returns how many."""
    chosen = prefs(store_path, job.user, config)
    if event not in chosen["events"]:
        return 0
    msg = compose(job, event, config, extra, metrics)
    rows = [(f"webhook:{hook['name']}", json.dumps({"url": hook["url"], "json": webhook_body(msg, hook["format"])}))
            for hook in config["webhooks"]]
    if chosen["email"] and config.get("smtp"):
        rows.append((f"email:{chosen['email']}", json.dumps({"to": chosen["email"], "subject": msg["text"][:120],
                                                            "text": msg["text"]})))
    now = time.time()
    with closing(_connect(store_path)) as conn, conn:
        conn.executemany("INSERT INTO notify_outbox (created_at, event, job_id, target, body, next_at)"
                         " VALUES (?, ?, ?, ?, ?, ?)",
                         [(now, event, job.id, target, body, now) for target, body in rows])
    return len(rows)


def _sweep_done(store, job):
    """The id of the sweep whose last job `job` was, or None (sweeps are kept beside the jobs: `sweep_jobs`)."""
    try:
        with closing(sqlite3.connect(store.path, timeout=30)) as conn:
            row = conn.execute("SELECT sweep_id FROM sweep_jobs WHERE job_id = ?", (job.id,)).fetchone()
            if row is None:
                return None
            left = conn.execute("SELECT COUNT(*) FROM sweep_jobs s JOIN jobs j ON j.id = s.job_id"
                                " WHERE s.sweep_id = ? AND j.status IN ('queued', 'running')", (row[0],)).fetchone()[0]
    except sqlite3.OperationalError:  # no sweeps table: no sweep
        return None
    return row[0] if left == 0 else None


def health_findings(store, job):
    """The health checks that held when the run ended (`mmcore.runs.health`, under the home's thresholds), as
    English titles; empty for a run without records."""
    from mmcore.base.i18n import language
    from mmcore.runs import health, metric_stream

    run_dir = metric_stream.job_run_dir(job, store.home)
    if not metric_stream.has_metrics(run_dir):
        return []
    with language("en"):
        return [f.title for f in health.evaluate(metric_stream.read(run_dir), health.load_settings(store.home))]


def wanted(store, job, event):
    """Whether a message of `event` about `job` would go anywhere: its owner chose the event, and a webhook or
    (for an owner with an address) e-mail is configured. What a supervisor asks before it watches for it."""
    try:
        config = load_config(store.home)
    except NotifyConfigError:
        return False
    chosen = prefs(store.path, job.user, config)
    return event in chosen["events"] and bool(config["webhooks"] or (chosen["email"] and config.get("smtp")))


def health_sent(store_path, job_id):
    """Whether the "health" event of job `job_id` is in the outbox already (it goes once per run)."""
    with closing(_connect(store_path)) as conn:
        return conn.execute("SELECT 1 FROM notify_outbox WHERE job_id = ? AND event = 'health' LIMIT 1",
                            (int(job_id),)).fetchone() is not None


def _health_extra(titles):
    return "health: " + ", ".join(titles)


def health_fired(store, job_id, titles, metrics=None):
    """A health check fired while job `job_id` runs (`titles`: the findings' English titles; `metrics`: the run's
    last values): its "health" event goes in the outbox, once per run, and the sender starts. Returns the number
    of messages queued (0 when it was sent before or nobody chose it)."""
    job = store.get(job_id)
    if job is None or health_sent(store.path, job_id):
        return 0
    n = enqueue(store.path, job, "health", load_config(store.home), extra=_health_extra(titles), metrics=metrics)
    if n:
        start_sender(store.path)
    return n


def job_ended(store, job_id):
    """A job's end: put its events in the outbox and start the sender (without waiting). Returns the number of
    messages queued; an unreadable notify.toml queues none (the sender's admins see nothing to send)."""
    job = store.get(job_id)
    if job is None:
        return 0
    config = load_config(store.home)
    n = 0
    event = event_of(job)
    if event is not None:
        n += enqueue(store.path, job, event, config)
    if ("health" in prefs(store.path, job.user, config)["events"] and not health_sent(store.path, job_id)
            and (found := health_findings(store, job))):  # (not again when it was sent while the run ran)
        n += enqueue(store.path, job, "health", config, extra=_health_extra(found))
    sweep = _sweep_done(store, job)
    if sweep is not None:
        n += enqueue(store.path, job, "sweep_finished", config, extra=f"sweep {sweep} finished")
    if n:
        start_sender(store.path)
    return n


def start_sender(store_path):
    """Start the detached sender of the outbox (it exits at once when another one runs)."""
    subprocess.Popen([sys.executable, "-m", "mmcore.jobs.notify", "--db", str(store_path)], cwd=ROOT,
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)


def _deliver(target, body, config):
    """Send one message; raises OSError (or smtplib's) when it did not go through."""
    if target.startswith("webhook:"):
        request = urllib.request.Request(body["url"], data=json.dumps(body["json"]).encode("utf-8"),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            if answer.status >= 300:
                raise OSError(f"HTTP {answer.status}")
        return
    smtp = config.get("smtp")
    if not smtp:
        raise OSError("no [smtp] in notify.toml")
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = smtp["sender"], body["to"], body["subject"]
    mail.set_content(body["text"])
    with smtplib.SMTP(smtp["host"], int(smtp.get("port", 25)), timeout=TIMEOUT_S) as server:
        if smtp.get("starttls"):
            server.starttls()
        if smtp.get("username"):
            server.login(smtp["username"], smtp.get("password", ""))
        server.send_message(mail)


def deliver_due(store_path, home, now=None):
    """Send every pending message that is due; returns (sent, failed for good). A failure is tried again
    after BACKOFF_S[attempt], and kept as failed (with its error) after MAX_ATTEMPTS."""
    now = time.time() if now is None else now
    try:
        config = load_config(home)
    except NotifyConfigError:
        config = {"smtp": None}
    with closing(_connect(store_path)) as conn:
        rows = conn.execute("SELECT id, target, body, attempts FROM notify_outbox WHERE state = 'pending'"
                            " AND next_at <= ? ORDER BY id", (now,)).fetchall()
    sent = failed = 0
    for row_id, target, body, attempts in rows:
        try:
            _deliver(target, json.loads(body), config)
        except (OSError, smtplib.SMTPException, ValueError) as exc:
            attempts += 1
            final = attempts >= MAX_ATTEMPTS
            failed += final
            with closing(_connect(store_path)) as conn, conn:
                conn.execute("UPDATE notify_outbox SET attempts = ?, next_at = ?, state = ?, error = ? WHERE id = ?",
                             (attempts, time.time() + BACKOFF_S[min(attempts - 1, len(BACKOFF_S) - 1)],
                              "failed" if final else "pending", str(exc)[:500], row_id))
            continue
        sent += 1
        with closing(_connect(store_path)) as conn, conn:
            conn.execute("UPDATE notify_outbox SET attempts = ?, state = 'sent', error = NULL WHERE id = ?",
                         (attempts + 1, row_id))
    return sent, failed


def pending(store_path):
    """(count, next due time) of the messages still to send."""
    with closing(_connect(store_path)) as conn:
        return conn.execute("SELECT COUNT(*), MIN(next_at) FROM notify_outbox WHERE state = 'pending'").fetchone()


def failures(store_path, limit=100):
    """Messages that could not be delivered, newest first: {"id", "at", "event", "job", "target", "attempts",
    "error"}: what admins are shown, so a failing endpoint is not lost silently."""
    with closing(_connect(store_path)) as conn:
        rows = conn.execute("SELECT id, created_at, event, job_id, target, attempts, error FROM notify_outbox"
                            " WHERE state = 'failed' OR (state = 'pending' AND attempts > 0)"
                            " ORDER BY id DESC LIMIT ?", (int(limit),)).fetchall()
    return [dict(zip(("id", "at", "event", "job", "target", "attempts", "error"), r)) for r in rows]


def main(argv=None):
    """The sender: deliver the outbox until nothing is pending (one sender per store, by a lock file)."""
    parser = argparse.ArgumentParser(prog="python -m mmcore.jobs.notify", description=main.__doc__)
    parser.add_argument("--db", required=True, help="the job store (jobs.db)")
    args = parser.parse_args(argv)
    home = Path(args.db).resolve().parent
    while True:
        with open(home / "notify.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return 0  # another sender is at work: it looks again once it lets go
            while True:
                deliver_due(args.db, home)
                count, due = pending(args.db)
                if not count:
                    break
                time.sleep(max(0.2, min(60.0, due - time.time())))
        if not pending(args.db)[0]:  # rows added while this one let go, by a sender that found it at work
            return 0


if __name__ == "__main__":
    sys.exit(main())
