"""Notification latency: from a job's recorded end to its webhook message reaching a local HTTP receiver.

    python bench/bench_notify.py [--rounds 5]

Each round: a job (a stand-in trainer that exits at once) run by a real supervisor; its owner chose "succeeded";
notify.toml names a webhook on 127.0.0.1. Measured: the job's `ended_at` to the receiver's arrival time (the
supervisor queues the message in the outbox and starts the sender process). Target: <= 10 s.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    arrivals = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            arrivals[body["job"]] = time.time()
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="bench-notify-") as tmp:
        home = Path(tmp)
        os.environ["MINIMIND_DASHBOARD_HOME"] = str(home)
        from mmcore.jobs import notify, runner
        from mmcore.jobs.jobstore import JobStore
        from mmcore.access import roles

        (home / notify.FILE_NAME).write_text(f'[[webhook]]\nurl = "http://127.0.0.1:{server.server_port}/"\n')
        store = JobStore()
        notify.save_prefs(store.path, roles.os_user(), ["succeeded"])
        latencies = []
        for _ in range(args.rounds):
            job_id = store.create("pretrain", "bench", {}, [sys.executable, "-c", "pass"], tmp, {})
            runner.launch(store, job_id)
            deadline = time.time() + 120
            while job_id not in arrivals and time.time() < deadline:
                time.sleep(0.05)
            ended = store.get(job_id).ended_at
            latencies.append(arrivals[job_id] - ended)
            print(f"job {job_id}: message {latencies[-1]:.2f} s after the job's end")
        while notify.pending(store.path)[0]:
            time.sleep(0.1)
    print(f"median {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s (target <= 10 s)")
    server.shutdown()


if __name__ == "__main__":
    main()
