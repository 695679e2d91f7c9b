"""Read a run's metrics stream (`metrics.jsonl` in its run folder, written by `trainer/rules/records.py`).

`read(run_dir)` gives one row per logged step: `global_step`, `epoch`, `step`, `samples`, `tokens`,
`time`, `elapsed_s` and one column per metric under its stable name (`loss`, `reward`,
`reward/<part>/mean`, `frac_reward_zero_std`, `kl`, `entropy`, `time/generate_s`, ...).
`MetricsReader` reads the same file incrementally, for pages that refresh while a run goes on.
"""
import json
import os
from pathlib import Path

from trainer.rules.records import METRICS_FILE, RECORDS_SUBDIR, ROLLOUTS_FILE  # (torch-free)

#: Columns that say where a record is, not what was measured.
POSITION_COLUMNS = ("global_step", "epoch", "step", "samples", "tokens", "time", "elapsed_s")
#: The x axes a chart of records can use, with their labels.
X_AXES = {"global_step": "Step", "samples": "Samples seen", "elapsed_s": "Wall time (s)"}
RUN_DIR_OPTION = "--run_dir"


class MetricsReader:
    """Incremental reader of one run's metrics stream: each `update()` reads only appended whole lines."""

    def __init__(self, run_dir):
        self.path = Path(run_dir) / METRICS_FILE
        self.records = []
        self.offset = 0
        self.inode = None
        self._frame = None

    def update(self):
        """Read what was appended; a file replaced by a resumed run (truncated records) is read anew.
        Returns the number of new records."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return 0
        if st.st_ino != self.inode or st.st_size < self.offset:
            self.records, self.offset, self.inode, self._frame = [], 0, st.st_ino, None
        if st.st_size == self.offset:
            return 0
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)
        end = data.rfind(b"\n") + 1  # an unterminated last line is still being written (or was cut)
        new = []
        for line in data[:end].splitlines():
            try:
                new.append(json.loads(line))
            except ValueError:
                continue
        self.offset += end
        if new:
            self.records.extend(new)
            self._frame = None
        return len(new)

    def __len__(self):
        return len(self.records)

    def frame(self):
        """The records as a DataFrame (one row per logged step, ordered by global_step)."""
        if self._frame is None:
            # Imported here: job supervisors import this module for its paths, and pandas would add
            # seconds to every job's start on a busy machine.
            import pandas as pd

            df = pd.DataFrame.from_records(self.records)
            if len(df):
                # A resumed run's file holds each step once; order by step for safety all the same.
                df = df.drop_duplicates("global_step", keep="last").sort_values("global_step", kind="stable")
                df = df.reset_index(drop=True)
            else:
                df = pd.DataFrame(columns=list(POSITION_COLUMNS))
            self._frame = df
        return self._frame


def read(run_dir):
    """The metrics of the run recorded in `run_dir`: one row per logged step, a `global_step` column
    and one column per metric under its stable name. Empty (with the position columns) when the run
    has no metrics stream."""
    reader = MetricsReader(run_dir)
    reader.update()
    return reader.frame().copy()


def metric_columns(df):
    """The measured columns of a metrics frame (everything but the position columns)."""
    return [c for c in df.columns if c not in POSITION_COLUMNS]


def has_metrics(run_dir):
    return run_dir is not None and (Path(run_dir) / METRICS_FILE).is_file()


def has_rollouts(run_dir):
    return run_dir is not None and (Path(run_dir) / ROLLOUTS_FILE).is_file()


def records_dir(home):
    """Where the records of runs live under the dashboard's home (jobs in `job-N`, command-line runs
    in `<type>-<weight>_<hidden>`)."""
    return Path(home) / RECORDS_SUBDIR


def job_dir(home, job_id):
    """The records folder the dashboard gives job `job_id`."""
    return records_dir(home) / f"job-{job_id}"


def option_value(argv, option=RUN_DIR_OPTION):
    """The value of `option` in an argv list (`--opt value` or `--opt=value`), or None."""
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg[len(option) + 1:]
    return None


def with_run_dir(argv, run_dir):
    """`argv` with `--run_dir run_dir` appended, unless it already names a records folder."""
    if option_value(argv) not in (None, ""):
        return list(argv)
    return [a for a in argv if a != RUN_DIR_OPTION] + [RUN_DIR_OPTION, str(run_dir)]


def job_run_dir(job, home):
    """Where job `job` keeps its records: the folder its command names, else its own folder."""
    named = option_value(job.argv or [])
    if named:
        return Path(os.path.normpath(Path(job.cwd or ".") / named))
    return job_dir(home, job.id)


def list_run_dirs(home, exclude=()):
    """Records folders under the home that hold a metrics stream, newest first (skipping `exclude`)."""
    root = records_dir(home)
    if not root.is_dir():
        return []
    skip = {str(Path(p)) for p in exclude}
    found = [p for p in root.iterdir() if p.is_dir() and str(p) not in skip and (p / METRICS_FILE).is_file()]
    return sorted(found, key=lambda p: (p / METRICS_FILE).stat().st_mtime, reverse=True)
