"""The Slurm backend: jobs run through `sbatch` on a cluster that shares this repository and `out/`.

The dashboard writes a batch script per job (`batch_script`, also shown in the Train page's
command preview) into `<home>/slurm/`, submits it with `sbatch --parsable`, and stores the Slurm
job id as the job's `external_id`. The script writes the same log header as a local job and runs
the trainer with `srun`: one task for a CPU or one-GPU job, otherwise `torchrun` per task with a
`c10d` rendezvous on the job's first node (`--nnodes` = tasks, GPUs per node via `--gres`).

State comes from `squeue --json -t all` (no accounting database needed), or `scontrol show job`
for a job squeue no longer lists. `stop` is `scancel`: Slurm sends SIGTERM to every task, the
trainer saves its resume state and exits 143, and SIGKILL follows after the cluster's KillWait.
A job cancelled from the shell is reconciled the same way: it shows as stopped.

The runs of a sweep go in as one job array (`submit_array`, `mmcore.queue.job_arrays`): each run keeps its
batch script, log and records, the array's script runs run i's script as task i, and the run's id at Slurm
is its task, `ARRAYID_INDEX`, which squeue, scontrol and scancel take like a job id.
"""
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mmcore.access import dashboard_roots
from mmcore.base import paths
from mmcore.jobs import jobnote
from mmcore.queue import job_arrays, queueconf, queuetext
from mmcore.runs import metric_stream
from mmcore.train import file_owners
from trainer.rules.specs import SPECS

TIMEOUT_S = 20
PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
           "SUSPENDED", "STOPPED", "RESIZING"}
RUNNING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"}
FINISHED = {"COMPLETED": "succeeded", "CANCELLED": "stopped", "FAILED": "failed", "TIMEOUT": "failed",
            "NODE_FAIL": "failed", "OUT_OF_MEMORY": "failed", "BOOT_FAIL": "failed", "DEADLINE": "failed",
            "PREEMPTED": "failed", "REVOKED": "failed", "SPECIAL_EXIT": "failed"}
REFRESH_MIN_S = 1.0  # squeue at most this often per process


class SlurmError(RuntimeError):
    """A Slurm command failed; the message holds its output."""


def available():
    """True when the Slurm client commands are installed here."""
    return all(shutil.which(c) for c in ("sbatch", "squeue", "scancel", "sinfo", "scontrol"))


def _run(argv, timeout=TIMEOUT_S):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{argv[0]}: {exc}") from None
    if proc.returncode != 0:
        raise SlurmError(f"{shlex.join(argv)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


# -- the batch script -------------------------------------------------------------------------------

def _script_argv(job):
    """The trainer's argv without its launcher: [script, --options...], device per the allocation."""
    argv = list(job.argv)
    i = next(i for i, a in enumerate(argv) if a.endswith(".py"))
    argv = argv[i:]
    if "--device" in argv:
        j = argv.index("--device")
        del argv[j:j + 2]
    return argv


def _python(job):
    """The Python that runs the trainer: the job's own (the cluster shares this environment)."""
    first = os.path.basename(job.argv[0])
    return job.argv[0] if first.startswith("python") else sys.executable


def _allocation(settings):
    """The sbatch options that say what a job (or each task of an array) gets: nodes, tasks, GPUs, CPUs, where."""
    directives = [f"--nodes={int(settings.slurm_nodes)}", f"--ntasks-per-node={int(settings.slurm_tasks_per_node)}"]
    if int(settings.slurm_gpus_per_node):
        directives.append(f"--gres=gpu:{int(settings.slurm_gpus_per_node)}")
    if settings.slurm_cpus_per_task:
        directives.append(f"--cpus-per-task={settings.slurm_cpus_per_task}")
    for flag, value in (("partition", settings.slurm_partition), ("account", settings.slurm_account),
                        ("time", settings.slurm_time)):
        if value:
            directives.append(f"--{flag}={value}")
    return directives


def batch_script(job, settings, extra_env=None):
    """The sbatch script that runs `job` (text). Its output goes to the job's log file.

    `extra_env`: what the trainer learns besides the job's own environment (its job id, the allowed
    folders), as a local job's supervisor tells it.
    """
    python = _python(job)
    gpus = int(settings.slurm_gpus_per_node)
    nodes, tasks = int(settings.slurm_nodes), int(settings.slurm_tasks_per_node)
    directives = [f"--job-name=minimind-{job.id}-{job.train_type}", f"--output={job.log_path}",
                  "--open-mode=append", f"--chdir={job.cwd}", *_allocation(settings)]
    trainer = _script_argv(job)
    distributed = nodes * tasks > 1 or gpus > 1
    if distributed:
        port = int(settings.slurm_rdzv_port)
        launch = [python, "-m", "torch.distributed.run", "--nnodes", "$SLURM_NTASKS",
                  "--nproc_per_node", str(max(gpus // tasks, 1)), "--rdzv_backend", "c10d",
                  "--rdzv_endpoint", f"$head:$(( {port} + SLURM_JOB_ID % 1000 ))", "--rdzv_id", "$SLURM_JOB_ID"]
        if not gpus:
            trainer += ["--device", "cpu"]
    else:
        launch = [python]
        trainer += ["--device", "cuda:0" if gpus else "cpu"]
    quoted = " ".join(a if a.startswith("$") else shlex.quote(a) for a in launch)
    run = f"srun --kill-on-bad-exit=1 {quoted} {shlex.join(trainer)}"
    name = " ".join(job.name.splitlines())
    env = {**job.env, **(extra_env or {}), "PYTHONUNBUFFERED": "1", "PYTHONPATH": paths.python_path(job.cwd)}
    env.pop("CUDA_VISIBLE_DEVICES", None)  # Slurm sets it from the allocation
    env.pop("PET_STANDALONE", None)  # the rendezvous is c10d on the first node, not standalone
    lines = ["#!/bin/bash", *[f"#SBATCH {d}" for d in directives],
             f"# MiniMind dashboard job {job.id}: on scancel the trainer saves its resume state and exits 143.",
             *[f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())],
             'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
             f"echo {shlex.quote(f'# job {job.id} · type {job.train_type} · {name}')}",
             f"echo {shlex.quote('# command: ' + run)}",
             f"echo {shlex.quote('# cwd: ' + job.cwd)}",
             'echo "# slurm: job $SLURM_JOB_ID${SLURM_ARRAY_JOB_ID:+ (array task ${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID)}'
             ' on $SLURM_JOB_NODELIST (first node $head)"',
             'echo "# started: $(date -Iseconds)"',
             run, ""]
    return "\n".join(lines)


def array_script(runs, settings, output, cwd):
    """The sbatch script of a job array (text): `runs` [(task index, job, its own batch script's path)]; task i
    runs the script of its job with bash (the script's #SBATCH lines are then comments, its output already goes
    to `output`, a pattern whose %a names a link to the job's log)."""
    first = runs[0][1]
    directives = [f"--job-name=minimind-array-{first.id}-{first.train_type}", f"--output={output}",
                  "--open-mode=append", f"--chdir={cwd}", *_allocation(settings),
                  f"--array={job_arrays.index_ranges(task for task, _, _ in runs)}"]
    branches = [f"  {task}) exec bash {shlex.quote(str(path))} ;;  # job {job.id}" for task, job, path in runs]
    return "\n".join(["#!/bin/bash", *[f"#SBATCH {d}" for d in directives],
                      "# MiniMind dashboard job array: each task runs one job's own batch script (its log, records"
                      " and resume state are the job's).",
                      'case "$SLURM_ARRAY_TASK_ID" in', *branches,
                      '  *) echo "# no job for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;', "esac", ""])


# -- the backend ----------------------------------------------------------------------------------------

def _exit_code(raw):
    """A wait status as Slurm reports it (768 = exit 3; 15 = signal 15) -> exit code (-15 for a signal)."""
    raw = int(raw or 0)
    if raw & 0x7F:
        return -(raw & 0x7F)
    return raw >> 8


def _number(value):
    """An integer field of squeue's JSON: a plain number, or {"set": .., "number": ..} in newer Slurm."""
    if isinstance(value, dict):
        return value.get("number") if value.get("set", True) else None
    return value


def record_ids(record):
    """The ids a record of `squeue --json` answers to: its job id, and for a job array's task its task id
    `ARRAYID_INDEX` (a record of pending tasks stands for each of them, "0-3" in its task list)."""
    ids = [str(_number(record.get("job_id")))]
    array = _number(record.get("array_job_id"))
    if array:
        task = _number(record.get("array_task_id"))
        if isinstance(task, int) and 0 <= task < 4294967294:  # (NO_VAL marks none)
            ids.append(f"{array}_{task}")
        ids.extend(f"{array}_{i}" for i in job_arrays.expand_ranges(str(record.get("array_task_string") or "")))
    return ids


def squeue_jobs(ids=None):
    """{slurm id: job dict from `squeue --json -t all`}, limited to `ids` when given; an array's task is found
    under `ARRAYID_INDEX`."""
    out = _run(["squeue", "--json", "-t", "all"])
    jobs = {}
    for j in json.loads(out).get("jobs", []):
        for key in record_ids(j):
            if ids is None or key in ids:
                jobs[key] = j
    return jobs


def scontrol_job(slurm_id):
    """{field: value} of `scontrol show job ID` (JobState, ExitCode, ...), or None when unknown."""
    try:
        out = _run(["scontrol", "show", "job", str(slurm_id)])
    except SlurmError:
        return None
    return dict(re.findall(r"(\w+)=(\S*)", out))


def _end_of(job_state, info):
    """(status, exit code) of a finished Slurm job from its squeue record."""
    status = FINISHED.get(job_state, "failed")
    code = _exit_code(info.get("exit_code"))
    derived = _exit_code(info.get("derived_exit_code"))
    if status == "stopped" and derived:  # the batch shell died by the signal; its step's code says 143
        code = derived
    return status, code


def _footer(job, status, code):
    try:
        with open(job.log_path, "a", encoding="utf-8") as log:
            when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            log.write(f"# finished: {status} (exit code {code}) at {when}\n")
    except OSError:
        pass


def _write_private(path, text):
    """Write a batch script owner-only (it names the job's files and environment)."""
    with os.fdopen(paths.open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as script:
        script.write(text)


class SlurmBackend:
    name = "slurm"
    _last_refresh = 0.0

    def script_path(self, store, job):
        return Path(store.home) / "slurm" / f"job-{job.id}.sbatch"

    def _write_script(self, store, job, settings):
        """Write the job's batch script; its path."""
        path = self.script_path(store, job)
        paths.private_dir(path.parent)
        paths.private_dir(Path(job.log_path).parent)
        # As a local supervisor does: the trainer gets its records folder, its job id (recorded in its
        # resume state; a Resume learns whose state it continues) and the allowed folders.
        spec = SPECS.get(job.train_type)
        if spec is not None and any(os.path.basename(a) == spec.script for a in job.argv):
            job = dataclasses.replace(job, argv=metric_stream.with_run_dir(job.argv, metric_stream.job_run_dir(job, store.home)))
        extra = {**dashboard_roots.current(store.home).env(), **file_owners.trainer_env(store, job)}
        _write_private(path, batch_script(job, settings, extra))
        # The output file is made here, owner-only: Slurm appends to it (--open-mode=append) and keeps its mode.
        os.close(paths.open_private(job.log_path))
        return path

    def submit(self, store, job, gpus=(), settings=None):
        settings = settings or queueconf.load(store.home)
        path = self._write_script(store, job, settings)
        claimed = store.update_waiting(job.id, waiting=0, dispatched_at=time.time(), queue_reason=queuetext.SUBMITTING)
        if not claimed:
            return False
        slurm_id = _run(["sbatch", "--parsable", str(path)]).strip().split(";")[0]
        store.update(job.id, external_id=slurm_id, queue_reason=queuetext.slurm_submitted(slurm_id))
        return True

    def submit_array(self, store, jobs, tasks, settings=None):
        """Submit `jobs` as one job array, job i as task `tasks[i]` (`mmcore.queue.job_arrays`); each job's
        `external_id` becomes its task, `ARRAYID_INDEX`. Returns the ids of the jobs submitted (those still
        waiting when claimed)."""
        settings = settings or queueconf.load(store.home)
        runs = []
        for job, task in zip(jobs, tasks):
            path = self._write_script(store, job, settings)
            if store.update_waiting(job.id, waiting=0, dispatched_at=time.time(), queue_reason=queuetext.SUBMITTING):
                runs.append((int(task), job, path))
        if not runs:
            return []
        folder = self.script_path(store, runs[0][1]).parent
        name = f"array-{runs[0][1].id}"
        # Slurm names a task's output with %a; a link of that name leads to the job's own log.
        for task, job, _ in runs:
            link = folder / f"{name}-{task}.log"
            link.unlink(missing_ok=True)
            link.symlink_to(os.path.abspath(job.log_path))
        script = folder / f"{name}.sbatch"
        _write_private(script, array_script(runs, settings, str(folder / f"{name}-%a.log"), runs[0][1].cwd))
        array_id = _run(["sbatch", "--parsable", str(script)]).strip().split(";")[0]
        for task, job, _ in runs:
            task_id = f"{array_id}_{task}"
            store.update(job.id, external_id=task_id, queue_reason=queuetext.slurm_submitted(task_id))
        return [job.id for _, job, _ in runs]

    def refresh(self, store, force=False):
        """Update every active Slurm job of the store from squeue (at most once a second)."""
        now = time.monotonic()
        if not force and now - SlurmBackend._last_refresh < REFRESH_MIN_S:
            return
        SlurmBackend._last_refresh = now
        with store._connect() as conn:
            rows = conn.execute("SELECT * FROM jobs WHERE backend = 'slurm' AND waiting = 0"
                                " AND status IN ('queued', 'running') AND external_id IS NOT NULL").fetchall()
        jobs = [store._job(r) for r in rows]
        if not jobs:
            return
        known = squeue_jobs({j.external_id for j in jobs})
        for job in jobs:
            info = known.get(job.external_id)
            if info is None:
                info = self._from_scontrol(job.external_id)
            self._apply(store, job, info)

    def _from_scontrol(self, slurm_id):
        fields = scontrol_job(slurm_id)
        if not fields or "JobState" not in fields:
            return None
        code, _, sig = fields.get("ExitCode", "0:0").partition(":")
        raw = (int(code) << 8) | (int(sig or 0) & 0x7F) if code.isdigit() else 0
        return {"job_state": fields["JobState"], "exit_code": raw, "derived_exit_code": 0,
                "state_reason": fields.get("Reason", "")}

    def _apply(self, store, job, info):
        if info is None:
            if store.transition(job.id, ("queued", "running"), status="lost", ended_at=time.time(),
                                note=jobnote.stored("note.slurm_unknown", id=job.external_id)):
                _footer(job, "lost", None)
            return
        state = info.get("job_state", "")
        if state in PENDING:
            reason = info.get("state_reason") or ""
            text = queuetext.slurm_state(job.external_id, state.lower(), reason if reason != "None" else "")
            if text != job.queue_reason:
                store.transition(job.id, "queued", queue_reason=text)
        elif state in RUNNING:
            if job.status == "queued":
                started = info.get("start_time") or time.time()
                store.transition(job.id, "queued", status="running", started_at=float(started), queue_reason=None)
        else:
            status, code = _end_of(state, info)
            if job.stop_requested is not None and status != "succeeded":
                status = "stopped"
            end = info.get("end_time") or time.time()
            guarded = status == "stopped" and job.note and "note.guard_stopped" in job.note  # (slurm_guards)
            note = job.note if guarded else jobnote.stored("note.slurm_ended", id=job.external_id, state=state)
            if store.transition(job.id, ("queued", "running"), status=status, exit_code=code, ended_at=float(end),
                                queue_reason=None, note=note):
                _footer(job, status, code)

    def stop(self, store, job, grace=None):
        """scancel: Slurm sends SIGTERM, then SIGKILL after KillWait (the cluster's grace period)."""
        store.transition(job.id, ("queued", "running"), stop_requested=job.stop_requested or time.time())
        if job.external_id:
            scancel(job.external_id)
        return True

    def log_path(self, job):
        return job.log_path


def scancel(slurm_id):
    """Cancel a Slurm job, one task of an array (`ARRAYID_INDEX`) or a whole array (its id)."""
    _run(["scancel", str(slurm_id)])


def cluster_summary():
    """Partitions with their state and idle nodes/GPUs from `sinfo`: list of dicts; [] without Slurm."""
    if not available():
        return []
    try:
        out = _run(["sinfo", "-h", "-o", "%P|%a|%D|%T|%G|%c|%l"])
    except SlurmError:
        return []
    rows = []
    for line in out.splitlines():
        part = line.split("|")
        if len(part) != 7:
            continue
        rows.append({"partition": part[0], "available": part[1], "nodes": int(part[2]) if part[2].isdigit() else 0,
                     "state": part[3], "gres": "" if part[4] == "(null)" else part[4], "cpus_per_node": part[5],
                     "time_limit": part[6]})
    return rows


def slurm_conf_hint():
    """Where the Slurm client finds its cluster (for messages)."""
    return os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
