"""Run time of each dashboard page on a busy job store, measured with Streamlit's AppTest.

Fills a job store in a temporary `MINIMIND_DASHBOARD_HOME` with 2,000 jobs (every training type;
succeeded, failed, stopped, lost, running and queued), each with a short log in its type's upstream
format, plus two big logs of 100,000 progress records: a pretrain job (`Epoch:[e/E](s/S) loss:...`)
and a GRPO job (`Epoch: e, Step: s/S, Actor Loss: ..., Reward: ...`). Both are the newest jobs, so
the Jobs table shows them.

Then, for each page (streamlit_app.py alone, which shows its default page Train, and pages/train.py,
pages/jobs.py and pages/logs.py, the last two with a big job selected through `?job=<id>`), in a
fresh Python process, each run being a whole rerun as the server does it (streamlit_app.py with its
sidebar, then the page):

- first run: a new AppTest in a new process (imports, caches and the parse of the logs included);
- warm run: the same AppTest run again (a widget interaction or a refresh of that session);
- new session: a second AppTest in the same process (another user opening the page).

Target: every page under 1 s, judged on the warm runs and new sessions (a fresh process's first run
also pays for imports, once per server start). Wall-clock and CPU time are both printed: on a shared
machine the wall clock includes time spent waiting for a core. AppTest compiles the scripts again on
every run (about 0.1 s here), which a real server caches.

    python3 bench/bench_pages.py [--jobs 2000] [--records 100000] [--profile PAGE] [--keep DIR]

`--profile logs-grpo` (or any page name of the table) prints the cProfile of that page's warm run
instead.
`--keep DIR` fills the store in DIR and keeps it; given a DIR this script filled before, it measures
that store again without filling it (the size options are then ignored).
"""
import argparse
import json
import os
import random
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ENTRY = "streamlit_app.py"
PAGES = {  # name -> (script, which big job it selects: None, "pretrain" or "grpo")
    "app": (ENTRY, None),
    "train": ("pages/train.py", None),
    "jobs-pretrain": ("pages/jobs.py", "pretrain"),
    "jobs-grpo": ("pages/jobs.py", "grpo"),
    "logs-pretrain": ("pages/logs.py", "pretrain"),
    "logs-grpo": ("pages/logs.py", "grpo"),
}
STATUS_MIX = (("succeeded", 55), ("failed", 15), ("stopped", 10), ("lost", 10), ("running", 6), ("queued", 4))
TIMEOUT_S = 120  # AppTest's own limit per run: far above the target, so slow pages are measured, not cut

# One progress line per type, in the format its upstream script prints.
LINE_FORMATS = {
    "pretrain": "Epoch:[{e}/{E}]({s}/{S}) loss:{a:.6f} lr:{lr:.12f} epoch_Time:{t:.1f}min:",
    "sft": "Epoch:[{e}/{E}]({s}/{S}) loss:{a:.6f} lr:{lr:.12f} epoch_Time:{t:.1f}min:",
    "lora": "Epoch:[{e}/{E}]({s}/{S}) loss:{a:.6f} lr:{lr:.12f} epoch_Time:{t:.1f}min:",
    "dpo": "Epoch:[{e}/{E}]({s}/{S}) loss:{a:.6f} lr:{lr:.12f} epoch_Time:{t:.1f}min:",
    "distill_reason": "Epoch:[{e}/{E}]({s}/{S}) loss:{a:.6f} lr:{lr:.12f} epoch_Time:{t:.1f}min:",
    "distillation": ("Epoch:[{e}/{E}]({s}/{S}) loss:{a:.4f} ce:{b:.4f} distill:{c:.4f} lr:{lr:.6f} "
                     "epoch_Time:{t:.1f}min:"),
    "grpo": "Epoch: {e}, Step: {s}/{S}, Actor Loss: {a:.6f}, Reward: {b:.6f}, Avg Response Len: {t:.2f}, LR: {lr:.2e}",
    "spo": ("Epoch: {e}, Step: {s}/{S}, Actor Loss: {a:.6f}, Reward: {b:.6f}, Baseline: {c:.4f}, KL: {c:.4f}, "
            "Rho: 0.9000, Avg Response Len: {t:.2f}, LR: {lr:.2e}"),
    "ppo": ("Epoch: {e}, Step: {s}/{S}, Actor Loss: {a:.6f}, Critic Loss: {b:.6f}, Reward: {b:.6f}, KL: {c:.4f}, "
            "KL_ref: {c:.4f}, Avg Response Len: {t:.2f}, Actor LR: {lr:.2e}, Critic LR: {lr:.2e}"),
}


# -- the store -----------------------------------------------------------------------------------

def write_log(path, job_id, train_type, name, argv, cwd, status, records, epochs, rng):
    """A job log as the runner writes it: header, progress lines (with some noise), end line."""
    fmt = LINE_FORMATS[train_type]
    steps = max(1, -(-records // epochs))
    command = shlex.join(argv)
    lines = [f"# job {job_id} · type {train_type} · {name}", f"# command: {command}",
             f"# cwd: {cwd}", "# started: 2026-12-01T09:00:00+00:00",
             f"开始训练 {train_type} 进程", f"命令: {command}", "Model Params: 25.830M"]
    for i in range(records):
        e, s = i // steps + 1, i % steps + 1
        loss = 9.0 * (0.9995 ** i) + rng.random() * 0.1
        lines.append(fmt.format(e=e, E=epochs, s=s, S=steps, a=loss, b=rng.random(), c=rng.random() * 0.01,
                                lr=5e-4 * (1 - i / records) + 1e-6, t=332.0))
        if i % 500 == 499:
            lines.append("UserWarning: 'pin_memory' argument is set as true but no accelerator is found")
    if status not in ("running", "queued"):
        lines.append(f"# finished: {status} at 2026-12-01T10:00:00+00:00")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def big_jobs(home):
    """{"pretrain": id, "grpo": id} of the big-log jobs of a store this script filled before."""
    os.environ["MINIMIND_DASHBOARD_HOME"] = str(home)
    from mmcore.jobs.jobstore import JobStore

    jobs = JobStore().list(limit=None)
    return {t: next(job.id for job in jobs if job.name == f"{t}-big") for t in ("pretrain", "grpo")}


def fill_store(home, n_jobs, big_records, seed=0):
    """Create the jobs and their logs in `home`; return {"pretrain": id, "grpo": id} of the big ones."""
    os.environ["MINIMIND_DASHBOARD_HOME"] = str(home)
    from mmcore.base.process_identity import process_start_time
    from mmcore.jobs import progress
    from mmcore.jobs.jobstore import JobStore
    from mmcore.train import commandline, train_types
    from mmcore.widgets import train_form

    rng = random.Random(seed)
    store = JobStore()
    # The last connection to close checkpoints the WAL and syncs the file; holding one open while
    # filling turns thousands of those syncs into one.
    keeper = sqlite3.connect(store.path)
    keeper.execute("SELECT COUNT(*) FROM jobs").fetchone()  # opens the WAL index, which makes it count
    commands = {}
    for t in train_types.TYPES:
        values = train_form.command_values(t, train_form.initial_form(t))
        commands[t] = (values, commandline.build_command(t, values))
    statuses = [s for s, weight in STATUS_MIX for _ in range(weight)]
    # Active jobs need a live supervisor, or the store marks them lost: this process stands in.
    me, my_start = os.getpid(), process_start_time(os.getpid())
    now = time.time()

    def add(train_type, status, records, name):
        values, cmd = commands[train_type]
        job_id = store.create(train_type, name, values, cmd.argv, cmd.cwd, cmd.env, user="bench", host="gpu-box")
        started = now - rng.uniform(600, 30 * 86400)
        fields = {"status": status, "started_at": started}
        if status in ("running", "queued"):
            fields.update(supervisor_pid=me, supervisor_start=my_start)
            if status == "queued":
                fields["started_at"] = None
        else:
            fields.update(ended_at=started + rng.uniform(60, 86400),
                          exit_code={"succeeded": 0, "failed": 1, "stopped": -15, "lost": None}[status])
        store.update(job_id, **fields)
        if status != "queued":
            write_log(store.log_path_for(job_id), job_id, train_type, name, cmd.argv, cmd.cwd, status, records,
                      int(values["epochs"]), rng)
        if status in ("succeeded", "failed", "stopped"):  # what the runner stores when a job ends
            store.update(job_id, final_progress=progress.final_progress(store.get(job_id)).as_dict())
        return job_id

    types = list(train_types.TYPES)
    for i in range(n_jobs - 2):
        t = types[i % len(types)]
        add(t, rng.choice(statuses), rng.randint(5, 60), f"{t}-run-{i:04d}")
    big = {"pretrain": add("pretrain", "succeeded", big_records, "pretrain-big"),
           "grpo": add("grpo", "succeeded", big_records, "grpo-big")}
    keeper.close()
    return big


# -- one page, in its own process ----------------------------------------------------------------

def clock():
    return time.perf_counter(), time.process_time()


def since(start):
    wall, cpu = clock()
    return wall - start[0], cpu - start[1]


def app_test(script, job_id):
    """An AppTest of the dashboard showing `script`, as the server runs it: the entry script (page
    setup, navigation, sidebar) and then the page, so page links between pages resolve."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / ENTRY), default_timeout=TIMEOUT_S)
    if script != ENTRY:
        at.switch_page(script)
    if job_id is not None:
        at.query_params["job"] = str(job_id)
    return at


def shown(at):
    """What the run drew, in short: the page title, and the number of tables and charts."""
    title = at.title[0].value if len(at.title) else "(no title)"
    charts = len(at.get("plotly_chart"))
    return f"{title}: {len(at.dataframe)} tables, {charts} charts"


def problems(at):
    """Exceptions and error messages the page showed (a page that fails is not a fast page)."""
    found = [f"exception: {e.message}" for e in at.exception]
    found += [f"error: {e.value}" for e in at.error]
    return found


def measure_page(script, job_id):
    """Times of the first run, the warm rerun and a new session's run, with what went wrong."""
    at = app_test(script, job_id)
    start = clock()
    at.run()
    first = since(start)
    start = clock()
    at.run()
    warm = since(start)
    other = app_test(script, job_id)
    start = clock()
    other.run()
    session = since(start)
    return {"first": first, "warm": warm, "session": session, "shown": shown(at),
            "problems": problems(at) + problems(other)}


def profile_page(script, job_id, top=30):
    """cProfile of the page's warm run (after one run to import and fill caches).

    AppTest runs the script in a thread of its own, started by each run: a thread profile hook
    starts the profiler inside that thread.
    """
    import cProfile
    import pstats
    import threading

    at = app_test(script, job_id)
    at.run()
    profiler = cProfile.Profile()

    def start_in_script_thread(frame, event, arg):
        sys.setprofile(None)
        profiler.enable()

    threading.setprofile(start_in_script_thread)
    try:
        at.run()
    finally:
        threading.setprofile(None)
    stats = pstats.Stats(profiler).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def run_child(name, home, job_ids):
    """Measure one page in a fresh interpreter, so its first run pays for imports like a new server."""
    script, big = PAGES[name]
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, __file__, "--child", script]
    if big is not None:
        args += ["--job", str(job_ids[big])]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs in the store (default 2000)")
    parser.add_argument("--records", type=int, default=100_000, help="records in each big log (default 100000)")
    parser.add_argument("--profile", choices=list(PAGES),
                        help="print the cProfile of this page's warm run instead of timing every page")
    parser.add_argument("--keep", metavar="DIR", help="fill the store in DIR and keep it; reuse it if already filled")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--job", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jobs < 2 or args.records < 1:
        parser.error("--jobs must be at least 2 and --records at least 1")

    if args.child:  # inside the fresh interpreter of run_child
        os.chdir(ROOT)
        result = measure_page(args.child, args.job)
        print(json.dumps(result))
        return

    if args.keep:
        measure(Path(args.keep), args, parser)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-pages-") as home:
            measure(Path(home), args, parser)


def measure(home, args, parser):
    """Fill (or reuse) the store in `home`, then time or profile the pages."""
    if args.keep and (home / "jobs.db").exists():
        # A store kept from an earlier run: measure it again as it is (for profiling, or after a fix).
        job_ids = big_jobs(home)
        print(f"store: reusing {home}")
    elif args.keep and home.exists() and any(home.iterdir()):
        parser.error(f"--keep {home}: the folder holds something else than a store of this script")
    else:
        home.mkdir(parents=True, exist_ok=True)
        start = clock()
        job_ids = fill_store(home, args.jobs, args.records)
        wall, _ = since(start)
        print(f"store: {args.jobs} jobs in {home} (filled in {wall:.1f} s)")
    big_mb = sum(os.path.getsize(home / "logs" / f"job-{i}.log") for i in job_ids.values()) / 1e6
    print(f"big logs: pretrain job {job_ids['pretrain']}, grpo job {job_ids['grpo']}, {big_mb:.1f} MB together")

    if args.profile:
        os.chdir(ROOT)
        script, big = PAGES[args.profile]
        print(f"cProfile of the warm run of {script}" + (f" with ?job={job_ids[big]}" if big else ""))
        profile_page(script, job_ids[big] if big else None)
        return

    print(f"{'page':<16}{'first run':>18}{'warm run':>18}{'new session':>18}   (wall s / cpu s)")
    slow = []
    for name in PAGES:
        result = run_child(name, home, job_ids)
        if "error" in result:
            print(f"{name:<16}  could not run: {' '.join(result['error'])}")
            slow.append(f"{name} (could not run)")
            continue
        cells = "".join(f"{result[k][0]:>10.3f} /{result[k][1]:>6.3f}" for k in ("first", "warm", "session"))
        print(f"{name:<16}{cells}   {result['shown']}")
        for problem in result["problems"]:
            print(f"{'':<16}  page showed {problem[:300]}")
        if result["problems"]:
            slow.append(f"{name} (it failed: its times mean nothing)")
        slow += [f"{name} {k} ({what})" for k in ("warm", "session") for i, what in enumerate(("wall", "cpu"))
                 if result[k][i] > 1.0]
    # The first run of a fresh process includes imports and cold caches: reported, not judged.
    print("target: warm runs and new sessions under 1 s;",
          f"over it: {', '.join(slow)}" if slow else "every page met it")


if __name__ == "__main__":
    main()
