"""Queue benchmarks: how soon a waiting job starts once resources free up, and what one scheduling
decision costs with 1,000 jobs in the queue.

    python bench/bench_queue.py [--rounds 5] [--queued 1000]

1. Start latency: one CPU slot, a short job holding it and a second job waiting. Measured from the
   first job's recorded end (its supervisor then wakes the scheduler) to the second job's
   supervisor registering it as running, and to its process starting. Target: < 2 s.
2. Decision cost: 1,000 waiting jobs behind one running job (so none can start), on 4 simulated
   GPUs with some jobs asking for GPUs; the time of one round of the scheduler (`Queue.tick`:
   reconcile, pipeline holds, decision, reasons written) and of the decision alone
   (`queueplan.plan`). Target: < 50 ms per decision.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from mmcore.base import gpu
from mmcore.base.process_identity import process_start_time
from mmcore.jobs import scheduler_lock
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import jobqueue, queueconf, queueplan, scheduler
from mmcore.train import preset_table


def start_latency(rounds):
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp:
        store = JobStore(Path(tmp) / "jobs.db")
        queueconf.save(store.home, queueconf.QueueSettings(cpu_slots=1))
        for r in range(rounds):
            ids = []
            for i, seconds in enumerate((1.0, 0.2)):
                values = {**preset_table.demo_preset("pretrain"), "save_weight": f"bench{r}_{i}"}
                job_id = jobqueue.submit(store, "pretrain", values, gpu_count=0, check=False)
                # The job notes when its own code starts (psutil's process start times are derived from
                # the boot time in whole seconds, too coarse to compare with the store's times).
                started_file = Path(tmp) / f"started-{r}-{i}"
                store.update(job_id, argv=[sys.executable, "-c", f"import time; open({str(started_file)!r}, 'w')"
                                           f".write(repr(time.time())); time.sleep({seconds})"])
                ids.append(job_id)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                jobs = [store.get(i) for i in ids]
                if all(j.finished for j in jobs):
                    break
                time.sleep(0.05)
            first, second = jobs
            code_started = float((Path(tmp) / f"started-{r}-1").read_text())
            results.append((second.started_at - first.ended_at, code_started - first.ended_at))
        queuelock_pid = scheduler_lock.running_pid(store)
        if queuelock_pid:
            os.kill(queuelock_pid, 15)
    return results


class SimNVML:
    NVMLError = RuntimeError

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 4

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return "simulated"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=0, total=80 << 30, free=80 << 30)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=999999, usedGpuMemory=8 << 30)] if h == 3 else []

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return []


def decision_cost(queued, rounds):
    with tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp:
        store = JobStore(Path(tmp) / "jobs.db")
        base = preset_table.demo_preset("pretrain")
        running = store.create("pretrain", "holder", {**base, "save_weight": "holder"}, ["python3", "x.py"],
                               str(Path(tmp)), {}, resources={}, waiting=0)
        gpu_holder = store.create("pretrain", "gpu holder", {**base, "save_weight": "gholder"}, ["python3", "x.py"],
                                  str(Path(tmp)), {}, resources={"gpus": 3}, waiting=0)
        for job_id in (running, gpu_holder):
            store.update(job_id, status="running", supervisor_pid=os.getpid(),
                         supervisor_start=process_start_time(os.getpid()))
        store.update(gpu_holder, assigned_gpus=[0, 1, 2])
        with store._write() as conn:  # 1,000 rows in one transaction: setting up, not measured
            for i in range(queued):
                resources = {"gpus": 1 + i % 2} if i % 3 == 0 else {}
                conn.execute(
                    "INSERT INTO jobs (train_type, name, status, params, argv, cwd, env, created_at, user, resources,"
                    " waiting, queue_pos) VALUES ('pretrain', ?, 'queued', ?, '[\"python3\"]', ?, '{}', ?, 'bench',"
                    " ?, 1, ?)", (f"q{i}", __import__("json").dumps({**base, "save_weight": f"q{i}"}), tmp,
                                   time.time(), __import__("json").dumps(resources), float(10 + i)))
        nvml = SimNVML()
        queue = scheduler.Queue(store, list_gpus=lambda: gpu.list_gpus(nvml))
        settings = queueconf.QueueSettings(cpu_slots=1)
        queue.tick()  # first round: output paths cached, every reason written once
        ticks, plans = [], []
        waiting = scheduler.waiting_jobs(store)
        with store._connect() as conn:
            active = [store._job(r) for r in conn.execute("SELECT * FROM jobs WHERE status = 'running'")]
        gpus = gpu.list_gpus(nvml)
        for _ in range(rounds):
            t = time.perf_counter()
            decisions = queue.tick()
            ticks.append(time.perf_counter() - t)
            t = time.perf_counter()
            queueplan.plan(waiting, active, gpus, settings.effective_cpu_slots(), 1024, frozenset(), queue.outputs)
            plans.append(time.perf_counter() - t)
        assert not any(d.start for d in decisions) and len(decisions) == queued
        return ticks, plans


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queued", type=int, default=1000)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (figures are noisy on a busy machine)")

    latency = start_latency(args.rounds)
    registered = [a for a, _ in latency]
    spawned = [b for _, b in latency]
    print(f"start latency, resources freed -> next job running (supervisor registered), {args.rounds} rounds: "
          f"median {statistics.median(registered):.2f} s, max {max(registered):.2f} s (target < 2 s)")
    print(f"start latency, resources freed -> next job's own code running: "
          f"median {statistics.median(spawned):.2f} s, max {max(spawned):.2f} s")

    ticks, plans = decision_cost(args.queued, 20)
    print(f"scheduler round with {args.queued} queued jobs (reconcile + decide + reasons): "
          f"median {statistics.median(ticks) * 1000:.1f} ms, max {max(ticks) * 1000:.1f} ms (target < 50 ms)")
    print(f"decision alone (queueplan.plan) with {args.queued} queued jobs: "
          f"median {statistics.median(plans) * 1000:.1f} ms, max {max(plans) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
