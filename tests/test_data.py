"""The Data page's wing (mmcore.data), torch-free: health scan, sources, sizing, rows, mask view, links,
and `python -m mmcore data check` end to end (one worker run on a crafted file)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mmcore.base.paths import ROOT
from mmcore.data import checkup, links, maskview, rows, sizing, sources
from mmcore.widgets import train_form

DEMO = ROOT / "dataset" / "demo"


def chat(*turns):
    return {"conversations": [{"role": r, "content": c} for r, c in turns]}


def write_jsonl(path, items):
    with open(path, "w", encoding="utf-8") as f:
        for item in items:
            f.write((item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)) + "\n")
    return path


BAD_SFT = [
    chat(("user", "hi"), ("assistant", "hello there")),
    chat(("user", "q"), ("assistant", "")),  # line 2: empty answer
    '{"conversations": [ broken',  # line 3: not JSON, in the middle
    chat(("assistant", "x"), ("user", "y")),  # line 4: role order
    chat(("user", "hi"), ("assistant", "hello there")),  # line 5: duplicate of line 1
    {"text": "pretraining text"},  # line 6: wrong format
    chat(("user", "long " * 200), ("assistant", "answer " * 50)),  # line 7: cut by a short max_seq_len
]


def test_health_lists_each_problem_with_its_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", BAD_SFT)
    result = checkup.scan(path, "sft")
    assert result["rows"] == 5 and result["lines"] == 7
    problems = result["problems"]
    assert [(p["line"], p["reason"].split(" (")[0]) for p in problems["bad"]] == [
        (3, "invalid JSON"), (6, 'missing key "conversations"')]
    assert [p["line"] for p in problems["empty_answer"]] == [2]
    assert [p["line"] for p in problems["role_order"]] == [4]
    assert problems["duplicate"] == [{"line": 5, "reason": "same as line 1"}]
    assert result["counts"]["missing_tags"] == 0  # not reasoning data: tags are not asked for
    assert result["counts"]["missing_tags_if_reasoning"] == 5
    assert "sft" in result["types"] and "grpo" not in result["types"]  # line 4 ends with a user turn


def test_dpo_identical_and_reasoning_tags(tmp_path):
    pair = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    other = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]
    path = write_jsonl(tmp_path / "dpo.jsonl", [{"chosen": pair, "rejected": other}, {"chosen": pair, "rejected": pair}])
    result = checkup.scan(path, "dpo")
    assert [p["line"] for p in result["problems"]["dpo_identical"]] == [2]
    tagged = "<think>\nsum\n</think>\n<answer>\n4\n</answer>"
    path = write_jsonl(tmp_path / "reason.jsonl", [chat(("user", "a"), ("assistant", tagged))] * 3
                       + [chat(("user", "b"), ("assistant", "4"))])
    result = checkup.scan(path, "sft")
    assert result["reasoning"] and [p["line"] for p in result["problems"]["missing_tags"]] == [4]


@pytest.mark.parametrize("name, kind", [("pretrain.jsonl", "pretrain"), ("sft.jsonl", "sft"), ("dpo.jsonl", "dpo"),
                                        ("reason.jsonl", "sft"), ("rlaif.jsonl", "sft")])
def test_detects_the_demo_files_kinds(name, kind):
    assert checkup.detect_file_kind(DEMO / name) == kind
    result = checkup.scan(DEMO / name, kind)
    assert result["counts"]["bad"] == 0


def test_rlaif_shaped_sft_is_read_by_rl_types():
    result = checkup.scan(DEMO / "rlaif.jsonl", "sft")
    assert {"sft", "grpo", "ppo", "spo"} <= set(result["types"])


def test_sources_refuse_bad_input_with_a_sentence(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "bin.jsonl").write_bytes(bytes(range(256)) * 10)
    (tmp_path / "dir.jsonl").mkdir()
    for name, words in (("empty.jsonl", "empty"), ("bin.jsonl", "binary"), ("dir.jsonl", "folder"),
                        ("gone.jsonl", "does not exist")):
        with pytest.raises(sources.DataFileError, match=words):
            sources.check(tmp_path / name)
    with pytest.raises(sources.DataFileError, match="outside the folders"):
        sources.check("/etc/hostname")
    assert sources.check("dataset/demo/sft.jsonl", base=ROOT) == DEMO / "sft.jsonl"
    assert sources.trainer_value(DEMO / "sft.jsonl") == "../dataset/demo/sft.jsonl"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path):
    path = write_jsonl(tmp_path / "locked.jsonl", BAD_SFT[:1])
    path.chmod(0)
    with pytest.raises(sources.DataFileError, match="cannot be read"):
        sources.check(path)


def test_upload_is_stored_in_the_roots_and_limited(tmp_path):
    path = sources.save_upload(b'{"text": "a"}\n', "../../evil name.jsonl", home=tmp_path)
    assert path.parent == sources.upload_folder(tmp_path, "user") and path.name == "evil_name.jsonl"
    assert sources.check(path, home=tmp_path) == path.resolve()
    with pytest.raises(sources.DataFileError):
        sources.save_upload(b"x", "a.exe", home=tmp_path)


def table(lengths, spans, kind="sft", total=None):
    """A TokenTable of single-sequence rows: lengths, and per row its trained spans."""
    n = len(lengths)
    flat = [(i, s, e) for i, row in enumerate(spans) for s, e in row]
    answer = [sum(e - s for s, e in row) for row in spans]
    return sizing.TokenTable(
        seq_line=np.arange(1, n + 1), seq_side=np.zeros(n, dtype=np.int8), seq_len=np.array(lengths),
        seq_prompt=np.array(lengths) - np.array(answer), seq_answer=np.array(answer),
        span_seq=np.array([f[0] for f in flat], dtype=np.int32), span_start=np.array([f[1] for f in flat]),
        span_end=np.array([f[2] for f in flat]), total_rows=total or n, kind=kind)


def test_sizing_figures_follow_from_the_spans():
    tab = table([10, 20, 40], [[(5, 10)], [(8, 12), (15, 20)], [(30, 40)]])
    f = sizing.figures(tab, 16)
    assert f["truncated_rows"] == 2  # rows of 20 and 40 tokens
    assert f["answer_tokens"] == 5 + 9 + 10
    assert f["answer_tokens_lost"] == 4 + 10  # (16..20) of row 2, all of row 3
    assert f["rows_without_trained_answer"] == 1
    assert f["trained_tokens_per_epoch"] == 5 + 5
    scaled = sizing.figures(table([10, 20, 40], [[(5, 10)], [(8, 12), (15, 20)], [(30, 40)]], total=30), 16)
    assert scaled["truncated_rows"] == 20 and not scaled["exact"]
    assert sizing.suggest_max_seq_len(tab, 99) % 8 == 0 and sizing.suggest_max_seq_len(tab, 99) >= 40
    assert sizing.steps_per_epoch(100, 16, 1) == (7, 7)
    assert sizing.steps_per_epoch(100, 16, 4, gpus=2) == (4, 1)


def test_rows_read_jump_and_search(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [chat(("user", f"question {i}"), ("assistant", "答案")) for i in range(5)])
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n" + json.dumps(chat(("user", "last"), ("assistant", "中文")), ensure_ascii=True) + "\n")
    assert [r.line for r in rows.read(path, 1, 3)] == [1, 2, 3]
    assert rows.line(path, 7).obj["conversations"][0]["content"] == "last"
    assert rows.line(path, 6) is None and rows.line(path, 99) is None
    found, _, whole = rows.search(path, "中文")  # found in a \\u-escaped line too
    assert [r.line for r in found] == [7] and whole
    assert [r.line for r in rows.search(path, "QUESTION 3")[0]] == [4]


def test_mask_view_marks_trained_context_and_cut():
    seq = {"ids": [1, 2, 3, 4], "tokens": ["<a>", "b", "\n", "d"], "trained": [False, True, True, False], "kept": 3}
    assert maskview.classes(seq) == ["context", "trained", "trained", "cut"]
    html = maskview.to_html(seq)
    assert html.count('data-mask="trained"') == 2 and "&lt;a&gt;" in html and "data-cut" in html
    rl = {"ids": [1, 2, 3], "tokens": ["a", "b", "c"], "trained": [False] * 3, "kept": 2, "keep_end": True}
    assert maskview.classes(rl) == ["cut", "context", "context"]


def test_train_link_fills_the_form_once():
    query = links.train_params("../dataset/demo/sft.jsonl", "sft", 256)
    state = {}
    assert train_form.take_data_link(state, query) == "../dataset/demo/sft.jsonl"
    assert query == {}  # applied once
    assert state[train_form.TYPE_KEY] == "sft"
    form = train_form.read_form(state, "sft")
    assert form["data_path"] == "../dataset/demo/sft.jsonl" and form["max_seq_len"] == "256"
    assert train_form.take_data_link(state, {"data": "x", "type": "nonsense"}) is None


def test_train_link_from_a_demo_file_opens_the_demo_preset(tmp_path):
    """A bundled demo file opens the demo sizes (tiny model, demo weights folder), as Demo preset does;
    named by its absolute path too. Another file keeps the form as it was."""
    from mmcore.base.paths import TRAINER_DIR
    from mmcore.train import preset_table
    demo = (TRAINER_DIR / preset_table.DEMO_DIR / "rlaif.jsonl").resolve()
    state = {}
    assert train_form.take_data_link(state, links.train_params(demo, "grpo", 96)) == str(demo)
    form = train_form.read_form(state, "grpo")
    preset = preset_table.demo_preset("grpo")
    for name in ("hidden_size", "save_dir", "weight_dir", "dtype", "reward_model_path"):
        assert form[name] == preset[name], name
    assert float(form["learning_rate"]) == float(preset["learning_rate"])
    assert form["data_path"] == str(demo) and form["max_seq_len"] == "96"
    assert links.is_demo_file("../dataset/demo/sft.jsonl") and not links.is_demo_file(str(tmp_path / "x.jsonl"))
    other = {}
    train_form.take_data_link(other, links.train_params(tmp_path / "x.jsonl", "grpo", 96))
    assert train_form.read_form(other, "grpo")["hidden_size"] == "512"


def test_train_preflight_points_to_the_data_page(tmp_path):
    path = write_jsonl(tmp_path / "wrong.jsonl", [{"text": "pretraining, not sft"}])
    assert links.data_problem("sft", str(path))
    assert not links.data_problem("pretrain", str(path))
    assert not links.data_problem("sft", str(tmp_path / "missing.jsonl"))  # preflight says "missing" itself
    assert links.data_page_params(str(path)) == {"file": str(path)}


def test_cli_data_check_json_and_exit_codes(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", BAD_SFT)
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(tmp_path / "home")}
    run = subprocess.run([sys.executable, "-m", "mmcore", "data", "check", str(path), "--type", "sft",
                          "--max_seq_len", "64", "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=240, check=False)
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert report["kind"] == "sft" and report["rows"] == 5
    assert [b["line"] for b in report["bad_rows"]] == [3, 6]
    assert all(b["reason"] for b in report["bad_rows"])
    assert report["truncated_rows"] == 1 and report["answer_tokens_lost"] > 0
    assert report["problems"]["role_order"][0]["line"] == 4
    # Bad input: a sentence on stderr, exit 2, no traceback.
    (tmp_path / "zero.jsonl").write_bytes(b"")
    for bad in (tmp_path / "zero.jsonl", "/etc/hostname"):
        run = subprocess.run([sys.executable, "-m", "mmcore", "data", "check", str(bad)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 2 and "Traceback" not in run.stderr and run.stderr.strip()


def test_members_upload_data_files_viewers_may_not(tmp_path, monkeypatch):
    from _runner_helpers import home_with_roles

    from mmcore.access import audit
    from mmcore.actions import data_acts

    home = home_with_roles(tmp_path, monkeypatch, bob="member", vic="viewer")
    assert data_acts.upload_data(home, b'{"text": "a"}\n', "a.jsonl", user="vic").refused
    assert data_acts.upload_refusal("vic") and not data_acts.upload_refusal("bob")
    done = data_acts.upload_data(home, b'{"text": "a"}\n', "a.jsonl", user="bob")
    assert done.done and done.value == sources.upload_folder(home, "bob") / "a.jsonl"
    assert done.value.resolve() in sources.candidates(home)
    assert [(e.user, e.action) for e in audit.entries(home=home)][:1] == [("bob", "upload")]


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_a_scan_in_chunks_merges_to_the_whole_files_scan(tmp_path, parts):
    """The worker scans big files in parallel chunks: merged, they say what one pass says (duplicates
    across chunks, line numbers, counts)."""
    path = write_jsonl(tmp_path / "bad.jsonl", BAD_SFT * 4)
    whole = checkup.scan(path, "sft")
    pieces = [checkup.scan_range(path, "sft", a, b) for a, b in checkup.chunks(path, parts)]
    merged = pieces[0]
    for piece in pieces[1:]:
        merged.absorb(piece.state())
    assert merged.result() == whole
    assert whole["counts"]["duplicate"] == 20 - 4  # 20 valid rows, 4 distinct ones (line 5 repeats line 1)


def test_the_workers_parallel_health_pass_and_its_sample(tmp_path):
    from mmcore.workers import data_worker

    path = write_jsonl(tmp_path / "bad.jsonl", BAD_SFT * 6)
    valid = [i for i in range(1, 43) if (i - 1) % 7 + 1 not in (3, 6)]
    result, lines = data_worker.health_pass(str(path), "sft", 0, str(tmp_path / "rows"), lambda done: None, 3)
    assert result == checkup.scan(path, "sft") and lines == valid
    kept = (tmp_path / "rows").read_text().splitlines()
    assert kept == [json.dumps(BAD_SFT[(i - 1) % 7]) for i in valid]
    result, lines = data_worker.health_pass(str(path), "sft", 10, str(tmp_path / "rows"), lambda done: None, 3)
    assert 8 <= len(lines) <= 12 and set(lines) <= set(valid) and lines == sorted(lines)


def test_time_per_epoch_from_a_finished_run(tmp_path, monkeypatch):
    from test_page_records import recorded_job

    from mmcore.data import estimates
    from mmcore.jobs.jobstore import JobStore

    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    store = JobStore()
    assert estimates.epoch_estimates("grpo", 1000, store) == []
    job_id = recorded_job(store)  # 24 samples in its metrics stream
    (found,) = estimates.epoch_estimates("grpo", 1000, store)
    assert found["job"] == job_id and found["epoch_s"] == pytest.approx(1000 / found["samples_per_s"], rel=0.01)
    assert estimates.epoch_estimates("sft", 1000, store) == []
