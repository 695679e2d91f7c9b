"""The per-prompt record of an RL run (PPO, GRPO, SPO): which training prompts carried its learning signal.

`prompts(run_dir)` reads the run's rollout store and gives one row per training prompt (held-out prompts
are not counted): `prompt_id`, `prompt`, `reference`, `times_seen` (its groups), `responses`,
`mean_reward`, `pass_rate` (share of its responses whose answer equals the reference), `zero_std_share`
(share of its groups whose rewards were all equal: no advantage within the group), `first_step`,
`last_step`, `no_advantage` (it never carried a learning signal: GRPO, every group of it had equal
rewards; PPO and SPO, which score one response against a value, no response had a non-zero advantage)
and `flag`:

- `always_right` / `always_wrong`: every response right / wrong;
- `learned`: wrong more often than not when first seen, right more often than not when last seen;
- `forgotten`: the other way round;
- `learnable`: the rest (right sometimes): the prompts worth training on.

`export(frame, path)` writes rows back as an RLAIF file (`{"conversations": [...]}` per line), the
format the RL trainers read.
"""
import json
import os
import sqlite3
from pathlib import Path

from trainer.rules.reward_rules import prompt_messages, rule_reward
from trainer.rules.records import ROLLOUTS_FILE

FLAGS = ("always_right", "always_wrong", "learned", "forgotten", "learnable")
COLUMNS = ("prompt_id", "prompt", "reference", "times_seen", "responses", "mean_reward", "pass_rate",
           "zero_std_share", "first_step", "last_step", "no_advantage", "flag")
#: An advantage this close to 0 carries no signal (GRPO's equal-reward groups give exactly 0).
NO_ADVANTAGE = 1e-6


class NoPromptRecord(LookupError):
    """The folder holds no rollout store."""


def _flag(first, last, passes, total):
    if passes == total:
        return "always_right"
    if passes == 0:
        return "always_wrong"
    if first < 0.5 <= last:
        return "learned"
    if last < 0.5 <= first:
        return "forgotten"
    return "learnable"


def prompts(run_dir):
    """The per-prompt record (see the module docstring), most-seen prompts first."""
    import pandas as pd

    path = Path(run_dir) / ROLLOUTS_FILE
    if not path.is_file():
        raise NoPromptRecord(f"no rollout store in {run_dir}")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        names = {row[1] for row in conn.execute("PRAGMA table_info(rollouts)")}
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        accuracy = ', r."accuracy"' if "accuracy" in names else ", NULL"
        rows = conn.execute(
            "SELECT r.prompt_id, p.prompt, p.reference, r.step, r.grp, r.reward, r.advantage, r.response"
            + accuracy + " FROM rollouts r JOIN prompts p ON p.id = r.prompt_id ORDER BY r.step, r.grp, r.idx"
        ).fetchall()
    finally:
        conn.close()
    reasoning, grouped = meta.get("reasoning") or 0, (meta.get("group_size") or 1) > 1
    by_prompt = {}
    for pid, prompt, reference, step, grp, reward, advantage, response, acc in rows:
        right = float(acc) if acc is not None else rule_reward(response, reference, reasoning)
        entry = by_prompt.setdefault(pid, {"prompt": prompt, "reference": reference, "groups": {}})
        entry["groups"].setdefault((step, grp), []).append((reward, advantage, right))
    out = []
    for pid, entry in by_prompt.items():
        groups = list(entry["groups"].items())  # in step order
        flat = [r for _, g in groups for r in g]
        passes = sum(right >= 1.0 for _, _, right in flat)
        first_group, last_group = groups[0][1], groups[-1][1]
        first = sum(right >= 1.0 for _, _, right in first_group) / len(first_group)
        last = sum(right >= 1.0 for _, _, right in last_group) / len(last_group)
        zero_std_share = sum(len({r for r, _, _ in g}) == 1 for _, g in groups) / len(groups)
        out.append({
            "prompt_id": pid, "prompt": entry["prompt"], "reference": entry["reference"], "times_seen": len(groups),
            "responses": len(flat), "mean_reward": sum(r for r, _, _ in flat) / len(flat),
            "pass_rate": passes / len(flat),
            "zero_std_share": zero_std_share, "first_step": groups[0][0][0], "last_step": groups[-1][0][0],
            "no_advantage": zero_std_share == 1.0 if grouped else all(
                a is None or abs(a) <= NO_ADVANTAGE for _, a, _ in flat),
            "flag": _flag(first, last, passes, len(flat))})
    df = pd.DataFrame(out, columns=list(COLUMNS))
    return df.sort_values(["times_seen", "prompt_id"], ascending=[False, True], kind="stable").reset_index(drop=True)


def export(frame, path):
    """Write the rows of `frame` (a `prompts` table) as an RLAIF jsonl file at `path` (a new file: an
    existing one is never overwritten); returns the number of rows written."""
    path = Path(path)
    lines = []
    for prompt, reference in zip(frame["prompt"], frame["reference"]):
        turns = [{"role": m["role"], "content": m["content"]} for m in prompt_messages(prompt)]
        lines.append(json.dumps({"conversations": turns + [{"role": "assistant", "content": reference}]},
                                ensure_ascii=False) + "\n")
    with open(path, "x", encoding="utf-8") as f:  # "x": refuses an existing file, so nothing is lost
        f.writelines(lines)
    return len(lines)


def export_error(path):
    """Why `path` cannot take an export (it exists, or its folder does not), or None."""
    path = Path(path)
    if path.exists():
        return f"{path} exists: the export writes a new file"
    if not path.parent.is_dir():
        return f"{path.parent} is not a folder"
    if not os.access(path.parent, os.W_OK):
        return f"{path.parent} is not writable"
    return None
