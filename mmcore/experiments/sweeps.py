"""Sweeps: many runs of one type that differ in chosen parameters, queued together and looked at together.

A `SweepSpec` holds the values every run shares (`base`), parameters with a list of values (`grid`, every
combination), parameters with a range (`random`: `trials` draws of each, uniform, or log-uniform where the
range spans 100x or more and is positive) and a number of seeds (`seeds`: each combination once per seed,
`--seed` 1..N). `expand(spec)` gives each run's values; each run saves under its own weight name
(`<save_weight>_sw<sweep>_<n>`), so no run writes over another's files. The act that queues a sweep is
`mmcore.actions.experiment_acts.queue_sweep` (one audit row with its jobs); this module keeps the sweeps
(`sweeps` and `sweep_jobs` tables in the job store's file) and reads them back.
"""
import itertools
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field

from mmcore.base import sqlite_tables
from mmcore.base.i18n import MessageError, message
from mmcore.experiments import runtable
from mmcore.train import train_types

SCHEMA = """
CREATE TABLE IF NOT EXISTS sweeps (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL DEFAULT '', train_type TEXT NOT NULL,
    spec TEXT NOT NULL, user TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sweep_jobs (
    sweep_id INTEGER NOT NULL, job_id INTEGER NOT NULL, PRIMARY KEY (sweep_id, job_id));
"""
MAX_RUNS = 256  # a sweep larger than this is more likely a typo than a plan
SEED_PARAM = "seed"
#: Parameters that name what a run writes: each run of a sweep gets its own.
OUTPUT_PARAMS = ("save_weight", "lora_name")


@dataclass
class SweepSpec:
    """What a sweep runs (see the module's docstring); values are texts, as a form gives them."""
    train_type: str
    base: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)  # name -> [value, ...]
    random: dict = field(default_factory=dict)  # name -> (low, high)
    trials: int = 1
    seeds: int = 1
    rng_seed: int = 0  # the random draws' own seed: the same spec draws the same values

    def as_dict(self):
        return asdict(self)


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def check(spec):
    """The problems of a spec (messages); empty when it can be expanded."""
    problems = []
    try:
        names = set(train_types.get_type(spec.train_type).names)
    except KeyError:
        return [message("sweep.unknown_type", type=spec.train_type)]
    for name in [*spec.grid, *spec.random]:  # (the shared values are checked with each run's launch)
        if name not in names:
            problems.append(message("sweep.unknown_param", name=name, type=spec.train_type))
    for name, values in spec.grid.items():
        if not values or any(str(v).strip() == "" for v in values):
            problems.append(message("sweep.empty_grid", name=name))
    for name, (low, high) in spec.random.items():
        low, high = _number(low), _number(high)
        if low is None or high is None or not low < high:
            problems.append(message("sweep.bad_range", name=name))
    both = set(spec.grid) & set(spec.random)
    if both:
        problems.append(message("sweep.twice", names=", ".join(sorted(both))))
    if spec.seeds < 1 or spec.trials < 1:
        problems.append(message("sweep.counts"))
    if SEED_PARAM in names and spec.seeds > 1 and (SEED_PARAM in spec.grid or SEED_PARAM in spec.random):
        problems.append(message("sweep.seed_twice"))
    if not problems and count(spec) > MAX_RUNS:
        problems.append(message("sweep.too_many", n=count(spec), max=MAX_RUNS))
    return problems


def count(spec):
    """How many runs the spec makes."""
    grid = math.prod(len(v) for v in spec.grid.values()) if spec.grid else 1
    return grid * (spec.trials if spec.random else 1) * spec.seeds


def _draw(rng, kind, low, high):
    low, high = float(low), float(high)
    if low > 0 and high / low >= 100:
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    if kind is int:
        return str(int(round(value)))
    return train_types.format_value(float(f"{value:.4g}"))


def expand(spec):
    """Each run's values, in order (grid combinations, then random trials, then seeds); MessageError for a spec
    with problems."""
    problems = check(spec)
    if problems:
        raise MessageError(problems)
    kinds = {p.name: p.type for p in train_types.get_type(spec.train_type).params}
    base = {**train_types.defaults(spec.train_type), **spec.base}  # a field not given: the script's default
    rng = random.Random(spec.rng_seed)
    names = list(spec.grid)
    trials = [{name: _draw(rng, kinds.get(name), *spec.random[name]) for name in spec.random}
              for _ in range(spec.trials if spec.random else 1)]
    runs = []
    for combination in itertools.product(*(spec.grid[n] for n in names)):
        for trial in trials:
            for seed in range(1, spec.seeds + 1):
                values = {**base, **dict(zip(names, (str(v).strip() for v in combination))), **trial}
                if spec.seeds > 1:
                    values[SEED_PARAM] = str(seed)
                runs.append(values)
    return runs


def own_outputs(train_type, runs, sweep_id):
    """`runs` with each run's output name made its own: `<name>_sw<sweep>_<n>` (n from 1)."""
    defaults = train_types.defaults(train_type)
    out = []
    for n, values in enumerate(runs, 1):
        values = dict(values)
        for name in OUTPUT_PARAMS:
            if name in defaults:
                values[name] = f"{values.get(name) or defaults[name]}_sw{sweep_id}_{n}"
        out.append(values)
    return out


def estimate_s(store, train_type, n):
    """Total estimated time of `n` runs: the mean wall time of this type's succeeded runs, times n (None when
    none has run yet)."""
    walls = [j.duration for j in store.list(status="succeeded", train_type=train_type, limit=50) if j.duration]
    return None if not walls else n * sum(walls) / len(walls)


class SweepStore(sqlite_tables.Tables):
    """The sweeps of the job store at `path` (JobStore.path) and the jobs each queued."""
    SCHEMA = SCHEMA

    def reserve(self, name, spec, user):
        """A new sweep's id (its jobs are added with `add_jobs`)."""
        with self.connection() as conn, conn:
            return conn.execute("INSERT INTO sweeps (name, train_type, spec, user, created_at) VALUES (?, ?, ?, ?, ?)",
                                (name or "", spec.train_type, json.dumps(spec.as_dict()), str(user),
                                 time.time())).lastrowid

    def drop(self, sweep_id):
        """Forget a sweep that queued nothing."""
        with self.connection() as conn, conn:
            conn.execute("DELETE FROM sweeps WHERE id = ?", (int(sweep_id),))

    def add_jobs(self, sweep_id, job_ids):
        with self.connection() as conn, conn:
            conn.executemany("INSERT OR IGNORE INTO sweep_jobs (sweep_id, job_id) VALUES (?, ?)",
                             [(int(sweep_id), int(j)) for j in job_ids])

    def get(self, sweep_id):
        """{"id", "name", "train_type", "spec", "user", "created_at", "jobs": [ids]} or None."""
        with self.connection() as conn:
            row = conn.execute("SELECT id, name, train_type, spec, user, created_at FROM sweeps WHERE id = ?",
                               (int(sweep_id),)).fetchone()
            if row is None:
                return None
            jobs = [j for (j,) in conn.execute("SELECT job_id FROM sweep_jobs WHERE sweep_id = ? ORDER BY job_id",
                                               (int(sweep_id),))]
        return {"id": row[0], "name": row[1], "train_type": row[2], "spec": json.loads(row[3]), "user": row[4],
                "created_at": row[5], "jobs": jobs}

    def list(self, limit=50):
        with self.connection() as conn:
            ids = [i for (i,) in conn.execute("SELECT id FROM sweeps ORDER BY id DESC LIMIT ?", (int(limit),))]
        return [self.get(i) for i in ids]

    def of_job(self):
        """{job_id: sweep_id} of every job that belongs to a sweep."""
        with self.connection() as conn:
            return dict(conn.execute("SELECT job_id, sweep_id FROM sweep_jobs").fetchall())


def sweep_runs(store, sweep_id):
    """The runs (as `runtable.run_of` gives them) of one sweep, in the order they were queued."""
    found = SweepStore(store.path).get(sweep_id)
    if found is None:
        return []
    runs = {r["id"]: r for r in runtable.runs(store)}
    return [runs[j] for j in found["jobs"] if j in runs]


def best_run(runs, metric, lower_is_better=None):
    """The run with the best value of `metric` among `runs` (None when none has it); lower is better for a
    loss, higher for anything else, unless said."""
    lower = ("loss" in metric) if lower_is_better is None else lower_is_better
    scored = [(r["results"].get(metric), r) for r in runs]
    scored = [(v, r) for v, r in scored if isinstance(v, (int, float)) and math.isfinite(v)]
    if not scored:
        return None
    return (min if lower else max)(scored, key=lambda pair: pair[0])[1]
