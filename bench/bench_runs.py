"""Runs table benchmark: 2,000 finished runs, each with a metrics stream of `--records` logged steps.

    python bench/bench_runs.py [--runs 2000] [--records 100]

Times what the Runs page does to open: every run with its parameters and results (`runtable.runs`: the
jobs, their tags and notes, each run's metrics stream read once) and the table laid out, searched and
sorted (`runtable.frame`, `search`, `sort`): cold (a fresh process: every stream read) and warm (the
next page run: streams unchanged, read from the cache). Then the whole page as a visitor opens it
(AppTest, through the app's entry). Target: <= 2 s.
"""
import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path


def fill(home, runs, records):
    from mmcore.jobs.jobstore import JobStore
    from mmcore.runs.metric_stream import job_dir
    from mmcore.train.preset_table import demo_preset

    store = JobStore(home / "jobs.db")
    rng = random.Random(0)
    for i in range(runs):
        values = {**demo_preset("pretrain"), "learning_rate": rng.choice(["1e-3", "5e-4", "2e-3"]),
                  "batch_size": str(rng.choice([8, 16, 32])), "save_weight": f"bench{i}"}
        job_id = store.create("pretrain", f"bench-{i}", values, ["python3", "x.py"], "/tmp", {}, user="bench")
        store.update(job_id, status="succeeded", started_at=1000.0, ended_at=1000.0 + rng.uniform(10, 100))
        folder = job_dir(home, job_id)
        folder.mkdir(parents=True)
        loss = 9.0
        with open(folder / "metrics.jsonl", "w") as f:
            for step in range(1, records + 1):
                loss *= rng.uniform(0.97, 1.0)
                f.write(json.dumps({"global_step": step, "epoch": 0, "step": step, "samples": 16 * step,
                                    "tokens": 2048 * step, "time": 1000.0 + step, "elapsed_s": float(step),
                                    "loss": loss, "lr": 0.001}) + "\n")
    return store


def open_table(store):
    from mmcore.experiments import runtable
    runs = runtable.runs(store)
    df = runtable.sort(runtable.search(runtable.frame(runs), ""), "final_loss")
    return len(df)


def page_time(at):
    began = time.perf_counter()
    at.switch_page("pages/runs.py").run()
    assert not at.exception, at.exception
    return len(at.dataframe[0].value), time.perf_counter() - began


def first_open(home, copy):
    """The Runs page opened first on a copy of the home whose streams were never summarised: it lists the
    runs at once and a background worker summarises the streams (then the page shows their results)."""
    import shutil

    from streamlit.testing.v1 import AppTest

    from mmcore.base.paths import ROOT
    shutil.copytree(home, copy)
    saved, os.environ["MINIMIND_DASHBOARD_HOME"] = os.environ["MINIMIND_DASHBOARD_HOME"], str(copy)
    try:
        at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=120)
        at.run()
        rows, seconds = page_time(at)
        print(f"Runs page, first open, streams never summarised (AppTest): {rows} rows in {seconds:.2f} s "
              "(target <= 2 s)")
    finally:
        os.environ["MINIMIND_DASHBOARD_HOME"] = saved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--records", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-runs-") as tmp:
        home = Path(tmp)
        os.environ["MINIMIND_DASHBOARD_HOME"] = str(home)
        began = time.perf_counter()
        store = fill(home, args.runs, args.records)
        print(f"{args.runs} runs x {args.records} records written in {time.perf_counter() - began:.1f} s")
        first_open(home, Path(tmp) / "copy")
        for label in ("cold (every stream read: jobs that ended before their supervisors kept summaries)",
                      "warm (streams cached)"):
            began = time.perf_counter()
            n = open_table(store)
            print(f"runs table, {label}: {n} rows in {time.perf_counter() - began:.2f} s (target <= 2 s)")
        from streamlit.testing.v1 import AppTest

        from mmcore.base.paths import ROOT
        from mmcore.runs import runresults
        runresults._cache.clear()  # the page as a fresh server process opens it
        at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=120)
        at.run()
        rows, seconds = page_time(at)
        print(f"Runs page (AppTest, a fresh process: results from the kept summaries): {rows} rows in {seconds:.2f} s")
        began = time.perf_counter()
        at.run()
        print(f"Runs page (AppTest, rerun): {time.perf_counter() - began:.2f} s")


if __name__ == "__main__":
    main()
