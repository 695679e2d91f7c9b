"""A second opinion on a run's rewards: every stored response scored again with another reward.

`rescore(run_dir, reward, name=None, progress=None)` scores each response of the run's rollout store
with `reward` and writes, in one transaction, each response's score beside it (the `rescore/<name>`
column of the store's rollouts) and each step's mean and std (its `rescores` table; `metrics.read`
shows them as `rescore/<name>/mean` and `rescore/<name>/std`). `reward` is one of:

- `rule`: 1 when the answer equals the reference (the training rule reward, with the run's reasoning
  setting: rescoring a rule run with it gives back its stored `reward/rule` part);
- `format`: the reasoning format reward (0 to 1.5);
- `py:MODULE:FUNCTION`: a Python function `f(prompts, responses, references) -> list of floats`, named
  by an admin in `MINIMIND_TRUSTED_REWARD_FUNCTIONS` (names separated by commas): only trusted code
  runs, as only trusted reward-model folders run their own code;
- a reward-model folder (a transformers folder, as the RL trainers' `--reward_model_path`): each response
  scored as the trainers score it (`trainer.rl.rewards.reward_model_scores`: clipped, blended with its
  answer's score under reasoning), so rescoring a reward-model run with its own folder gives back its
  stored `reward/reward_model` part.

The rule rewards are the trainers' own code (`trainer/rules/reward_rules.py`). A reward-model folder is
scored by the trainers' reward model in a process with torch, never in this one: `rescore` hands it to
`mmcore.workers.rescore_worker` (a child process, or the queued job itself, which passes its loader as
`load_folder`). `check` says, torch-free and before anything runs, whether a rescore can start.
"""
import importlib
import json
import math
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from mmcore.base.paths import ROOT
from trainer.rules import reward_rules
from trainer.rules import roots as trainer_roots
from trainer.rules.records import RESCORE_PREFIX, ROLLOUTS_FILE, ensure_schema

#: The Python reward functions an admin allows (`module:function`, separated by commas).
TRUSTED_FUNCTIONS_ENV = "MINIMIND_TRUSTED_REWARD_FUNCTIONS"
FUNCTION_PREFIX = "py:"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,48}$")
CHUNK = 4096  # responses scored (and progress told) at a time
MODEL_CHUNK = 64  # the same with a reward model (seconds a chunk on a CPU)
WORKER = "mmcore.workers.rescore_worker"  # the process with torch that scores with a reward-model folder
FOLDER_CONFIG = "config.json"  # what makes a folder a transformers model folder
SUMMARY_PREFIX = "summary: "  # the worker's last line with --summary: the summary as JSON
_PROGRESS = re.compile(r"^Epoch:\[1/1\]\((\d+)/(\d+)\)")


class RescoreError(ValueError):
    """A reward or a run that cannot be rescored, with the reason."""


def trusted_functions():
    return {name.strip() for name in os.environ.get(TRUSTED_FUNCTIONS_ENV, "").split(",") if name.strip()}


def _untrusted(target):
    return (f"{target} is not a trusted reward function: an admin lists the ones that may run in "
            f"{TRUSTED_FUNCTIONS_ENV} (module:function, separated by commas)")


def is_folder(spec):
    """Whether reward `spec` names a reward-model folder rather than a rule or a function."""
    spec = str(spec or "").strip()
    return bool(spec) and spec not in ("rule", "format") and not spec.startswith(FUNCTION_PREFIX)


def folder_problem(folder):
    """Why `folder` cannot be a reward model (missing, no transformers config, its own code not trusted),
    or None. Torch-free: the worker's loader (the trainers' `RewardModel`) checks the rest."""
    path = Path(folder)
    if not path.is_dir():
        return f"unknown reward {str(folder)!r}: rule, format, py:MODULE:FUNCTION or a reward-model folder (no folder there)"
    config = path / FOLDER_CONFIG
    if not config.is_file():
        return f"the reward-model folder {path} has no {FOLDER_CONFIG}: it must be a transformers model folder"
    try:
        needs_code = bool(json.loads(config.read_text(encoding="utf-8")).get("auto_map"))
    except (OSError, ValueError, AttributeError) as exc:
        return f"the reward-model folder's {config} cannot be read: {exc}"
    if needs_code and not trainer_roots.trusts_code(path):
        return (f"the reward-model folder {path} runs its own Python code (auto_map in its config), and it is not "
                f"among the folders an admin allowed to do that ({trainer_roots.TRUSTED_CODE_ENV})")
    return None


def _default_name(spec):
    if is_folder(spec):
        base = Path(str(spec).strip()).resolve().name
        return base if _NAME.match(base) else "reward_model"
    return None


def check(run_dir, reward, name=None):
    """(the reward as a job runs it: a folder made absolute; the name recorded) when the run in `run_dir` can
    be rescored with `reward` under `name`. Raises RescoreError with the reason otherwise. Torch-free, runs
    nothing: what an act asks before it queues a rescore."""
    if not (Path(run_dir) / ROLLOUTS_FILE).is_file():
        raise RescoreError(f"no rollout store in {run_dir}")
    spec = str(reward or "").strip()
    if is_folder(spec):
        if problem := folder_problem(spec):
            raise RescoreError(problem)
        spec = str(Path(spec).resolve())
        default = _default_name(spec)
    elif spec.startswith(FUNCTION_PREFIX):  # trusted or refused here; imported only where it runs
        target = spec[len(FUNCTION_PREFIX):]
        if target not in trusted_functions():
            raise RescoreError(_untrusted(target))
        default = target.rpartition(":")[2]
    else:
        default = reward_function(spec, 0)[0]
    name = (name or "").strip() or default
    if not _NAME.match(name):
        raise RescoreError(f"not a usable rescore name: {name!r} (letters, digits, '.', '_', '-'; up to 48)")
    return spec, name


def reward_function(spec, reasoning, load_folder=None):
    """(default name, `f(prompts, responses, references) -> list of floats`) of a reward `spec`; a folder
    is loaded by `load_folder(folder, reasoning) -> f` (a process with torch has one; without it a folder
    is refused here)."""
    spec = str(spec or "").strip()
    if is_folder(spec):
        if problem := folder_problem(spec):
            raise RescoreError(problem)
        if load_folder is None:
            raise RescoreError(f"a reward-model folder is scored in a process with torch ({WORKER})")
        return _default_name(spec), load_folder(spec, reasoning)
    if spec == "rule":
        return "rule", lambda prompts, responses, references: [
            reward_rules.rule_reward(r, ref, reasoning) for r, ref in zip(responses, references)]
    if spec == "format":
        return "format", lambda prompts, responses, references: [reward_rules.format_reward(r) for r in responses]
    if spec.startswith(FUNCTION_PREFIX):
        target = spec[len(FUNCTION_PREFIX):]
        if target not in trusted_functions():
            raise RescoreError(_untrusted(target))
        module, _, function = target.partition(":")
        try:
            fn = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as exc:
            raise RescoreError(f"cannot load the reward function {target}: {exc}") from None
        return function, fn
    raise RescoreError(f"unknown reward {spec!r}: rule, format, py:MODULE:FUNCTION or a reward-model folder")


def _std(values):
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))  # as torch's std, the trainers'


def rescore(run_dir, reward, name=None, progress=None, load_folder=None):
    """Score every stored response of the run in `run_dir` with `reward` (see the module docstring) and
    record the scores as `rescore/<name>` (default name: the reward's). `progress(done, total)` is told
    after each chunk. Returns {"name", "reward", "responses", "steps", "seconds", "per_step": [{"step",
    "mean", "std", "responses"}]}. Raises RescoreError for a bad reward or name, or a run without a store.
    A reward-model folder is scored by `load_folder` (see `reward_function`) or else in a child process
    (`mmcore.workers.rescore_worker`), so that this process never loads torch."""
    if is_folder(reward) and load_folder is None:
        return _in_child(run_dir, reward, name, progress)
    started = time.perf_counter()
    path = Path(run_dir) / ROLLOUTS_FILE
    if not path.is_file():
        raise RescoreError(f"no rollout store in {run_dir}")
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        default, fn = reward_function(reward, meta.get("reasoning") or 0, load_folder)
        chunk_size = MODEL_CHUNK if is_folder(reward) else CHUNK
        name = (name or default).strip()
        if not _NAME.match(name):
            raise RescoreError(f"not a usable rescore name: {name!r} (letters, digits, '.', '_', '-'; up to 48)")
        column = RESCORE_PREFIX + name
        rows = conn.execute("SELECT r.id, r.step, p.prompt, r.response, p.reference FROM rollouts r "
                            "JOIN prompts p ON p.id = r.prompt_id ORDER BY r.step, r.grp, r.idx").fetchall()
        scores = []
        for start in range(0, len(rows), chunk_size):
            chunk = rows[start:start + chunk_size]
            values = [float(v) for v in fn([r[2] for r in chunk], [r[3] for r in chunk], [r[4] for r in chunk])]
            if len(values) != len(chunk):
                raise RescoreError(f"{reward} gave {len(values)} scores for {len(chunk)} responses")
            scores += values
            if progress is not None:
                progress(len(scores), len(rows))
        by_step = {}
        for row, score in zip(rows, scores):
            by_step.setdefault(row[1], []).append(score)
        per_step = [{"step": step, "mean": sum(v) / len(v), "std": _std(v), "responses": len(v)}
                    for step, v in sorted(by_step.items())]
        ensure_schema(conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            if column not in {r[1] for r in conn.execute("PRAGMA table_info(rollouts)")}:
                conn.execute(f'ALTER TABLE rollouts ADD COLUMN "{column}" REAL')
            conn.execute(f'UPDATE rollouts SET "{column}" = NULL')
            conn.executemany(f'UPDATE rollouts SET "{column}" = ? WHERE id = ?',
                             [(score if math.isfinite(score) else None, row[0]) for row, score in zip(rows, scores)])
            conn.execute("DELETE FROM rescores WHERE name = ?", (name,))
            conn.executemany("INSERT INTO rescores (name, step, mean, std, responses) VALUES (?, ?, ?, ?, ?)",
                             [(name, s["step"], s["mean"], s["std"], s["responses"]) for s in per_step])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise RescoreError(f"cannot rescore {run_dir}: {exc}") from None
    finally:
        conn.close()
    return {"name": name, "reward": str(reward), "responses": len(rows), "steps": len(per_step),
            "seconds": round(time.perf_counter() - started, 3), "per_step": per_step}


def worker_argv(run_dir, reward, name=None, summary=False):
    """The command that rescores in a process with torch (the queued job's, and `_in_child`'s with `summary`)."""
    argv = [sys.executable, "-m", WORKER, str(Path(run_dir).resolve()), "--reward", str(reward)]
    if name:
        argv += ["--name", str(name)]
    return argv + (["--summary"] if summary else [])


def progress_line(done, total, started):
    """The worker's progress line: the form the Jobs page reads an export's progress from."""
    return f"Epoch:[1/1]({done}/{total}) elapsed_s: {time.monotonic() - started:.2f}"


def _in_child(run_dir, reward, name, progress):
    """`rescore` of a reward-model folder in a child process: its progress lines told to `progress`, its
    summary returned, its refusal raised as RescoreError."""
    spec, name = check(run_dir, reward, name)
    proc = subprocess.Popen(worker_argv(run_dir, spec, name, summary=True), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    summary = None
    for line in proc.stdout:
        if line.startswith(SUMMARY_PREFIX):
            summary = json.loads(line[len(SUMMARY_PREFIX):])
        elif (found := _PROGRESS.match(line)) and progress is not None:
            progress(int(found.group(1)), int(found.group(2)))
    errors = proc.stderr.read()
    if proc.wait() != 0 or summary is None:
        lines = [line for line in errors.splitlines() if line.strip()]
        raise RescoreError(lines[-1].removeprefix("error: ") if lines else f"the rescore stopped (exit {proc.returncode})")
    return summary


def rescores(run_dir):
    """Each step's rescore means and stds: a DataFrame with `global_step` and `rescore/<name>/mean|std`
    columns (empty without a store or rescores)."""
    import pandas as pd

    path = Path(run_dir) / ROLLOUTS_FILE
    if not path.is_file():
        return pd.DataFrame(columns=["global_step"])
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT name, step, mean, std FROM rescores ORDER BY step").fetchall()
    except sqlite3.OperationalError:  # a store from before rescores
        rows = []
    finally:
        conn.close()
    if not rows:
        return pd.DataFrame(columns=["global_step"])
    df = pd.DataFrame(rows, columns=["name", "global_step", "mean", "std"])
    wide = df.pivot(index="global_step", columns="name", values=["mean", "std"])
    wide.columns = [f"{RESCORE_PREFIX}{name}/{stat}" for stat, name in wide.columns]
    ordered = sorted(wide.columns, key=lambda c: (c.rsplit("/", 1)[0], c.endswith("/std")))
    return wide[ordered].reset_index()
