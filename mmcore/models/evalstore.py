"""Evaluation results in SQLite: `<home>/evals.db`, beside the job store.

An evaluation (one job) runs checkpoints over prompts with reference answers. Its rows:
`evals` (what was asked: data file, settings, the job that runs it), `eval_results` (one per
checkpoint: accuracy, format rate, mean reward, mean length, and the checkpoint's training step and
run), `eval_answers` (every prompt's answer with its scores). Written by `mmcore/workers/eval_worker.py`, read by
the Models page. Torch-free.
"""
import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from mmcore.base import paths
from mmcore.base.paths import default_home

SCHEMA = """
CREATE TABLE IF NOT EXISTS evals (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER, created_at REAL NOT NULL,
    data_path TEXT NOT NULL, settings TEXT NOT NULL, weights TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS eval_results (
    eval_id INTEGER NOT NULL REFERENCES evals(id) ON DELETE CASCADE, weight TEXT NOT NULL, label TEXT NOT NULL,
    train_type TEXT, run_job_id INTEGER, step INTEGER, n INTEGER NOT NULL, accuracy REAL, format_rate REAL,
    mean_reward REAL, mean_length REAL, finished_at REAL NOT NULL, PRIMARY KEY (eval_id, weight));
CREATE TABLE IF NOT EXISTS eval_answers (
    eval_id INTEGER NOT NULL REFERENCES evals(id) ON DELETE CASCADE, weight TEXT NOT NULL, idx INTEGER NOT NULL,
    prompt TEXT NOT NULL, reference TEXT, answer TEXT NOT NULL, reward REAL, format REAL, rule REAL,
    length INTEGER NOT NULL, reward_model REAL, correct REAL, PRIMARY KEY (eval_id, weight, idx));
"""
#: Columns added to `eval_answers` after its first release, added in place to older files.
ADDED_ANSWER_COLUMNS = (("reward_model", "REAL"), ("correct", "REAL"))


class EvalStore:
    def __init__(self, path=None):
        self.path = str(path or Path(default_home()) / "evals.db")
        paths.private_db(self.path)
        with closing(self._connect()) as conn, conn:
            conn.executescript(SCHEMA)
            have = {row["name"] for row in conn.execute("PRAGMA table_info(eval_answers)")}
            for name, kind in ADDED_ANSWER_COLUMNS:
                if name not in have:
                    conn.execute(f"ALTER TABLE eval_answers ADD COLUMN {name} {kind}")

    def _connect(self):
        conn = sqlite3.connect(self.path, timeout=30)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _write(self, sql, args=()):
        with closing(self._connect()) as conn, conn:
            return conn.execute(sql, args).lastrowid

    def _read(self, sql, args=()):
        with closing(self._connect()) as conn:
            return [dict(r) for r in conn.execute(sql, args)]

    def create(self, data_path, settings, weights):
        """A new evaluation of `weights` (list of {"weight", "label", "train_type", "run_job_id", "step"})."""
        return self._write("INSERT INTO evals (created_at, data_path, settings, weights) VALUES (?, ?, ?, ?)",
                           (time.time(), str(data_path), json.dumps(settings), json.dumps(weights)))

    def set_job(self, eval_id, job_id):
        self._write("UPDATE evals SET job_id = ? WHERE id = ?", (job_id, eval_id))

    def get(self, eval_id):
        rows = self._read("SELECT * FROM evals WHERE id = ?", (eval_id,))
        if not rows:
            return None
        row = rows[0]
        row["settings"], row["weights"] = json.loads(row["settings"]), json.loads(row["weights"])
        return row

    def list(self, limit=100):
        rows = self._read("SELECT * FROM evals ORDER BY id DESC LIMIT ?", (limit,))
        for row in rows:
            row["settings"], row["weights"] = json.loads(row["settings"]), json.loads(row["weights"])
        return rows

    def add_answer(self, eval_id, weight, idx, prompt, reference, answer, rewards, length):
        rewards = rewards or {}
        self._write("INSERT OR REPLACE INTO eval_answers (eval_id, weight, idx, prompt, reference, answer, reward,"
                    " format, rule, length, reward_model, correct) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (eval_id, weight, idx, prompt, reference, answer, rewards.get("total"), rewards.get("format"),
                     rewards.get("rule"), length, rewards.get("reward_model"), rewards.get("correct")))

    def add_result(self, eval_id, weight, label, train_type, run_job_id, step, summary):
        self._write("INSERT OR REPLACE INTO eval_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (eval_id, weight, label, train_type, run_job_id, step, summary["n"], summary["accuracy"],
                     summary["format_rate"], summary["mean_reward"], summary["mean_length"], time.time()))

    def results(self, eval_ids=None):
        """Per-checkpoint results, of the given evaluations (default: all), oldest first."""
        if eval_ids is None:
            return self._read("SELECT * FROM eval_results ORDER BY eval_id, step")
        marks = ",".join("?" * len(eval_ids))
        return self._read(f"SELECT * FROM eval_results WHERE eval_id IN ({marks}) ORDER BY eval_id, step",
                          tuple(eval_ids))

    def answers(self, eval_id, weight):
        return self._read("SELECT * FROM eval_answers WHERE eval_id = ? AND weight = ? ORDER BY idx",
                          (eval_id, weight))


#: The best format reward (full think/answer structure, each tag once): what counts as "in format".
FULL_FORMAT = 1.5


def summarise(scored):
    """n, accuracy (share of answers that match the reference: "correct", else the rule reward), format
    rate (share in full format), mean reward and mean length of a checkpoint's scored answers
    [{"rewards", "length"}]."""
    n = len(scored)

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None
    rewards = [s["rewards"] or {} for s in scored]
    formats = [r.get("format") for r in rewards]
    return {"n": n, "accuracy": mean([r.get("correct", r.get("rule")) for r in rewards]),
            "format_rate": mean([None if f is None else float(f >= FULL_FORMAT) for f in formats]),
            "mean_reward": mean([r.get("total") for r in rewards]),
            "mean_length": mean([s["length"] for s in scored])}
