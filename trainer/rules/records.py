"""Structured records of a training run, written beside the upstream-format log lines.

A run folder (`--run_dir`) holds:

- `metrics.jsonl`: one JSON object per logged step: `global_step`, `epoch`, `step`, `samples`,
  `tokens`, `time` (unix seconds), `elapsed_s` (training seconds, continued across resumes) and every
  metric under its stable name (`loss`, `reward`, `reward/<part>/mean`, `kl`, ...). A line is written
  whole and flushed; a reader ignores an unterminated last line (a run killed mid-write).
- `rollouts.sqlite` (PPO, GRPO, SPO): every stored response of a step with its prompt, reference,
  reward, each reward part (`reward/<part>` columns, which add up to `reward`), advantage, length,
  truncation and per-response extras (`kl`, `accuracy`, `format_ok`, `rm/raw`, `baseline`, `rho`, ...).
  WAL mode, one transaction per step: a reader (the dashboard, while the run goes on) sees whole
  steps only, and a killed run leaves no half-written step. Its `probes` table holds the answers to
  the held-out prompts of each evaluation (`trainer/evaluation.py`): step, mode (greedy, sampled),
  prompt, response, reward, its parts (JSON, weighted), accuracy, length, truncation.
  Its `rescores` table holds each step's mean and std under a second reward (`mmcore.runs.rescore`),
  whose per-response scores are `rescore/<name>` columns of `rollouts`.
- `eval_split.json`: the held-out set of a run that evaluates (a file, or the training file's rows).

Only rank 0 writes (`RunRecords(..., enabled=False)` elsewhere). On resume from global step S, the
records after S are dropped first (those steps run again), so a resumed run continues without
duplicates. This module is torch-free: the dashboard reads the schema facts from here.
"""
import hashlib
import json
import math
import os
import re
import sqlite3
import time
from contextlib import contextmanager

METRICS_FILE = "metrics.jsonl"
ROLLOUTS_FILE = "rollouts.sqlite"
#: The dashboard's home (jobs.db, logs/, records/) is this variable, else `<repo>/runs`.
HOME_ENV = "MINIMIND_DASHBOARD_HOME"
RECORDS_SUBDIR = "records"
#: The fixed columns of a stored response; reward parts and extras are added as REAL columns.
ROLLOUT_COLUMNS = ("step", "grp", "idx", "prompt_id", "response", "reward", "advantage", "length", "truncated")
PART_PREFIX = "reward/"
_COLUMN_NAME = re.compile(r"^[A-Za-z0-9_/.:-]{1,64}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS prompts (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, prompt TEXT NOT NULL, reference TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
    id INTEGER PRIMARY KEY, step INTEGER NOT NULL, grp INTEGER NOT NULL, idx INTEGER NOT NULL,
    prompt_id INTEGER NOT NULL REFERENCES prompts(id), response TEXT NOT NULL, reward REAL NOT NULL,
    advantage REAL, length INTEGER NOT NULL, truncated INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS rollouts_by_step ON rollouts(step, grp, idx);
CREATE INDEX IF NOT EXISTS rollouts_by_reward ON rollouts(reward);
CREATE INDEX IF NOT EXISTS rollouts_by_prompt ON rollouts(prompt_id, step);
CREATE TABLE IF NOT EXISTS steps (
    step INTEGER PRIMARY KEY, epoch INTEGER NOT NULL, time REAL NOT NULL, responses INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS probes (
    id INTEGER PRIMARY KEY, step INTEGER NOT NULL, mode TEXT NOT NULL, idx INTEGER NOT NULL,
    prompt_id INTEGER NOT NULL REFERENCES prompts(id), response TEXT NOT NULL, reward REAL NOT NULL,
    parts TEXT NOT NULL, accuracy REAL NOT NULL, length INTEGER NOT NULL, truncated INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS probes_by_step ON probes(step, mode, idx);
CREATE TABLE IF NOT EXISTS rescores (
    name TEXT NOT NULL, step INTEGER NOT NULL, mean REAL NOT NULL, std REAL NOT NULL, responses INTEGER NOT NULL,
    PRIMARY KEY (name, step));
"""
#: The column of a stored response's score under a second reward (`mmcore.runs.rescore`): `rescore/<name>`.
RESCORE_PREFIX = "rescore/"
#: Where a run writes down its held-out set (a second file, or which rows of the training file).
EVAL_SPLIT_FILE = "eval_split.json"


def ensure_schema(conn):
    """Create the rollout store's tables that `conn`'s file lacks (a store from an earlier version)."""
    conn.executescript(_SCHEMA)


def records_home():
    """`$MINIMIND_DASHBOARD_HOME/records`, else `<repo>/runs/records`: where runs started from the
    command line keep their records (the dashboard's Logs page lists this folder)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(os.environ.get(HOME_ENV) or os.path.join(root, "runs"), RECORDS_SUBDIR)


def default_run_dir(args, train_type):
    """The records folder of a command-line run: named like its resume file (`{weight}_{h}[_moe]`,
    prefixed by the type), so `--from_resume 1` continues the same records."""
    weight = getattr(args, "save_weight", None) or getattr(args, "lora_name", None) or train_type
    hidden = getattr(args, "hidden_size", None) or getattr(args, "student_hidden_size", "")
    moe = "_moe" if getattr(args, "use_moe", 0) else ""
    return os.path.join(records_home(), f"{train_type}-{weight}_{hidden}{moe}")


def _finite_or_none(value):
    value = float(value)
    return value if math.isfinite(value) else None


class MetricsWriter:
    """Appends one JSON line per logged step to `metrics.jsonl` (see the module docstring)."""

    def __init__(self, run_dir, resume_step=None):
        self.path = os.path.join(run_dir, METRICS_FILE)
        self.elapsed_before = 0.0  # training seconds of the earlier part of a resumed run
        kept = self._truncate(resume_step if resume_step is not None else 0)
        if kept:
            self.elapsed_before = float(kept[-1].get("elapsed_s") or 0.0)
        self.started = time.monotonic()
        self.file = open(self.path, "a", encoding="utf-8")

    def _truncate(self, last_step):
        """Keep only the records up to `last_step` (a fresh run keeps none); returns them."""
        if not os.path.exists(self.path):
            return []
        kept, lines = [], []
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n"):
                    break  # the half-written last line of a killed run
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("global_step", 0) <= last_step:
                    kept.append(record)
                    lines.append(line)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(lines)
        os.replace(tmp, self.path)
        return kept

    def write(self, global_step, epoch, step, metrics, samples, tokens):
        """Append the record of one logged step. Non-finite values are kept (as NaN/Infinity), since
        a NaN loss is exactly what a reader must see."""
        record = {"global_step": int(global_step), "epoch": int(epoch), "step": int(step),
                  "samples": int(samples), "tokens": int(tokens), "time": round(time.time(), 3),
                  "elapsed_s": round(self.elapsed_before + time.monotonic() - self.started, 3)}
        for name, value in metrics.items():
            record[name] = float(value)
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self):
        self.file.close()


def prompt_key(prompt, reference):
    """The key that identifies a prompt (with its reference) across steps and runs."""
    return hashlib.sha1(f"{prompt}\0{reference}".encode("utf-8")).hexdigest()


class RolloutWriter:
    """Writes each step's responses to `rollouts.sqlite`, one transaction per step.

    What is kept: every `every`-th step, the first `keep_groups` groups of it (-1: all), until the file
    passes `max_mb` (then responses stop being stored, and the `meta` table says from which step).
    """

    def __init__(self, run_dir, resume_step=None, keep_groups=-1, every=1, max_mb=2048.0, meta=None):
        self.path = os.path.join(run_dir, ROLLOUTS_FILE)
        self.keep_groups, self.every, self.max_bytes = keep_groups, max(1, every), max_mb * 2 ** 20
        self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a crash loses at most the last step
        self.conn.executescript(_SCHEMA)
        last = resume_step if resume_step is not None else 0
        with self._transaction():
            self.conn.execute("DELETE FROM rollouts WHERE step > ?", (last,))
            self.conn.execute("DELETE FROM steps WHERE step > ?", (last,))
            self.conn.execute("DELETE FROM probes WHERE step > ?", (last,))
            self.conn.execute("DELETE FROM rescores WHERE step > ?", (last,))
            self.conn.execute("DELETE FROM meta WHERE key = 'full_at_step'")
            for key, value in (meta or {}).items():
                self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))
        self.columns = {row[1] for row in self.conn.execute("PRAGMA table_info(rollouts)")}
        self.prompt_ids = {}
        self.full = False

    def _transaction(self):
        conn = self.conn

        class _Tx:
            def __enter__(self):
                conn.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, exc, tb):
                conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
        return _Tx()

    def size_bytes(self):
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    def wants(self, global_step):
        """Whether the responses of `global_step` will be stored (so a trainer can skip gathering them)."""
        return self.keep_groups != 0 and not self.full and global_step % self.every == 0

    def _add_column(self, name):
        if not _COLUMN_NAME.match(name) or name in ROLLOUT_COLUMNS or name == "id":
            raise ValueError(f"not a valid rollout column name: {name!r}")
        self.conn.execute(f'ALTER TABLE rollouts ADD COLUMN "{name}" REAL')
        self.columns.add(name)

    def _prompt_id(self, prompt, reference):
        key = prompt_key(prompt, reference)
        pid = self.prompt_ids.get(key)
        if pid is None:
            self.conn.execute("INSERT OR IGNORE INTO prompts (key, prompt, reference) VALUES (?, ?, ?)",
                              (key, prompt, reference))
            pid = self.conn.execute("SELECT id FROM prompts WHERE key = ?", (key,)).fetchone()[0]
            self.prompt_ids[key] = pid
        return pid

    def write_step(self, global_step, epoch, groups):
        """Store one step: `groups` is a list of groups (one per prompt), each a list of response dicts
        with prompt, reference, response, reward, advantage, length, truncated, and optionally
        `parts` (name -> value, adding up to reward) and `extras` (name -> value)."""
        if not self.wants(global_step):
            return
        if self.keep_groups > 0:
            groups = groups[:self.keep_groups]
        rows, names = [], []
        for g, group in enumerate(groups):
            for i, r in enumerate(group):
                values = {PART_PREFIX + k: v for k, v in (r.get("parts") or {}).items()}
                values.update(r.get("extras") or {})
                for name in values:
                    if name not in names:
                        names.append(name)
                rows.append((g, i, r, values))
        with self._transaction():
            for name in names:
                if name not in self.columns:
                    self._add_column(name)
            self.conn.execute("DELETE FROM rollouts WHERE step = ?", (global_step,))
            cols = ", ".join(f'"{c}"' for c in ROLLOUT_COLUMNS + tuple(names))
            marks = ", ".join("?" * (len(ROLLOUT_COLUMNS) + len(names)))
            self.conn.executemany(f"INSERT INTO rollouts ({cols}) VALUES ({marks})", [
                (global_step, g, i, self._prompt_id(r["prompt"], r.get("reference") or ""), r["response"],
                 float(r["reward"]), None if r.get("advantage") is None else _finite_or_none(r["advantage"]),
                 int(r["length"]), int(bool(r["truncated"])),
                 *(None if values.get(n) is None else _finite_or_none(values[n]) for n in names))
                for g, i, r, values in rows])
            self.conn.execute("INSERT OR REPLACE INTO steps (step, epoch, time, responses) VALUES (?, ?, ?, ?)",
                              (global_step, int(epoch), time.time(), len(rows)))
        if self.size_bytes() > self.max_bytes:
            self.full = True
            with self._transaction():
                self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('full_at_step', ?)",
                                  (json.dumps(global_step),))

    def write_probes(self, global_step, rows):
        """Store the held-out answers of one evaluation: dicts with mode, row (the held-out row), prompt,
        reference, response, reward, parts (name -> weighted value), accuracy, length, truncated (one
        transaction)."""
        with self._transaction():
            self.conn.execute("DELETE FROM probes WHERE step = ?", (global_step,))
            self.conn.executemany(
                "INSERT INTO probes (step, mode, idx, prompt_id, response, reward, parts, accuracy, length, truncated) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(global_step, r["mode"], int(r.get("row", i)), self._prompt_id(r["prompt"], r.get("reference") or ""),
                  r["response"], float(r["reward"]), json.dumps({k: float(v) for k, v in (r.get("parts") or {}).items()}),
                  float(r["accuracy"]), int(r["length"]), int(bool(r["truncated"])))
                 for i, r in enumerate(rows)])

    def close(self):
        self.conn.close()


class RunRecords:
    """The structured records of one run: metrics always, rollouts for the RL types.

    `enabled=False` (ranks other than 0) makes every method a no-op. `resume_step` is the global step
    the run resumes after (None: a fresh run; records of an earlier run in the same folder are moved
    aside to `{run_dir}.{time}` first, so nothing is lost).
    """

    def __init__(self, run_dir, train_type, *, resume_step=None, rollouts=False, keep_groups=-1, every=1,
                 max_mb=2048.0, meta=None, enabled=True):
        self.enabled = enabled and bool(run_dir)
        self.run_dir = os.path.abspath(run_dir) if run_dir else None
        self.metrics = self.rollouts = None
        if not self.enabled:
            return
        if resume_step is None and os.path.isdir(self.run_dir) and any(
                os.path.exists(os.path.join(self.run_dir, f)) for f in (METRICS_FILE, ROLLOUTS_FILE)):
            os.replace(self.run_dir, f"{self.run_dir}.{time.strftime('%Y%m%d-%H%M%S')}")
        os.makedirs(self.run_dir, exist_ok=True)
        self.metrics = MetricsWriter(self.run_dir, resume_step)
        if rollouts:
            self.rollouts = RolloutWriter(self.run_dir, resume_step, keep_groups, every, max_mb,
                                          meta={"train_type": train_type, **(meta or {})})
        self._keep_private()

    def _keep_private(self):
        """Inside the dashboard's home (its records folder) the run's folder and files are the OS user's only
        (0700/0600), as everything else there; a run folder chosen elsewhere keeps the umask's modes."""
        home = os.path.realpath(records_home())
        run_dir = os.path.realpath(self.run_dir)
        if os.path.commonpath([home, run_dir]) != home:
            return
        try:
            self._tighten(home, run_dir)
        except OSError:  # another user's folder, or gone: the run goes on
            pass

    @staticmethod
    def _tighten(home, run_dir):
        folder = run_dir
        while True:  # the run's folder and the folders made for it up to the records folder
            os.chmod(folder, 0o700)
            if folder == home or os.path.dirname(folder) == folder:
                break
            folder = os.path.dirname(folder)
        for name in os.listdir(run_dir):
            path = os.path.join(run_dir, name)
            if os.path.isfile(path):
                os.chmod(path, 0o600)

    def log(self, global_step, epoch, step, metrics, samples, tokens):
        if self.metrics is not None:
            self.metrics.write(global_step, epoch, step, metrics, samples, tokens)

    def wants_rollouts(self, global_step):
        return self.rollouts is not None and self.rollouts.wants(global_step)

    def add_rollouts(self, global_step, epoch, groups):
        if self.rollouts is not None:
            self.rollouts.write_step(global_step, epoch, groups)

    def add_probes(self, global_step, rows):
        if self.rollouts is not None:
            self.rollouts.write_probes(global_step, rows)

    def write_split(self, split):
        """Write down the run's held-out set (`EVAL_SPLIT_FILE`, JSON), so the split can be made again."""
        if self.enabled:
            path = os.path.join(self.run_dir, EVAL_SPLIT_FILE)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(split, f, indent=1)
            os.replace(path + ".tmp", path)

    def close(self):
        for part in (self.metrics, self.rollouts):
            if part is not None:
                part.close()
        if self.enabled:
            self._keep_private()  # files the run made since it started


class StepTimer:
    """Seconds spent per phase of one step: `with timer("generate"): ...`. `finish(step_s)` returns the
    `time/...` metrics, counting what the phases did not cover as `update` (log-probs, loss, backward,
    optimizer), and starts the next step. On CUDA the phases end with a host transfer (decoding,
    `.item()`), so wall-clock phases are what the GPU spent too."""

    def __init__(self):
        self.phases = {}

    @contextmanager
    def __call__(self, phase):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[phase] = self.phases.get(phase, 0.0) + time.perf_counter() - start

    def finish(self, step_s):
        out = {f"time/{name}_s": value for name, value in self.phases.items()}
        out["time/update_s"] = max(step_s - sum(self.phases.values()), 0.0)
        out["time/step_s"] = step_s
        self.phases = {}
        return out


class Recorder:
    """The training loop's side of the records: it counts samples and tokens, times each step, writes
    one metrics record per logged step and commits each step's rollouts (one transaction).

    A step function reaches it as `run.records`: `timer("generate")` around a phase, `add_tokens(n)`
    for tokens the batch does not show (generated ones), `wants_rollouts()` / `add_rollouts(groups)`.
    Its `state_dict` (the counts at the last optimizer step) travels in the resume state, so a resumed
    run counts on. Token counts may be tensors (summed on the device, read only when logged).
    """

    def __init__(self, records, world_size=1, state=None):
        self.records, self.world_size = records, world_size
        state = state or {}
        self.samples, self.tokens = int(state.get("samples", 0)), state.get("tokens", 0)
        self.at_boundary = (self.samples, self.tokens)
        self.timer = StepTimer()
        self.global_step, self.started, self.step_tokens, self.pending = 0, 0.0, 0, None
        self.last_times = {}

    # -- used by step functions
    def wants_rollouts(self):
        return self.records.wants_rollouts(self.global_step)

    def add_rollouts(self, groups):
        self.pending = groups

    def add_tokens(self, count):
        self.step_tokens = self.step_tokens + count

    # -- used by the loop
    def begin(self, global_step, batch):
        """Start a step: its global step, and the samples and tokens (attention masks) of its batch."""
        self.global_step, self.pending, self.started = global_step, None, time.perf_counter()
        first = next(iter(batch.values()), [])
        self.samples += len(first) * self.world_size
        self.step_tokens = 0
        for key, value in batch.items():
            if key.endswith("attention_mask"):
                self.step_tokens = self.step_tokens + value.sum()

    def end(self, epoch, optimizer_stepped):
        """After the step's update: commit its rollouts, count its tokens and time it."""
        if self.pending is not None:
            self.records.add_rollouts(self.global_step, epoch, self.pending)
            self.pending = None
        step_s = time.perf_counter() - self.started
        self.tokens = self.tokens + self.step_tokens * self.world_size
        self.last_times = self.timer.finish(step_s)
        self.last_times["tokens_per_s"] = float(self.step_tokens) * self.world_size / max(step_s, 1e-9)
        if optimizer_stepped:
            self.at_boundary = (self.samples, self.tokens)

    def timings(self):
        """The last step's `time/...` seconds and tokens per second."""
        return dict(self.last_times)

    def log(self, epoch, step, metrics):
        """Write the record of a logged step (`metrics` by stable name)."""
        self.records.log(self.global_step, epoch, step, metrics, self.samples, int(self.tokens))

    def log_at(self, global_step, epoch, step, metrics):
        """Write a record at `global_step` outside a logged step (an evaluation's: step 0, or a step that
        printed no progress line)."""
        self.records.log(global_step, epoch, step, metrics, self.samples, int(self.tokens))

    def state_dict(self):
        return {"samples": int(self.at_boundary[0]), "tokens": int(self.at_boundary[1])}

    def load_state_dict(self, state):
        self.samples, self.tokens = int(state.get("samples", 0)), int(state.get("tokens", 0))
        self.at_boundary = (self.samples, self.tokens)

    def close(self):
        self.records.close()
