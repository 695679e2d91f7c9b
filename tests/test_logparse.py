"""Tests of the incremental log parser (mmcore.logs.log_parser) on every log format and on noisy logs."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mmcore.jobs import progress
from mmcore.logs import log_parser, logfiles, logheader
from mmcore.logs.log_parser import LogParser, parse_file
from mmcore.logs.logfiles import tail
from mmcore.logs.loglines import INDEX_COLUMNS

DATA = Path(__file__).parent / "data" / "logs"
ROOT = Path(__file__).resolve().parent.parent


def new_records(parser):
    """What one `update()` added, as dicts: what a page reads after each refresh."""
    before = len(parser)
    parser.update()
    return parser.records_from(0 if parser.restarted else before)


def write(path, text, mode="w"):
    with open(path, mode, encoding="utf-8", newline="") as f:
        f.write(text)


# -- formats ---------------------------------------------------------------------------------------

def test_upstream_pretrain_log():
    df = parse_file(DATA / "upstream_pretrain.log")
    # The 400th step was drawn over by a tqdm bar (`\r`) and is not on screen: no record.
    assert df["step"].tolist() == [100, 200, 300, 100]
    assert df["epoch"].tolist() == [1, 1, 1, 2]
    assert df["total_epochs"].tolist() == [2, 2, 2, 2]
    assert df["total_steps"].tolist() == [44160] * 4
    assert df["global_step"].tolist() == [100, 200, 300, 44160 + 100]
    assert list(df.columns) == [*INDEX_COLUMNS, "loss", "lr", "epoch_Time"]
    assert df["loss"].tolist() == [8.896761, 7.123456, 6.5, 3.25]
    assert df["lr"].tolist() == [0.000549999999, 0.000549, 8e-08, 0.0001]
    assert df["epoch_Time"].tolist() == [332.0, 330.0, 328.5, 100.0]  # remaining minutes


def test_upstream_header():
    parser = LogParser(DATA / "upstream_pretrain.log")
    parser.update()
    assert parser.header == {
        "type": "pretrain", "source": "upstream",
        "command": "python ../trainer/train_pretrain.py --epochs 2 --batch_size 32 --learning_rate 0.0005"}
    assert parser.errors == []
    assert parser.kind == "progress"


def test_grpo_log_with_appended_fields_and_header():
    parser = LogParser(DATA / "dashboard_grpo.log")
    records = new_records(parser)
    assert [r["step"] for r in records] == [3, 4, 5]  # the resume notice is no record
    first = records[0]
    assert first == {"epoch": 1, "total_epochs": None, "step": 3, "total_steps": 10, "global_step": 3,
                     "Actor Loss": 0.012345, "Reward": 0.5123, "Avg Response Len": 88.0, "LR": 8e-08,
                     "Reward Std": 0.1, "KL": 0.0012}
    assert records[1]["Actor Loss"] == -1.5
    assert "Reward" not in records[1]  # printed as nan
    assert records[1]["KL"] == math.inf
    assert records[2]["Actor Loss"] == 0.000549999999
    assert parser.header == {
        "job_id": 12, "type": "grpo", "name": "demo grpo run", "source": "dashboard",
        "command": "python ../trainer/train_grpo.py --beta 0.02 --num_generations 8 --reasoning 1"
                   " --reward_model_path ../../internlm2-1_8b-reward",
        "cwd": "/srv/minimind/trainer", "started": "2026-12-02T10:00:00+00:00",
        "finished": "succeeded", "exit_code": 0, "finished_at": "2026-12-02T10:05:00+00:00"}

    df = parser.frame()
    assert list(df.columns) == [*INDEX_COLUMNS, "Actor Loss", "Reward", "Avg Response Len", "LR", "Reward Std", "KL"]
    assert df["total_epochs"].isna().all()
    assert math.isnan(df["Reward"][1]) and df["KL"][1] == math.inf


def test_every_format_in_one_log():
    df = parse_file(DATA / "dashboard_spo_ppo.log")
    assert df["step"].tolist() == [1, 2, 10, 100, 3]
    assert df["total_steps"].tolist() == [4, 4, 500, 1000, 4]
    assert df["total_epochs"].tolist()[2:4] == [6, 1]
    # SPO
    assert df.loc[0, ["Baseline", "Rho", "Avg Response Len", "LR"]].tolist() == [0.5, 0.9, 10.0, 1e-07]
    # PPO
    assert df.loc[1, ["Critic Loss", "KL_ref", "Actor LR", "Critic LR"]].tolist() == [0.3, 0.002, 8e-08, 8e-08]
    assert math.isnan(df.loc[1, "Baseline"])
    # distillation and the newer upstream format (comma separated, `name: value`)
    assert df.loc[2, ["loss", "ce", "distill", "lr", "epoch_Time"]].tolist() == [2.1, 1.9, 2.3, 5e-06, 3.0]
    assert df.loc[3, ["loss", "logits_loss", "aux_loss", "lr", "epoch_time"]].tolist() == [2.3456, 2.3, 0.0456, 0.0005, 3.0]
    # an old SPO line without the epoch: epoch 1
    assert df.loc[4, ["epoch", "global_step", "Loss", "Reward", "Rho"]].tolist() == [1, 3, 0.1234, 0.5, 0.9]


def test_noise_never_becomes_a_record(tmp_path):
    log = tmp_path / "noise.log"
    write(log, "\n".join([
        "Epoch [1/1]: 跳过前100个step，从 step 101 开始",
        "Epoch: starting",
        "warning: Epoch:[x/2](1/10) loss:1",
        " 45%|####5     | 45/100 [00:10<00:12,  4.50it/s]",
        "\x1b[1;31mSome red text\x1b[0m loss: 5",
        "Epoch:[1/2](1/10) loss:1.5\rEpoch:[1/2](2/10) loss:2.5",  # only the text after the last \r
        "Epoch:[1/2](3/10) loss:3.5\r 30%|###",                   # drawn over: gone
        "Step: 5/10 is not at the start: Epoch missing",
        "Traceback (most recent call last):",
        "  File \"x.py\", line 3, in <module>",
        "    Logger(f'Epoch:[{epoch + 1}/{args.epochs}]({step}/{iters}) loss:{loss:.3f}')",
        "ZeroDivisionError: division by zero",
        "Epoch:[1/2](4/10) loss:4.5\r",  # a trailing \r (\r\n endings) is no rewrite
        "2026-12-02 10:00:01 [rank0]: Epoch:[1/2](5/10) loss:5.5",  # a prefix before the head is fine
    ]) + "\n")
    df = parse_file(log)
    assert df["step"].tolist() == [2, 4, 5]
    assert df["loss"].tolist() == [2.5, 4.5, 5.5]


def test_crlf_and_ansi_inside_progress_lines(tmp_path):
    log = tmp_path / "crlf.log"
    write(log, "Epoch:[1/1](1/3) loss:1.0 lr:0.1\r\n"
               "Epoch:[1/1](2/3) \x1b[1mloss:\x1b[0m2.0 lr:0.2\r\n"
               "\x1b[32mEpoch:[1/1](3/3) loss:3.0 lr:0.3\x1b[0m\r\n")
    df = parse_file(log)
    assert df["loss"].tolist() == [1.0, 2.0, 3.0]
    assert df["lr"].tolist() == [0.1, 0.2, 0.3]


def test_lines_of_one_shape_with_varying_text(tmp_path):
    """Padded numbers, numbers outside `name: value`, names with digits and repeated names."""
    log = tmp_path / "shapes.log"
    write(log, "".join([
        "Epoch:[1/1](1/9) loss:  1.2345 lr: 0.1\n",
        "Epoch:[1/1](2/9) loss: 12.3456 lr: 0.1\n",
        "Epoch:[1/1](3/9) loss:123.4567 lr: 0.1\n",
        "Epoch:[1/1](4/9), loss: 1.0, GPU mem: 1.23/4.56 GB\n",
        "Epoch:[1/1](5/9), loss: 2.0, GPU mem: 1.50/7.89 GB\n",
        "Epoch:[1/1](6/9), top1_acc: 0.5\n",
        "Epoch:[1/1](7/9), top2_acc: 0.7\n",
        "Epoch:[1/1](8/9), loss: 1.0, loss: 2.0\n",
        "Epoch:[1/1](9/9), step: 42, Reward: +0.5, x: .5, y: 3., z: Infinity, w: -inf\n",
    ]))
    df = parse_file(log)
    assert df["step"].tolist() == list(range(1, 10))
    assert df["loss"].tolist()[:5] == [1.2345, 12.3456, 123.4567, 1.0, 2.0]
    assert df["GPU mem"].tolist()[3:5] == [1.23, 1.5]
    assert df["top1_acc"][5] == 0.5 and math.isnan(df["top1_acc"][6])
    assert df["top2_acc"][6] == 0.7 and math.isnan(df["top2_acc"][5])
    assert df["loss"][7] == 2.0  # the last of a repeated name counts
    last = df.iloc[8]
    assert last["step"] == 9 and last["step (printed)"] == 42  # no clash with the index column
    assert (last["Reward"], last["x"], last["y"], last["z"], last["w"]) == (0.5, 0.5, 3.0, math.inf, -math.inf)


def test_same_result_whatever_the_block_size(tmp_path, monkeypatch):
    lines = []
    for i in range(1, 400):
        lines.append(f"Epoch:[1/2]({i}/400) loss:{i / 7:.6f} lr:{i * 1e-6:.12f} epoch_Time:{i}.0min:")
        if i % 3 == 0:
            lines.append(f"Epoch: 1, Step: {i}/400, Actor Loss: {i / 9:.6f}, Reward: {i / 11:.6f}")
        if i % 5 == 0:
            lines.append(f" {i}%|##| \x1b[33mwarn\x1b[0m\rnoise {i}")
        if i % 50 == 0:
            lines.append("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'")
    log = tmp_path / "blocks.log"
    write(log, "\n".join(lines) + "\n")
    whole = parse_file(log)
    monkeypatch.setattr(log_parser, "READ_BLOCK", 97)  # lines straddle every block boundary
    parser = LogParser(log)
    parser.update()
    pd.testing.assert_frame_equal(parser.frame(), whole)
    assert len(whole) == 399 + 133
    assert parser.errors == ["Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'"] * 7


# -- header and errors -------------------------------------------------------------------------------

def test_traceback_is_the_last_error_and_no_progress_kind():
    parser = LogParser(DATA / "dashboard_failed.log")
    assert new_records(parser) == []
    assert parser.kind == "no_progress"
    assert parser.header["finished"] == "failed" and parser.header["exit_code"] == 1
    assert parser.errors == [
        "Traceback (most recent call last):\n"
        "  File \"/srv/minimind/trainer/train_full_sft.py\", line 120, in <module>\n"
        "    train_ds = SFTDataset(args.data_path, tokenizer, max_length=args.max_seq_len)\n"
        "               " + "^" * 66 + "\n"
        "dataset.lm_dataset.DataFormatError: ../dataset/bad.jsonl line 3: not valid JSON"]
    assert parser.last_error.endswith("not valid JSON")


def test_argparse_error_line():
    parser = LogParser(DATA / "argparse_error.log")
    parser.update()
    assert parser.errors == ["train_pretrain.py: error: argument --epochs: invalid int value: 'two'"]
    assert parser.header["exit_code"] == 2


def test_error_lines_and_chained_and_prefixed_tracebacks(tmp_path):
    log = tmp_path / "errors.log"
    write(log, "\n".join([
        "Error: data file ../dataset/x.jsonl not found",
        "ValueError: not an error line by itself",
        "    error: indented, part of something else",
        "Traceback (most recent call last):",
        "  File \"a.py\", line 1, in <module>",
        "KeyError: 'a'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "[rank0]: Traceback (most recent call last):",
        "Epoch:[1/1](1/2) loss:1.0",   # another process's line in the middle
        "[rank0]:   File \"b.py\", line 2, in <module>",
        "[rank0]: RuntimeError: boom",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1)",
    ]) + "\n")
    parser = LogParser(log)
    parser.update()
    assert parser.errors == [
        "Error: data file ../dataset/x.jsonl not found",
        "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'a'",
        "Traceback (most recent call last):\n  File \"b.py\", line 2, in <module>\nRuntimeError: boom",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1)",
    ]
    assert len(parser) == 1


def test_only_the_last_errors_are_kept(tmp_path):
    log = tmp_path / "many.log"
    write(log, "".join(f"Error: number {i}\n" for i in range(100)))
    parser = LogParser(log)
    parser.update()
    assert parser.errors == [f"Error: number {i}" for i in range(100 - logheader.MAX_ERRORS, 100)]


def test_not_a_minimind_log():
    parser = LogParser(DATA / "not_minimind.log")
    parser.update()
    assert parser.kind == "unknown" and len(parser) == 0
    upstream = LogParser(DATA / "upstream_pretrain.log")
    upstream.update()
    assert upstream.kind == "progress" and upstream.header["source"] == "upstream"


def test_missing_and_empty_files(tmp_path):
    parser = LogParser(tmp_path / "nope.log")
    assert new_records(parser) == [] and parser.kind == "missing"
    with pytest.raises(FileNotFoundError, match="nope.log"):
        parse_file(tmp_path / "nope.log")
    (tmp_path / "empty.log").write_bytes(b"")
    parser = LogParser(tmp_path / "empty.log")
    parser.update()
    assert parser.kind == "empty"
    assert list(parse_file(tmp_path / "empty.log").columns) == list(INDEX_COLUMNS)


# -- incremental reading -------------------------------------------------------------------------------

def test_incremental_reads_with_partial_lines(tmp_path):
    log = tmp_path / "live.log"
    write(log, "# job 1 · type pretrain · live\nEpoch:[1/1](1/4) loss:4.0\nEpoch:[1/1](2/4) lo")
    parser = LogParser(log)
    assert [r["step"] for r in new_records(parser)] == [1]
    position = parser.position
    assert new_records(parser) == []  # nothing new: the partial line waits for its newline
    assert parser.position == position
    write(log, "ss:3.0\nEpoch:[1/1](3/4) loss:2.0\n", "a")
    assert [(r["step"], r["loss"]) for r in new_records(parser)] == [(2, 3.0), (3, 2.0)]
    write(log, "Epoch:[1/1](4/4) loss:1.0\n", "a")
    assert [r["step"] for r in new_records(parser)] == [4]
    assert [r["step"] for r in parser.records] == [1, 2, 3, 4]
    assert parser.position == log.stat().st_size
    assert not parser.restarted


def test_live_tqdm_bar_without_newline_is_not_reread(tmp_path):
    log = tmp_path / "bar.log"
    write(log, "Epoch:[1/1](1/2) loss:1.0\n" + "".join(f"\r {i}%|###" for i in range(200)))
    parser = LogParser(log)
    parser.update()
    # Everything before the bar's last \r is overwritten on screen: the next read starts after it.
    assert log.stat().st_size - parser.position == len(" 199%|###")
    write(log, "\rEpoch:[1/1](2/2) loss:0.5\n", "a")
    assert [r["step"] for r in new_records(parser)] == [2]


def test_overlong_line_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(log_parser, "MAX_LINE", 1000)
    monkeypatch.setattr(log_parser, "READ_BLOCK", 512)
    log = tmp_path / "junk.log"
    write(log, "Epoch:[1/1](1/2) loss:1.0\n" + "x" * 5000 + "Epoch:[1/1](9/9) loss:9\nEpoch:[1/1](2/2) loss:2.0\n")
    parser = LogParser(log)
    parser.update()
    assert [r["step"] for r in parser.records] == [1, 2]


def test_truncated_file_is_read_again(tmp_path):
    log = tmp_path / "trunc.log"
    write(log, "Epoch:[1/1](1/3) loss:1.0\nEpoch:[1/1](2/3) loss:2.0\n")
    parser = LogParser(log)
    assert len(new_records(parser)) == 2
    write(log, "Epoch:[1/1](1/3) loss:5.0\n")  # smaller than before
    records = new_records(parser)
    assert parser.restarted
    assert [(r["step"], r["loss"]) for r in records] == [(1, 5.0)]
    assert len(parser.records) == 1


def test_replaced_file_is_read_again(tmp_path):
    log = tmp_path / "replaced.log"
    write(log, "Epoch:[1/1](1/3) loss:1.0\n")
    parser = LogParser(log)
    parser.update()
    new = tmp_path / "new.log"
    write(new, "# job 2 · type sft · again\nEpoch:[1/2](1/3) loss:7.0\nEpoch:[1/2](2/3) loss:6.0\n")
    os.replace(new, log)  # another inode, larger than the old file
    records = new_records(parser)
    assert parser.restarted
    assert [r["loss"] for r in records] == [7.0, 6.0]
    assert parser.header["job_id"] == 2


def test_rewritten_in_place_with_other_first_bytes(tmp_path):
    log = tmp_path / "rewritten.log"
    write(log, "Epoch:[1/1](1/3) loss:1.0\n")
    parser = LogParser(log)
    parser.update()
    with open(log, "r+", encoding="utf-8") as f:  # same inode, now bigger, other content
        f.write("Epoch:[1/1](1/3) loss:8.0\nEpoch:[1/1](2/3) loss:9.0\n")
    records = new_records(parser)
    assert parser.restarted
    assert [r["loss"] for r in records] == [8.0, 9.0]


def test_state_round_trip_reads_only_new_bytes(tmp_path):
    log = tmp_path / "state.log"
    write(log, "# job 5 · type dpo · saved\nEpoch:[1/1](1/3) loss:1.0\n"
               "Traceback (most recent call last):\n  File \"x.py\", line 9, in f\n")
    parser = LogParser(log)
    parser.update()
    state = json.loads(json.dumps(parser.state()))  # JSON-able
    write(log, "OSError: disk full\nEpoch:[1/1](2/3) loss:2.0\n", "a")
    restored = LogParser(log, state=state)
    assert [r["step"] for r in new_records(restored)] == [2]  # only what came after the saved position
    assert restored.header["job_id"] == 5
    assert restored.errors == ["Traceback (most recent call last):\n  File \"x.py\", line 9, in f\nOSError: disk full"]


def test_open_traceback_is_reported_while_being_written(tmp_path):
    log = tmp_path / "tb.log"
    write(log, "Traceback (most recent call last):\n  File \"x.py\", line 9, in f\n")
    parser = LogParser(log)
    parser.update()
    assert parser.errors == ["Traceback (most recent call last):\n  File \"x.py\", line 9, in f"]


# -- tail, helpers -------------------------------------------------------------------------

def test_epochs_from_a_logged_command():
    assert logheader.epochs_from_command("python train.py --epochs 3 --x 1") == 3


def test_tail_reads_the_end(tmp_path):
    log = tmp_path / "tail.log"
    lines = [f"line {i}" for i in range(1000)]
    lines[-2] = "\x1b[31mred\x1b[0m 10%|#\r 20%|##"
    write(log, "\n".join(lines) + "\npartial")
    assert tail(log, 3, block=64) == [" 20%|##", "line 999", "partial"]
    assert tail(log, 1) == ["partial"]
    assert tail(log, 2000, block=100)[0] == "line 0"
    assert tail(log, 0) == []
    with pytest.raises(FileNotFoundError):
        tail(tmp_path / "missing.log")


def test_save_upload(tmp_path):
    path = logfiles.save_upload(b"Epoch:[1/1](1/1) loss:1.0\n", "../../etc/my run.log", folder=tmp_path)
    assert path.parent == tmp_path and path.name.endswith("-my_run.log")
    assert parse_file(path)["loss"].tolist() == [1.0]
    assert logfiles.save_upload(b"Epoch:[1/1](1/1) loss:1.0\n", "my run.log", folder=tmp_path) == path


def test_importable_without_torch():
    code = ("import sys; import mmcore.logs.log_parser, mmcore.logs.charts; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# -- a real trainer's log -------------------------------------------------------------------------------

def test_log_of_a_real_pretrain_job(tmp_path, monkeypatch):
    """A tiny pretrain run launched through the job store and runner: the log they write (header,
    the trainer's own output, the end line) parses into the records and progress the pages show."""
    from _pages_helpers import wait_for
    from _trainer_helpers import DEMO, head_jsonl, make_repo_copy, tiny_args

    from mmcore.jobs import runner
    from mmcore.jobs.jobstore import JobStore

    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    repo = make_repo_copy(tmp_path / "repo")
    data = head_jsonl(DEMO / "pretrain.jsonl", repo / "data" / "pretrain.jsonl", 12)
    argv = [sys.executable, "train_pretrain.py", *tiny_args(data_path=data, batch_size=4, epochs=2)]
    store = JobStore()
    job_id = store.create("pretrain", "tiny", {"epochs": "2"}, argv, str(repo / "trainer"),
                          {"OMP_NUM_THREADS": "1"})
    parser = LogParser(store.get(job_id).log_path)
    runner.launch(store, job_id)
    seen = []

    def finished():
        seen.extend(new_records(parser))  # read while it runs, as the pages do
        job = store.get(job_id)
        return job if job.finished else None

    job = wait_for(finished, timeout=240, interval=0.5, what="the job to finish")
    seen.extend(new_records(parser))
    assert job.status == "succeeded", "\n".join(tail(job.log_path, 40))

    # 12 lines, batch 4: 3 steps per epoch, every step logged.
    assert [(r["epoch"], r["step"], r["global_step"]) for r in seen] == [
        (1, 1, 1), (1, 2, 2), (1, 3, 3), (2, 1, 4), (2, 2, 5), (2, 3, 6)]
    df = parse_file(job.log_path)
    assert {"loss", "lr"} <= set(df.columns) and df["loss"].notna().all() and (df["loss"] > 0).all()
    assert df["total_epochs"].tolist() == [2] * 6
    header = parser.header
    assert (header["job_id"], header["type"], header["name"]) == (job_id, "pretrain", "tiny")
    assert "train_pretrain.py" in header["command"] and (header["finished"], header["exit_code"]) == ("succeeded", 0)
    assert parser.errors == []
    p = progress.summarize(df)
    assert (p.percent, p.step, p.total) == (100.0, 6, 6) and p.loss == df["loss"].iloc[-1]


def test_long_tqdm_line_in_the_middle_of_a_read(tmp_path, monkeypatch):
    monkeypatch.setattr(log_parser, "MAX_LINE", 300)
    monkeypatch.setattr(log_parser, "READ_BLOCK", 128)
    log = tmp_path / "bar.log"
    bar = "".join(f"\r {i:3d}%|{'#' * (i // 10):10s}|" for i in range(100))  # 1700 bytes, no newline
    write(log, "Epoch:[1/1](1/3) loss:1.0\n" + bar + "\rEpoch:[1/1](2/3) loss:2.0\nEpoch:[1/1](3/3) loss:3.0\n")
    parser = LogParser(log)
    parser.update()
    assert [r["step"] for r in parser.records] == [1, 2, 3]
    assert parser.position == log.stat().st_size


def test_explain_messages():
    def explained(path):
        parser = LogParser(path)
        parser.update()
        return logfiles.explain(parser, "run")

    assert explained(DATA / "upstream_pretrain.log") is None
    level, message = explained(DATA / "not_minimind.log")
    assert level == "warning" and "not a MiniMind training log" in message
    level, message = explained(DATA / "dashboard_failed.log")
    assert level == "info" and "ended (failed) before logging a step" in message
    level, message = explained(DATA / "missing.log")
    assert level == "warning" and "does not exist" in message


def test_records_from_gives_the_latest_records_only(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"Epoch:[1/1]({i}/5) loss:{i}.0 lr:0.1 epoch_Time:0.0min:\n" for i in range(1, 6)))
    parser = log_parser.LogParser(log)
    parser.update()
    assert [r["step"] for r in parser.records_from(3)] == [4, 5]
    assert [r["step"] for r in parser.records_from(-2)] == [4, 5]
    assert [r["loss"] for r in parser.records_from(-10)] == [1.0, 2.0, 3.0, 4.0, 5.0]
