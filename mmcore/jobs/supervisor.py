"""The supervisor of one job (`Supervisor`, run by `python -m mmcore.jobs.runner JOB_ID`): the trainer's parent.

It registers itself (pid and start time, status `running`), writes the log header, starts the trainer in its
own process group with stdout and stderr appended to the log file (a file never stalls the trainer the way an
undrained pipe would), records the trainer's pid and start time, waits, and records the exit code, end time
and final status. A stop is a flag in the row (set by `runner.stop()`) or SIGTERM/SIGINT/SIGHUP to the
supervisor: it sends SIGTERM to the trainer's group and SIGKILL once the grace period has passed. The
dashboard's side (launch, stop, delete) and the command line are `mmcore.jobs.runner`.
"""
import datetime
import errno
import functools
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
from pathlib import Path

from mmcore.access import dashboard_roots
from mmcore.base import paths, proctree
from mmcore.base.process_identity import process_start_time
from mmcore.jobs import diskspace, jobnote
from mmcore.runs import codeversion, guards, runresults
from mmcore.runs.metric_stream import job_run_dir, option_value, with_run_dir
from mmcore.train import file_owners
from trainer.rules.specs import SPECS

# Between SIGTERM and SIGKILL: long enough for every process to write its resume state on a busy machine.
DEFAULT_GRACE_S = float(os.environ.get("MINIMIND_STOP_GRACE_S", 60))
POLL_S = 0.5  # how often the supervisor checks its trainer and the stop flag
HEARTBEAT_S = 1.0  # how often it makes sure the queue's scheduler runs (a killed one comes back by itself)
LEFTOVER_GRACE_S = 5.0  # for processes a finished trainer left behind in its group
FINAL_WRITE_ATTEMPTS = 5  # tries (1, 2, 4, 8 s apart) to record a job's ending in a busy database
FULL_DISK_WRITE_ATTEMPTS = 25  # on a full disk: about ten minutes for someone to make room
# How often the health checks look at a running job's new records, when its owner wants their "health" event.
HEALTH_CHECK_S = float(os.environ.get("MINIMIND_HEALTH_CHECK_S", 30))


def _now_iso(ts=None):
    return datetime.datetime.fromtimestamp(time.time() if ts is None else ts).astimezone().isoformat(timespec="seconds")


def _describe_exit(code):
    if code is not None and code < 0:
        try:
            return f"exit code {code}, signal {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


class Supervisor:
    """Runs one job: the body of `python -m mmcore.jobs.runner`."""

    def __init__(self, store, job_id):
        self.store = store
        self.job_id = job_id
        self.signalled = False  # SIGTERM/SIGINT/SIGHUP received
        self.job = None  # the row as read when the supervisor started
        self.proc = None
        self.log = None
        self._heartbeat_failed = False  # said once in the log
        self.disk_full = False  # a write to the log failed for want of space
        self.guard_watch = None  # follows the run's records for its guards (mmcore.runs.guards); False: none
        self.guard_note = None  # the note of a guard that stopped the job
        self.health_watch = None  # the run's health checks (mmcore.runs.health.HealthWatch), once someone wants them
        self.health_done = False  # its "health" event was queued (once per run), or the run cannot be checked

    def _on_signal(self, signum, frame):
        # Only a flag: the main loop does the work (database writes are not signal-safe).
        self.signalled = True

    def _write_log(self, text):
        """Append to the job's log; a log that cannot be written (a full disk) must not end the
        supervisor, which still has the job's end to record."""
        if self.log is not None:
            try:
                self.log.write(text.encode("utf-8", "replace"))
                self.log.flush()
            except OSError as exc:
                self.disk_full = self.disk_full or exc.errno == errno.ENOSPC

    def _out_of_space(self):
        """Whether the job ran out of disk space: the log could not be written, or the trainer said so."""
        return self.disk_full or (self.job is not None and diskspace.log_says_no_space(self.job.log_path))

    def _stop_requested(self):
        if self.signalled:
            return True
        try:
            job = self.store.get(self.job_id)
        except (sqlite3.Error, RuntimeError) as exc:
            # A database hiccup must not end a training run: look again at the next poll.
            self._write_log(f"# supervisor: cannot read the job store ({exc}); retrying\n")
            return False
        # Only an explicit request stops the job: a row that cannot be found (a replaced or restored
        # database) is no reason to end a training run.
        return job is not None and job.stop_requested is not None

    def _record(self, **fields):
        """Write fields to the job's row, retrying a locked or busy database a few times, and a full disk
        for longer (the job's end is recorded once there is room, not lost: a failed job says why)."""
        attempt = 0
        while True:
            try:
                self.store.update(self.job_id, **fields)
                return
            except KeyError:
                return  # the row was deleted meanwhile: nothing to record into
            except sqlite3.OperationalError as exc:
                if attempt == 0:  # once: retries must not bury the log's last line (the trainer's own)
                    self._write_log(f"# supervisor: cannot write to the job store ({exc}); retrying\n")
                full = diskspace.no_space(exc, self.store.path)
                self.disk_full = self.disk_full or full
                if full and fields.get("status") == "failed":
                    fields["note"] = jobnote.stored("note.no_space")
                attempt += 1
                if attempt >= (FULL_DISK_WRITE_ATTEMPTS if full else FINAL_WRITE_ATTEMPTS):
                    raise
                time.sleep(min(2 ** (attempt - 1), 30))

    def _summary(self):
        """The job's final progress from its now complete log, or None when that cannot be had.

        Stored in the row so the Jobs page never parses a finished job's log again. Any failure
        here is only noted in the log: recording how the job ended matters more.
        """
        if self.job is None or self.log is None:
            return None
        try:
            # Round-tripped here so that a value JSON cannot hold fails now, not the final write.
            # Imported here: it brings in pandas (seconds of start-up on a busy machine), which a
            # supervisor needs only once its job has ended, not before it starts the trainer.
            from mmcore.jobs import progress

            return json.loads(json.dumps(progress.final_progress(self.job).as_dict()))
        except Exception as exc:
            self._write_log(f"# supervisor: cannot summarise the log's progress ({exc!r})\n")
            return None

    def _finish(self, status, exit_code=None, note=None):
        summary = self._summary()
        ended = time.time()
        fields = {"status": status, "exit_code": exit_code, "ended_at": ended}
        if note is not None:
            fields["note"] = note
        if summary is not None:
            fields["final_progress"] = summary
        # The footer first: should the database stay unwritable, the log still tells how it ended.
        self._write_log(f"# finished: {status} ({_describe_exit(exit_code)}) at {_now_iso(ended)}\n")
        try:  # before the status: a run shown as ended has its results in the runs table already
            runresults.keep_summary(self.store, self.job)
        except Exception as exc:
            self._write_log(f"# supervisor: cannot keep the run's results ({exc!r})\n")
        self._record(**fields)
        try:  # what this job held is free now: let the queue start the next job at once
            from mmcore.jobs import scheduler_lock
            scheduler_lock.wake(self.store)
        except Exception as exc:  # the queue's own poll starts it a moment later anyway
            self._write_log(f"# supervisor: cannot wake the queue ({exc!r})\n")
        try:  # the owner's chosen events go out through the outbox's own sender process
            from mmcore.jobs import notify
            notify.job_ended(self.store, self.job_id)
        except Exception as exc:  # a notification is never worth failing the job's record
            self._write_log(f"# supervisor: cannot queue the job's notifications ({exc!r})\n")

    def _keep_queue_running(self):
        """Start the queue's scheduler when jobs wait and none runs (it was killed): the queue never waits
        for a page visitor. Its processes are not the job's (`proctree.descendants` leaves them out)."""
        try:
            from mmcore.jobs import scheduler_lock
            scheduler_lock.ensure_running(self.store)
        except Exception as exc:  # a busy database: the next heartbeat tries again
            if not self._heartbeat_failed:
                self._write_log(f"# supervisor: cannot check the queue's scheduler ({exc!r})\n")
            self._heartbeat_failed = True

    def run(self):
        """Supervise the job to its end; return the process exit status for the supervisor."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        proctree.become_subreaper()  # the job's orphaned processes come back here, not to init
        job = self.store.get(self.job_id)
        if job is None:
            print(f"mmcore.jobs.runner: no job with id {self.job_id} in {self.store.path}", file=sys.stderr)
            return 2
        self.job = job
        registered = self.store.transition(
            self.job_id, "queued", status="running", started_at=time.time(),
            supervisor_pid=os.getpid(), supervisor_start=process_start_time(os.getpid()))
        if not registered:
            print(f"mmcore.jobs.runner: job {self.job_id} is {job.status}, not queued; not starting it", file=sys.stderr)
            return 2
        try:
            paths.private_dir(Path(job.log_path).parent)
            self.log = os.fdopen(paths.open_private(job.log_path), "ab")
        except OSError as exc:
            self._finish("failed", note=jobnote.stored("note.cannot_open_log", path=job.log_path, error=str(exc)))
            return 1
        try:
            return self._run_trainer(job)
        except BaseException as exc:  # record any supervisor failure instead of leaving the job running
            if self.proc is not None and self.proc.poll() is None:
                proctree.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self._write_log(f"# supervisor error:\n{traceback.format_exc()}")
            self._finish("failed", self.proc.returncode if self.proc else None, note=jobnote.stored("note.supervisor_error", error=repr(exc)))
            return 1
        finally:
            self.log.close()

    def _trainer_argv(self, job):
        """The job's argv; a training script's gets `--run_dir` (its records folder) unless it names one."""
        spec = SPECS.get(job.train_type)
        if spec is None or not any(os.path.basename(a) == spec.script for a in job.argv):
            return list(job.argv)
        return with_run_dir(job.argv, job_run_dir(job, self.store.home))

    def _record_code(self, argv, job):
        """The git commit the trainer starts from, in its records folder (what the diff of runs shows)."""
        run_dir = option_value(argv)
        if not run_dir:
            return
        try:
            codeversion.record(Path(job.cwd or ".") / run_dir, job.cwd)
        except OSError as exc:  # a record of the code is no reason not to train
            self._write_log(f"# supervisor: cannot record the code version ({exc})\n")

    def _watch_guards(self, argv, job):
        """The run's guards over its metrics stream; None for a command that keeps no records."""
        run_dir = option_value(argv)
        if not run_dir:
            return None
        try:
            return guards.watch_for(self.store.path, job.id, Path(job.cwd or ".") / run_dir)
        except (sqlite3.Error, OSError, ValueError) as exc:  # a run without guards still trains
            self._write_log(f"# supervisor: cannot read the job's guards ({exc}); it runs unguarded\n")
            return None

    def _guard_fired(self, argv, job):
        """When a guard fires: say so in the log, ask for the job's stop (recorded as a stop request) and keep
        the note it ends with; True then."""
        if self.guard_watch is None:
            self.guard_watch = self._watch_guards(argv, job) or False
        if not self.guard_watch or self.guard_note is not None:
            return False
        reason = self.guard_watch.check()
        if reason is None:
            return False
        self.guard_note = jobnote.stored("note.guard_stopped", reason=reason)
        self._write_log(f"# guard: {reason}; stopping the job (its resume state is saved)\n")
        try:
            self.store.transition(self.job_id, "running", stop_requested=time.time(), note=self.guard_note)
        except sqlite3.Error:
            pass  # it stops all the same: the flag below
        self.signalled = True
        try:
            guards.record_stop(self.store.home, self.job_id, reason)
        except (ValueError, sqlite3.Error) as exc:  # AuditUnavailable is a ValueError: the stop goes on
            self._write_log(f"# supervisor: cannot record the guard's stop in the audit trail ({exc})\n")
        return True

    def _health_fired(self, argv, job):
        """Look at the run's new records with the health checks, when its owner wants to hear of one firing (asked
        again at each look: a choice made while it runs counts); the first time one holds, its "health" event goes
        to the outbox, once per run. Pandas is loaded only for a run that is watched."""
        if self.health_done:
            return
        try:
            from mmcore.jobs import notify
            if self.health_watch is None:
                run_dir = option_value(argv)
                if not run_dir:  # a command that keeps no records
                    self.health_done = True
                    return
                if not notify.wanted(self.store, job, "health"):
                    return
                from mmcore.runs import health
                self.health_watch = health.HealthWatch(Path(job.cwd or ".") / run_dir,
                                                       health.load_settings(self.store.home))
            findings = self.health_watch.check()
            if not findings:
                return
            self.health_done = True
            from mmcore.base.i18n import language
            with language("en"):
                titles = [f.title for f in findings]
            self._write_log(f"# health check: {', '.join(titles)}; the owner's notification is queued\n")
            notify.health_fired(self.store, self.job_id, titles, self.health_watch.last_metrics())
        except Exception as exc:  # a notification is never worth a training run: stop looking, say why once
            self.health_done = True
            self._write_log(f"# supervisor: cannot check the run's health ({exc!r})\n")

    def _run_trainer(self, job):
        argv = self._trainer_argv(job)
        command = shlex.join(argv)
        name = " ".join(job.name.splitlines())  # one header line, whatever the name holds
        header = [f"# job {job.id} · type {job.train_type} · {name}",
                  f"# command: {command}",
                  f"# cwd: {job.cwd}"]
        if job.env:
            header.append(f"# env: {' '.join(f'{k}={shlex.quote(v)}' for k, v in sorted(job.env.items()))}")
        # The dashboard's own header only, in English whatever the viewer's language (a log is read by
        # people and tools of either); the trainer's own lines follow unchanged.
        header.append(f"# started: {_now_iso()}")
        self._write_log("\n".join(header) + "\n")
        self._record_code(argv, job)

        if self._stop_requested():
            self._finish("stopped", note=jobnote.stored("note.stopped_before_trainer"))
            return 0

        # The trainer checks its paths against the same allowed folders as the launch did.
        # It also learns its job id (recorded in its resume state) and, for a Resume, whose state it continues.
        env = {**os.environ, **job.env, **dashboard_roots.current(self.store.home).env(),
               **file_owners.trainer_env(self.store, job), "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": paths.python_path(job.cwd)}
        libc = proctree.load_libc()
        preexec = functools.partial(proctree.die_with_parent, libc, os.getpid()) if libc is not None else None
        try:
            self.proc = subprocess.Popen(
                argv, cwd=job.cwd or None, env=env, stdin=subprocess.DEVNULL,
                stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=preexec)
        except (OSError, subprocess.SubprocessError) as exc:
            self._write_log(f"# error: cannot start the trainer: {exc}\n")
            self._finish("failed", note=jobnote.stored("note.cannot_start_trainer", error=str(exc)))
            return 1
        pgid = self.proc.pid  # start_new_session makes the trainer its group's leader
        self._record(trainer_pid=self.proc.pid, trainer_start=process_start_time(self.proc.pid))

        term_sent_at = None
        grace = DEFAULT_GRACE_S
        killed = launcher = False
        heartbeat = time.monotonic() + HEARTBEAT_S
        guard_check = time.monotonic() + guards.CHECK_S  # the guards are read then, after the launch kept them
        health_check = time.monotonic() + HEALTH_CHECK_S
        while True:
            try:
                code = self.proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            proctree.reap_orphans(self.proc.pid)
            if time.monotonic() >= heartbeat:
                heartbeat = time.monotonic() + HEARTBEAT_S
                self._keep_queue_running()
            if term_sent_at is None and time.monotonic() >= guard_check:
                guard_check = time.monotonic() + guards.CHECK_S
                self._guard_fired(argv, job)
            if term_sent_at is None and time.monotonic() >= health_check:
                health_check = time.monotonic() + HEALTH_CHECK_S
                self._health_fired(argv, job)
            if term_sent_at is None and self._stop_requested():
                try:
                    current = self.store.get(self.job_id)
                    if current is not None and current.stop_grace is not None:
                        grace = current.stop_grace
                    if current is not None and current.stop_requested is None:  # a signal, not stop()
                        self.store.update(self.job_id, stop_requested=time.time(), stop_grace=grace)
                except sqlite3.Error:
                    pass  # stop anyway, with the default grace period
                # Every process of the job, torchrun's workers in their own groups included: each saves
                # its resume state and exits.
                procs = proctree.descendants()
                self._write_log(f"# stop requested: SIGTERM to {len(procs)} process(es) ({proctree.describe(procs)}) "
                                f"at {_now_iso()}\n")
                proctree.signal_all(signal.SIGTERM, procs)
                proctree.killpg(pgid, signal.SIGTERM)
                term_sent_at = time.monotonic()
                # torchrun reports its workers' SIGTERM exit as a failure of its own.
                launcher = "torch.distributed.run" in argv or Path(argv[0]).name == "torchrun"
            elif term_sent_at is not None and not killed and time.monotonic() - term_sent_at >= grace:
                procs = proctree.descendants()
                self._write_log(f"# still running after {grace:g} s: SIGKILL to {proctree.describe(procs)}\n")
                proctree.signal_all(signal.SIGKILL, procs)
                killed = True

        # Processes the trainer left behind (data loaders, workers of a torchrun that died, orphans
        # re-parented here) must not outlive the job: SIGTERM, then SIGKILL when the grace period is
        # over. The end is recorded only once none is left.
        deadline = (term_sent_at + grace) if term_sent_at is not None else time.monotonic() + LEFTOVER_GRACE_S
        left = proctree.descendants()
        if left and term_sent_at is None:
            self._write_log(f"# trainer exited; SIGTERM to what it left running: {proctree.describe(left)}\n")
            proctree.signal_all(signal.SIGTERM, left)
        while left:
            proctree.reap_orphans(None)
            if time.monotonic() >= deadline:
                self._write_log(f"# SIGKILL to what is still running: {proctree.describe(left)}\n")
                proctree.signal_all(signal.SIGKILL, left)
                killed = True
                deadline = float("inf")
            time.sleep(0.1)
            left = proctree.descendants()
        proctree.reap_orphans(None)
        if term_sent_at is not None and not killed and launcher and code is not None and code > 0 and code != 143:
            # torchrun reports its workers' SIGTERM exit as a failure of its own (exit 1); they saved
            # their state and ended within the grace period, which is what a stop means.
            self._write_log(f"# every process ended within the grace period (launcher exit code {code}): "
                            f"recorded as 143, stopped by SIGTERM\n")
            code = 143

        stopped = term_sent_at is not None or self._stop_requested()
        status = "stopped" if stopped else "succeeded" if code == 0 else "failed"
        note = jobnote.stored("note.no_space") if status == "failed" and self._out_of_space() else None
        if self.guard_note is not None and status == "stopped":
            note = self.guard_note
        self._finish(status, code, note=note)
        return 0
