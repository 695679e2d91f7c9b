"""The per-prompt record of an RL run (mmcore.runs.prompt_record, `python -m mmcore prompts`): one row per
training prompt with its flag, the prompts that never carried a signal marked, and an export the trainers'
dataset reads back to the same prompts."""
import contextlib
import io
import json
import os

import pytest
from _runner_helpers import home_with_roles
from transformers import AutoTokenizer

from dataset.lm_dataset import RLAIFDataset
from mmcore import api, cli, rollouts
from mmcore.access import audit
from mmcore.actions import run_acts
from mmcore.actions.core import PAGE
from mmcore.runs import prompt_record
from trainer.rl import losses, rewards
from trainer.rules import roots as trainer_roots
from trainer.rules.records import RunRecords

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RIGHT = "<think>\nok\n</think>\n<answer>\n{}\n</answer>"
WRONG = "<think>\nok\n</think>\n<answer>\n0\n</answer>"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(os.path.join(ROOT, "model"))


def chat(tokenizer, question):
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)


def write(run_dir, tokenizer):
    """Three steps of two groups of 4: prompt `easy` always right, `grown` wrong then right, `mixed` half
    and half every time, `hard` always wrong; rewards and advantages from the trainers' own functions."""
    prompts = {q: (chat(tokenizer, q), ref) for q, ref in (("1+1=?", "2"), ("2+2=?", "4"), ("3+3=?", "6"),
                                                           ("4+4=?", "8"))}
    plan = {1: [("1+1=?", 4), ("2+2=?", 0)], 2: [("3+3=?", 2), ("4+4=?", 0)], 3: [("2+2=?", 4), ("3+3=?", 2)]}
    functions = rewards.reward_functions(1)
    records = RunRecords(run_dir, "grpo", rollouts=True, meta={"group_size": 4, "reasoning": 1})
    for step, groups in plan.items():
        rows = [(prompts[q], RIGHT.format(prompts[q][1]) if i < right else WRONG) for q, right in groups
                for i in range(4)]
        total, parts = rewards.score(functions, [p for (p, _), _ in rows], [r for _, r in rows],
                                     [ref for (_, ref), _ in rows])
        advantages, _ = losses.group_advantages(total, 4)
        records.add_rollouts(step, 0, [[{
            "prompt": rows[k][0][0], "reference": rows[k][0][1], "response": rows[k][1], "reward": float(total[k]),
            "advantage": float(advantages[k]), "length": 9, "truncated": False,
            "parts": {n: float(v[k]) for n, v in parts.items()},
            "extras": {"accuracy": rewards.rule_reward(rows[k][1], rows[k][0][1], 1)}}
            for k in range(g * 4, g * 4 + 4)] for g in range(2)])
    records.close()
    return prompts


def test_one_row_per_prompt_with_its_flag(tmp_path, tokenizer):
    write(tmp_path / "run", tokenizer)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["prompts", str(tmp_path / "run"), "--json"]) == 0
    rows = {json.loads(r["reference"]): r for r in json.loads(out.getvalue())}
    assert len(rows) == rollouts.counts(tmp_path / "run")[2] == 4
    assert all(0 <= r["pass_rate"] <= 1 for r in rows.values())
    assert {ref: r["flag"] for ref, r in rows.items()} == {2: "always_right", 4: "learned", 6: "learnable",
                                                            8: "always_wrong"}
    assert {ref: r["times_seen"] for ref, r in rows.items()} == {2: 1, 4: 2, 6: 2, 8: 1}
    assert rows[4]["pass_rate"] == 0.5 and rows[4]["first_step"] == 1 and rows[4]["last_step"] == 3
    # Every prompt whose groups all had equal rewards never carried a signal, and is marked so ("2+2" went
    # from a group all wrong to a group all right: learned between its groups, never within one).
    assert {ref: r["no_advantage"] for ref, r in rows.items()} == {2: True, 4: True, 6: False, 8: True}
    assert {ref: r["zero_std_share"] for ref, r in rows.items()} == {2: 1.0, 4: 1.0, 6: 0.0, 8: 1.0}


def test_export_writes_a_file_the_trainers_read(tmp_path, tokenizer):
    prompts = write(tmp_path / "run", tokenizer)
    target = tmp_path / "next.jsonl"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["prompts", str(tmp_path / "run"), "--export", str(target), "--keep", "learnable",
                         "learned"]) == 0
    data = RLAIFDataset(str(target), tokenizer, max_length=64)
    read = sorted((data[i]["prompt"], data[i]["answer"]) for i in range(len(data)))
    assert read == sorted([prompts["2+2=?"], prompts["3+3=?"]])
    # An existing file is never overwritten (the act refuses: exit 1); an unknown flag is a usage error;
    # both change nothing.
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert cli.main(["prompts", str(tmp_path / "run"), "--export", str(target)]) == 1
    assert "exists" in err.getvalue()
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        cli.main(["prompts", str(tmp_path / "run"), "--export", str(tmp_path / "x.jsonl"), "--keep", "bogus"])
    assert not (tmp_path / "x.jsonl").exists() and len(RLAIFDataset(str(target), tokenizer, 64)) == 2


def test_a_folder_without_a_store_says_so(tmp_path):
    with pytest.raises(prompt_record.NoPromptRecord):
        prompt_record.prompts(tmp_path)


def test_export_goes_through_the_act_inside_the_write_roots(tmp_path, tokenizer, monkeypatch):
    """The export is the act `run_acts.export_prompts` at every door (CLI, API, page): a path outside the
    write roots (`..`, absolute elsewhere, a symlink out) is refused with the roots' message and writes
    nothing; a path inside writes the file and leaves one audit row."""
    write(tmp_path / "run", tokenizer)
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "work").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    home = home_with_roles(tmp_path, monkeypatch, mia="member", vic="viewer")
    monkeypatch.setenv(trainer_roots.WRITE_ENV, str(root))
    monkeypatch.chdir(root / "work")
    run = str(tmp_path / "run")
    for path in ("../../outside/up.jsonl", str(outside / "abs.jsonl"), "../link/via_link.jsonl"):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            assert cli.main(["prompts", run, "--export", path, "--user", "mia"]) == 1, path
        assert "is outside the folders a job may write to" in err.getvalue(), path
        with pytest.raises(api.Refused, match="outside the folders"):
            api.export_prompts(run, path, user="mia")
        assert run_acts.export_prompts(run, path, user="mia", entry=PAGE, home=home).refused
    assert list(outside.iterdir()) == [] and sorted(p.name for p in (root / "work").iterdir()) == []
    kept = audit.refusals(home=home)
    assert {r.entry for r in kept} == {"cli", "api", "page"} and {r.action for r in kept} == {"prompts_export"}
    assert audit.entries(home=home) == []
    # A viewer may not write files; a member may, inside the roots, and the act is recorded once.
    assert run_acts.export_prompts(run, "ok.jsonl", user="vic", entry=PAGE, home=home).refused
    assert not (root / "work" / "ok.jsonl").exists()
    assert api.export_prompts(run, "ok.jsonl", keep=["learnable", "learned"], user="mia") == 2
    assert len((root / "work" / "ok.jsonl").read_text().splitlines()) == 2
    [row] = audit.entries(home=home)
    assert row.action == "prompts_export" and row.detail["result"]["rows"] == 2
