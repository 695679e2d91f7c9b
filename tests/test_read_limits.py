"""Every data file the dashboard reads is read within limits: a row too long or nested too deep is a bad-row
finding (never a crash, never read whole), a FIFO is refused at once, the scan worker runs under a memory
limit and leaves no temporary file on any exit path."""
import os
import subprocess
import sys

import pytest

from dataset import formats
from mmcore.data import checkup, rows, scans, sources
from mmcore.workers import data_worker

DEEP = b"[" * 200_000 + b"]" * 200_000 + b"\n"
GOOD = b'{"text": "a good row"}\n'


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A read root of its own, and a dashboard home."""
    monkeypatch.setenv("MINIMIND_READ_ROOTS", str(tmp_path))
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path


def _cli(*args, env_folder, timeout=120):
    env = {**os.environ, "MINIMIND_READ_ROOTS": str(env_folder), "MINIMIND_DASHBOARD_HOME": str(env_folder / "home")}
    return subprocess.run([sys.executable, "-m", "mmcore", "data", "check", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_a_row_nested_200000_deep_is_a_clear_message_not_a_traceback(folder):
    path = folder / "deep.jsonl"
    path.write_bytes(DEEP)
    run = _cli(path, env_folder=folder)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "matches a MiniMind data format" in run.stderr
    assert "line 1: the row is too deep: its JSON nests more than 64 levels" in run.stderr
    path.write_bytes(GOOD + DEEP)
    run = _cli(path, "--type", "pretrain", env_folder=folder)
    assert run.returncode == 1 and "Traceback" not in run.stderr + run.stdout
    assert "line 2: the row is too deep" in run.stdout


def test_a_fifo_is_refused_at_once(folder):
    fifo = folder / "pipe.jsonl"
    os.mkfifo(fifo)
    run = _cli(fifo, env_folder=folder, timeout=60)  # would wait for a writer for ever if it were opened
    assert run.returncode == 2 and "Traceback" not in run.stderr and "not a regular file" in run.stderr
    with pytest.raises(sources.DataFileError, match="not a regular file"):
        sources.check(fifo)
    with pytest.raises(formats.DataFormatError, match="not a regular file"):
        formats.scan_file(str(fifo), "pretrain")


def test_long_and_deep_rows_are_findings_of_the_scan_and_the_trainers_check(folder, monkeypatch):
    monkeypatch.setattr(formats, "MAX_ROW_BYTES", 1000)
    path = folder / "mixed.jsonl"
    path.write_bytes(GOOD + b'{"text": "' + b"x" * 5000 + b'"}\n' + b"[" * 100 + b"]" * 100 + b"\n" + GOOD)
    result = checkup.scan(path, "pretrain")
    assert result["rows"] == 2 and result["counts"]["bad"] == 2
    reasons = {item["line"]: item["reason"] for item in result["problems"]["bad"]}
    assert reasons[2].startswith("the row is too long: 5013 bytes") and reasons[3].startswith("the row is too deep")
    # chunked scans agree (the worker's parallel pass)
    merged = None
    for a, b in checkup.chunks(path, 3):
        piece = checkup.scan_range(path, "pretrain", a, b)
        merged = piece if merged is None else merged.absorb(piece.state())
    assert merged.result() == result
    with pytest.raises(formats.DataFormatError, match="line 2: the row is too long"):
        formats.scan_file(str(path), "pretrain")
    assert checkup.detect_file_kind(path) == "pretrain"  # the bad rows are skipped, not read whole
    shown = rows.read(path, 1, 10)
    assert [r.obj is None for r in shown] == [False, True, True, False]
    assert len(shown[2].text) <= rows.MAX_LINE_CHARS
    assert [r.line for r in rows.search(path, "good")[0]] == [1, 4]


def test_the_models_page_prompt_file_reads_no_row_whole(folder, monkeypatch):
    from mmcore.models import modelsview
    monkeypatch.setattr(formats, "MAX_ROW_BYTES", 1000)
    good = b'{"conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n'
    path = folder / "prompts.jsonl"
    path.write_bytes(good + b'{"conversations": "' + b"x" * 5000 + b'"}\n')
    with pytest.raises(ValueError, match="prompts.jsonl, line 2: the row is too long: 5022 bytes"):
        modelsview.load_prompts(path)
    path.write_bytes(good + b"\n" + b"[" * 100 + b"]" * 100 + b"\n")
    with pytest.raises(ValueError, match="prompts.jsonl, line 3: the row is too deep"):
        modelsview.load_prompts(path)
    assert modelsview.load_prompts(path, 1) == [{"messages": [{"role": "user", "content": "hi"}], "reference": "ok"}]


def test_a_line_longer_than_the_limit_is_never_read_whole(monkeypatch):
    import io

    class Counting(io.BytesIO):
        largest = 0

        def readline(self, size=-1):
            assert size is not None and size >= 0, "a whole line was asked for"
            Counting.largest = max(Counting.largest, size)
            return super().readline(size)

    got = list(formats.lines_within(Counting(b"a" * 3_000_000 + b"\nb\n"), 1000))
    assert [(len(raw), size) for raw, size in got] == [(1001, 3_000_001), (2, 2)]
    assert Counting.largest <= 1 << 20


def test_the_scan_worker_runs_under_a_memory_limit_and_removes_its_files(folder):
    path = folder / "data.jsonl"
    path.write_bytes(GOOD * 2000)
    home = folder / "home"
    key = scans.scan_key(path, "pretrain", None, 0)
    env = {**os.environ, "MINIMIND_SCAN_MEMORY_MB": "1"}  # below what the worker holds already: it must fail
    run = subprocess.run(scans.worker_argv(path, "pretrain", key, home, None, 0), env=env, capture_output=True,
                         timeout=120, check=False)
    assert run.returncode == 1
    assert "memory limit of 1 MB" in (scans.scans_dir(home) / f"{key}.error.txt").read_text()
    assert sorted(p.name for p in scans.scans_dir(home).iterdir() if ".rows" in p.name or "progress" in p.name) == []
    # and the limit is set in the child itself
    probe = subprocess.run([sys.executable, "-c", "import resource; from mmcore.workers import data_worker as w; "
                            "w.limit_memory(512); print(resource.getrlimit(resource.RLIMIT_DATA)[0])"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert int(probe.stdout) == 512 * 2**20


def test_leftovers_of_a_killed_worker_are_removed_by_the_next_start(folder):
    path = folder / "data.jsonl"
    path.write_bytes(GOOD * 20)
    home = folder / "home"
    done = scans.run(path, "pretrain", home, sample=0)
    assert done.status == "done"
    leftovers = [scans.scans_dir(home) / f"{done.key}{suffix}" for suffix in (".rows.jsonl", ".rows.jsonl.1",
                                                                            ".progress.json")]
    for leftover in leftovers:
        leftover.write_bytes(b"x" * 100)
    scans.start(path, "pretrain", home, sample=0)
    assert not any(p.exists() for p in leftovers)
    for p in scans.scans_dir(home).iterdir():
        assert p.stat().st_mode & 0o777 == 0o600, p
    assert data_worker.MEMORY_MB > 0
