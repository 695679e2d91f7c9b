"""How long an epoch of a data file would take, from finished runs of the same type on this machine.

A finished job's metrics stream (`mmcore.runs.metric_stream`) holds the samples it trained on and its
training seconds (`samples`, `elapsed_s`, continued across resumes); its rate (samples per second)
times the file's rows is that run's time per epoch for this file. The model size and devices differ
between runs, so each run is listed with them and the user compares like with like.
"""
import sqlite3

from mmcore.jobs.jobstore import JobStore
from mmcore.runs import metric_stream

LOOK_AT = 50  # newest finished jobs of the type that are read


def epoch_estimates(train_type, rows, store=None, limit=5):
    """[{"job", "name", "hidden_size", "num_hidden_layers", "device", "samples_per_s", "epoch_s"}] of the
    newest finished runs of `train_type` with a metrics stream; [] when there are none (or no job store)."""
    try:
        store = store or JobStore()
        jobs = store.list(status="succeeded", train_type=train_type, limit=LOOK_AT)
    except (sqlite3.Error, RuntimeError, OSError):
        return []
    found = []
    for job in jobs:
        try:
            frame = metric_stream.read(metric_stream.job_run_dir(job, store.home))
        except (OSError, ValueError):
            continue
        if frame.empty or "samples" not in frame or "elapsed_s" not in frame:
            continue
        samples, elapsed = float(frame["samples"].iloc[-1]), float(frame["elapsed_s"].iloc[-1])
        if samples <= 0 or elapsed <= 0:
            continue
        rate = samples / elapsed
        params = job.params or {}
        found.append({"job": job.id, "name": job.name, "hidden_size": params.get("hidden_size"),
                      "num_hidden_layers": params.get("num_hidden_layers"), "device": params.get("device") or "",
                      "samples_per_s": round(rate, 2), "epoch_s": rows / rate})
        if len(found) >= limit:
            break
    return found
