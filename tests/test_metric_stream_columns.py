"""The metrics stream reader (mmcore.runs.metric_stream.MetricsReader) holds columns, not records: the
frame it builds step by step is the one a single read of every record gives, whatever the file holds
(new keys, repeated or earlier steps, NaN, junk, text values), and a run that grows only adds rows."""
import json
import math
import os
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from mmcore.jobs import run_selection
from mmcore.runs import metric_stream
from trainer.rules import records


def one_read(data):
    """The table of every record in `data` (bytes), the way the reader has always built it: one dict
    per JSON line, one `from_records`, the last record of each step, ordered by step."""
    rows = []
    for line in data[:data.rfind(b"\n") + 1].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            rows.append(record)
    df = pd.DataFrame.from_records(rows)
    if not len(df):
        return pd.DataFrame(columns=list(metric_stream.POSITION_COLUMNS))
    return df.drop_duplicates("global_step", keep="last").sort_values("global_step", kind="stable").reset_index(drop=True)


def same(frame, expected):
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)


def line(record):
    return json.dumps(record) + "\n"


def record(step, **metrics):
    return {"global_step": step, "epoch": 1, "step": step, "samples": 32 * step, "tokens": 512 * step,
            "time": 1.7e9 + step / 3, "elapsed_s": round(step / 3, 3), **metrics}


def grown_in_pieces(tmp_path, text, pieces, monkeypatch, block=256):
    """Writes `text` in `pieces` (cut anywhere, mid-line too), updating one reader after each; checks
    its frame against a single read of what was written so far."""
    monkeypatch.setattr(metric_stream, "READ_BLOCK", block, raising=False)  # many blocks: their seams too
    monkeypatch.setattr(metric_stream, "TEMPLATE_MIN_LINES", 1)  # every block through the record templates
    path = tmp_path / metric_stream.METRICS_FILE
    path.write_bytes(b"")
    reader = metric_stream.MetricsReader(tmp_path)
    data = text.encode()
    cuts = sorted({0, len(data), *pieces})
    for start, end in zip(cuts, cuts[1:]):
        with open(path, "ab") as f:
            f.write(data[start:end])
        reader.update()
        same(reader.frame(), one_read(data[:end]))
        assert len(reader) == len(one_read_rows(data[:end]))
    return reader


def one_read_rows(data):
    out = []
    for text in data[:data.rfind(b"\n") + 1].splitlines():
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def test_the_frame_built_as_a_run_grows_is_the_one_a_single_read_gives(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    lines = []
    for step in range(1, 400):
        metrics = {"loss": float(rng.normal() * 10.0 ** rng.integers(-30, 30)), "lr": 0.0005}
        if step > 120:
            metrics["reward"] = float(rng.random())  # a key that appears later
        if step % 37 == 0:
            metrics["loss"] = math.nan if step % 2 else math.inf
        if 200 <= step < 260 and step % 3 == 0:
            metrics["eval/accuracy"] = float(rng.random())  # a key on some lines only: shapes mix
            metrics.pop("lr")
        if step == 300:
            metrics["lr"] = 1  # an integer in a float column
        lines.append(line(record(step, **metrics)))
    lines[50] = '{"global_step": 51, "loss": 3.\n'  # junk and a cut line are skipped
    lines[80] = "\n"
    text = "".join(lines)
    cuts = rng.integers(0, len(text), 25).tolist()
    grown_in_pieces(tmp_path, text, cuts, monkeypatch)


def test_a_long_first_read_then_short_appends_mix_both_parsers_into_one_frame(tmp_path):
    """A first read of many lines goes through the record templates, an append of a few through json: the
    frame is a single read's all along (integer columns stay integers)."""
    path = tmp_path / metric_stream.METRICS_FILE
    text = "".join(line(record(s, loss=1.0 / s)) for s in range(1, 301))
    path.write_text(text)
    reader = metric_stream.MetricsReader(tmp_path)
    reader.update()
    for start in range(301, 341, 5):
        extra = {"reward": 0.5} if start > 320 else {}  # a metric that starts late
        more = "".join(line(record(s, loss=1.0 / s, **extra)) for s in range(start, start + 5))
        with open(path, "a") as f:
            f.write(more)
        text += more
        assert reader.update() == 5
        same(reader.frame(), one_read(text.encode()))
    assert str(reader.frame()["global_step"].dtype) == "int64" and len(reader) == 340


def test_repeated_and_earlier_steps_keep_the_last_record_of_each_in_step_order(tmp_path, monkeypatch):
    steps = [1, 2, 3, 4, 3, 5, 6, 2, 7, 7, 8, 20, 10, 11]
    text = "".join(line(record(s, loss=float(i))) for i, s in enumerate(steps))
    cuts = [len("".join(line(record(s, loss=float(i))) for i, s in enumerate(steps[:k]))) for k in range(len(steps))]
    reader = grown_in_pieces(tmp_path, text, cuts, monkeypatch)
    assert reader.frame()["global_step"].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 20]
    assert reader.frame()["loss"].tolist()[:3] == [0.0, 7.0, 4.0]


def test_values_that_are_no_numbers_read_as_a_single_read_has_them(tmp_path, monkeypatch):
    text = "".join([line(record(1, loss=1.0)), line(record(2, loss=2.0)),
                    line(record(3, loss=None, note="resumed", ok=True)), line(record(4, loss=4.5, ok=False)),
                    line(record(5, loss=5.0)), '{"global_step": 6, "nested": {"a": 1}, "loss": 6.0}\n',
                    line(record(7, loss=7.0))])
    cuts = [i for i, c in enumerate(text) if c == "\n"]
    grown_in_pieces(tmp_path, text, [c + 1 for c in cuts], monkeypatch, block=1 << 20)


def test_keys_in_another_order_or_spacing_and_escaped_names(tmp_path, monkeypatch):
    text = "".join([line({"global_step": 1, "loss": 1.5, "reward/ü/mean": 0.25}),
                    json.dumps({"loss": 2.5, "global_step": 2}) + "\n",
                    json.dumps({"global_step": 3, "loss": 3.5, "reward/ü/mean": 0.5}, ensure_ascii=False) + "\n",
                    json.dumps({"global_step": 4, "loss": -0.0}, separators=(",", ":")) + "\r\n",
                    '  {"global_step": 5 , "loss" : 1e-7}  \n'])
    grown_in_pieces(tmp_path, text, [], monkeypatch, block=1 << 20)
    grown_in_pieces(tmp_path, text, [10, 70, 150], monkeypatch, block=64)


def test_numbers_travel_exactly(tmp_path):
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(size=3000) * 10.0 ** rng.integers(-300, 300, 3000), rng.random(3000),
                             [5e-324, 1.7976931348623157e308, -0.0, 0.1, 1 / 3]])
    path = tmp_path / metric_stream.METRICS_FILE
    path.write_text("".join(line({"global_step": i + 1, "loss": float(v), "tokens": 2 ** 62 + i})
                            for i, v in enumerate(values)))
    df = metric_stream.read(tmp_path)
    assert df["loss"].to_numpy().tobytes() == values.tobytes()  # bit for bit, -0.0 included
    assert df["tokens"].dtype == np.int64 and df["tokens"].iloc[-1] == 2 ** 62 + len(values) - 1
    path.write_text(line({"global_step": 1, "tokens": 2 ** 64}) + line({"global_step": 2, "tokens": 1}))
    same(metric_stream.read(tmp_path), one_read(path.read_bytes()))  # beyond int64: as a single read has it


def test_a_reader_holds_columns_not_a_record_per_line(tmp_path):
    path = tmp_path / metric_stream.METRICS_FILE
    steps = 20_000
    path.write_text("".join(line(record(s, loss=1.0 / s, lr=0.0005, **{"time/step_s": 0.5, "tokens_per_s": 3e4}))
                            for s in range(1, steps + 1)))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        reader = metric_stream.MetricsReader(tmp_path)
        reader.update()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    values = steps * 11  # 11 numbers per record
    assert held < values * 8 * 1.5, held  # about 8 bytes a number (a dict per record takes ~100)
    same(reader.frame(), one_read(path.read_bytes()))


def test_a_growing_run_adds_rows_and_what_was_handed_out_stays(tmp_path):
    path = tmp_path / metric_stream.METRICS_FILE
    path.write_text("".join(line(record(s, loss=1.0 / s)) for s in range(1, 5001)))
    reader = metric_stream.MetricsReader(tmp_path)
    reader.update()
    first = reader.frame()
    with open(path, "a") as f:
        f.write(line(record(5001, loss=0.5)) + line(record(5002, loss=0.25)))
    assert reader.update() == 2
    grown = reader.frame()
    assert len(first) == 5000 and first["loss"].iloc[-1] == 1 / 5000  # the earlier frame is as it was
    assert grown["loss"].tolist()[-3:] == [1 / 5000, 0.5, 0.25]
    # The new frame continues the earlier one's arrays: the rows read before are not built again.
    assert np.shares_memory(first["loss"].to_numpy(), grown["loss"].to_numpy())
    with pytest.raises(ValueError):
        grown["loss"].to_numpy()[0] = 9.0  # shared: read-only
    same(grown, one_read(path.read_bytes()))


def test_a_replaced_or_truncated_stream_is_read_anew(tmp_path):
    path = tmp_path / metric_stream.METRICS_FILE
    path.write_text("".join(line(record(s, loss=float(s))) for s in range(1, 11)))
    reader = metric_stream.MetricsReader(tmp_path)
    reader.update()
    shorter = tmp_path / "new.jsonl"
    shorter.write_text("".join(line(record(s, loss=10.0 + s)) for s in range(1, 4)))
    os.replace(shorter, path)  # a resumed run keeps the records up to its checkpoint
    assert reader.update() == 3
    same(reader.frame(), one_read(path.read_bytes()))
    with open(path, "r+") as f:
        f.truncate(0)  # emptied in place
    reader.update()
    same(reader.frame(), one_read(b""))
    with open(path, "a") as f:
        f.write(line(record(1, reward=1.0)))
    reader.update()
    same(reader.frame(), one_read(path.read_bytes()))


def test_a_trainer_written_stream_with_a_resume_reads_as_before(tmp_path):
    run = tmp_path / "run"
    rec = records.RunRecords(run, "grpo")
    for step in range(1, 6):
        rec.log(step, 0, step, {"loss": float(step), "reward": 0.5, "reward/format/mean": float("nan")}, step * 2, step)
    rec.close()
    rec = records.RunRecords(run, "grpo", resume_step=3)
    for step in range(4, 8):
        rec.log(step, 0, step, {"loss": 10.0 + step, "reward": 0.5, "kl": 0.01}, step * 2, step)
    rec.close()
    same(metric_stream.read(run), one_read((run / metric_stream.METRICS_FILE).read_bytes()))


# -- a run's reading keeps its records reader ------------------------------------------------------

def test_a_runs_reading_reads_only_the_records_appended_since(tmp_path, monkeypatch):
    log = tmp_path / "run.log"
    log.write_text("".join(f"Epoch:[1/1]({s}/100) loss:{5 - s / 10} lr:0.001\n" for s in range(1, 21)))
    folder = tmp_path / "records"
    folder.mkdir()
    stream = folder / metric_stream.METRICS_FILE
    stream.write_text("".join(line(record(s, loss=5 - s / 10)) for s in range(1, 21)))
    parsed = []
    add = metric_stream.MetricsReader._add
    monkeypatch.setattr(metric_stream.MetricsReader, "_add", lambda self, data: (parsed.append(len(data)),
                                                                                 add(self, data)))
    run = run_selection.Run("run", str(log), run_dir=folder)
    parsers, streams = {}, {}
    first = run_selection.read_run(run, parsers, streams=streams)
    assert sum(parsed) == stream.stat().st_size and first.table["samples"].tolist() == [32 * s for s in range(1, 21)]
    size = stream.stat().st_size
    with open(log, "a") as f:
        f.write("Epoch:[1/1](21/100) loss:2.9 lr:0.001\n")
    with open(stream, "a") as f:
        f.write(line(record(21, loss=2.9)))
    parsed.clear()
    grown = run_selection.read_run(run, parsers, streams=streams)
    assert sum(parsed) == stream.stat().st_size - size  # the new line only, not the whole file again
    assert grown.table["samples"].tolist()[-2:] == [640, 672] and list(streams) == [str(folder)]
    alone = run_selection.read_run(run_selection.Run("records", None, run_dir=folder), {}, streams=streams)
    assert alone.table["global_step"].tolist() == list(range(1, 22))


def test_a_runs_table_continues_its_logs_arrays_as_the_log_grows(tmp_path):
    """A reading's table shares its log parser's arrays: a grown log adds rows, and the table read before
    (another session may still be drawing it) stays as it was."""
    log = tmp_path / "run.log"
    log.write_text("".join(f"Epoch:[1/1]({s}/9000) loss:{5 - s / 1000} lr:0.001\n" for s in range(1, 5001)))
    run, parsers = run_selection.Run("run", str(log)), {}
    first = run_selection.read_run(run, parsers).table
    with open(log, "a") as f:
        f.write("Epoch:[1/1](5001/9000) loss:0.5 lr:0.001\n")
    grown = run_selection.read_run(run, parsers).table
    assert len(first) == 5000 and first["loss"].iloc[-1] == 0.0 and grown["loss"].iloc[-1] == 0.5
    assert np.shares_memory(first["loss"].to_numpy(), grown["loss"].to_numpy())
    assert grown["global_step"].tolist() == list(range(1, 5002)) and grown.equals(parsers[str(log)].frame())


def test_positions_join_the_logs_steps_as_a_left_join_would():
    log = pd.DataFrame({"global_step": [1, 2, 3, 5, 9], "loss": [5.0, 4.0, 3.0, 2.0, 1.0]})
    positions = pd.DataFrame({"global_step": [2, 3, 4, 5], "samples": [64, 96, 128, 160], "tokens": [1, 2, 3, 4],
                              "elapsed_s": [0.5, 1.0, 1.5, 2.0]})
    joined = run_selection.with_positions(log, positions)
    same(joined, log.merge(positions[["global_step", "samples", "tokens", "elapsed_s"]], on="global_step", how="left"))
    every = run_selection.with_positions(log.iloc[1:3].reset_index(drop=True), positions)
    assert every["samples"].dtype == np.int64 and every["samples"].tolist() == [64, 96]
    assert run_selection.with_positions(log, None) is not None and "samples" not in run_selection.with_positions(log)
