"""The data worker: the Data page's child processes (torch only where rows are tokenized).

    python -m mmcore.workers.data_worker scan --file F --kind sft --tokenizer DIR --sample N --out BASE
    python -m mmcore.workers.data_worker serve --socket PATH [--exit_after S]

`scan` (started by `mmcore.data.scans`) holds `BASE.lock` while it runs, streams the file once through
`mmcore.data.checkup` (torch-free; a file over 64 MiB in chunks, one forked process per core, merged;
progress in `BASE.progress.json`, the result in `BASE.health.json` as soon as it is done), then
encodes the valid rows (all, or a uniform sample of N) with the trainers' dataset classes
(`data_tokens.token_table`) and writes `BASE.json` and `BASE.npz`. A failure goes to `BASE.error.txt`.

`serve` (started by `mmcore.data.row_client`) answers JSON-line requests on a Unix socket, a thread
per connection: {"op": "encode", "text": LINE, "kind", "tokenizer", "max_seq_len"} -> {"event": "done",
"sequences": [...]} (`data_tokens.encode_row`), {"op": "status"} -> {"event": "status", "pid", "rss_mb"}.
It exits after `--exit_after` seconds without a request.
"""
import argparse
import fcntl
import json
import os
import queue
import random
import socketserver
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from mmcore.base.local_worker import JsonLinesHandler, rss_mb
from mmcore.data import checkup


def _write_json(path, obj):
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    os.replace(tmp, path)


class Progress:
    """Writes `BASE.progress.json` at most every `every_s` seconds (and at each phase's end)."""

    def __init__(self, base, every_s=0.5):
        self.path, self.every_s, self.last = f"{base}.progress.json", every_s, 0.0

    def __call__(self, phase, done, total, force=False):
        now = time.monotonic()
        if force or now - self.last >= self.every_s or done >= total:
            self.last = now
            _write_json(self.path, {"phase": phase, "done": done, "total": total, "rss_mb": rss_mb(), "pid": os.getpid()})


class Sample:
    """The valid rows the token phase encodes: every row (`size` 0) or a uniform reservoir sample."""

    def __init__(self, size, path, seed=0):
        self.size, self.path, self.seen = size, path, 0
        self.kept = []  # (line, raw) of the reservoir
        self.rng = random.Random(seed)
        self.lines = []
        self.out = open(path, "wb") if size == 0 else None

    def add(self, line, raw, obj):
        self.seen += 1
        raw = raw if raw.endswith(b"\n") else raw + b"\n"
        if self.out is not None:
            self.out.write(raw.removeprefix(b"\xef\xbb\xbf"))
            self.lines.append(line)
        elif len(self.kept) < self.size:
            self.kept.append((line, raw))
        else:
            j = self.rng.randrange(self.seen)
            if j < self.size:
                self.kept[j] = (line, raw)

    def finish(self):
        """Write the reservoir (in file order); returns the rows' line numbers."""
        if self.out is None:
            self.kept.sort()
            with open(self.path, "wb") as f:
                for line, raw in self.kept:
                    f.write(raw.removeprefix(b"\xef\xbb\xbf"))
            self.lines = [line for line, _ in self.kept]
            self.kept = []
        else:
            self.out.close()
        return self.lines


PARALLEL_BYTES = 64 * 2**20  # a bigger file's health pass runs in chunks, one process per core (at most 4)


def _chunk(path, kind, start, end, sample, rows_path, done, index, results):
    """A forked child's part of the health pass: its byte range, its own sample; the state goes back by queue."""
    rows = Sample(sample, rows_path, seed=index)

    def progress(n):
        done[index] = n
    health = checkup.scan_range(path, kind, start, end, on_row=rows.add, progress=progress)
    if sample == 0:
        rows.finish()
    results.put((index, health.state(), rows.seen, rows.lines, rows.kept))


def health_pass(path, kind, sample, rows_path, progress, workers):
    """The health pass over `workers` chunks in forked processes, merged -> (result dict, sample's lines).

    Each chunk keeps a uniform sample of its own valid rows; the merged sample takes from each chunk in
    proportion to its rows, so it stays uniform over the file (every row when `sample` is 0)."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")  # children share the parent's hash seed: duplicates compare
    parts = checkup.chunks(path, workers)
    done = ctx.Array("q", len(parts), lock=False)
    results = ctx.Queue()
    procs = [ctx.Process(target=_chunk, args=(path, kind, a, b, sample, f"{rows_path}.{i}", done, i, results),
                         daemon=True) for i, (a, b) in enumerate(parts)]
    for proc in procs:
        proc.start()
    got = {}
    while len(got) < len(parts):
        try:
            index, *rest = results.get(timeout=0.5)
            got[index] = rest
        except queue.Empty:  # report progress, and notice a child that died
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError("a scan process of the health pass failed") from None
        progress(sum(done))
    for proc in procs:
        proc.join()
    merged, lines, offset = None, [], 0
    total_rows = sum(got[i][1] for i in got)
    rng = random.Random(0)
    with open(rows_path, "wb") as out:
        for i in range(len(parts)):
            state, seen, chunk_lines, kept = got[i]
            if merged is None:
                merged = checkup.HealthScan(kind)
                merged.__dict__.update(state)
            else:
                merged.absorb(state)
            if sample == 0:
                with open(f"{rows_path}.{i}", "rb") as part:
                    out.write(part.read())
                lines += [line + offset for line in chunk_lines]
            else:
                take = rng.sample(kept, min(len(kept), round(sample * seen / total_rows))) if total_rows else []
                for line, raw in sorted(take):
                    out.write(raw.removeprefix(b"\xef\xbb\xbf"))
                    lines.append(line + offset)
            Path(f"{rows_path}.{i}").unlink(missing_ok=True)
            offset += state["lines"]
    return merged.result(), lines


#: The most memory a scan may take (MB; MINIMIND_SCAN_MEMORY_MB): past it an allocation fails inside the
#: worker, which records the failure and removes its files, instead of the machine running short.
MEMORY_MB = float(os.environ.get("MINIMIND_SCAN_MEMORY_MB", 4096))


def limit_memory(mb=None):
    """Cap this process's data segment (heap and anonymous mappings: what rows and token tables take; not the
    shared libraries) at `mb` MB; forked chunk scans inherit it."""
    import resource
    limit = int((MEMORY_MB if mb is None else mb) * 2**20)
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def remove_temporary(base):
    """The scan's temporary files: the rows copy and its chunks' parts, the progress file."""
    folder, name = Path(base).parent, Path(base).name
    for path in [*folder.glob(f"{name}.rows.jsonl*"), folder / f"{name}.progress.json", *folder.glob(f"{name}*.tmp*")]:
        path.unlink(missing_ok=True)


def scan(path, kind, tokenizer_dir, sample, base):
    """The whole scan (see the module docstring); returns an exit status."""
    os.umask(0o077)  # its files (the rows copy, the reports) are the home's: owner-only, as docs/SECURITY.md says
    lock = open(f"{base}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another worker runs this scan
    try:
        os.nice(5)  # a scan is background work: the dashboard's server keeps the CPU it needs for its users
    except OSError:
        pass
    progress = Progress(base)
    rows_path = f"{base}.rows.jsonl"
    started = time.monotonic()
    try:
        limit_memory()
        total = os.path.getsize(path)
        workers = min(4, os.cpu_count() or 1) if total > PARALLEL_BYTES else 1
        if workers > 1:
            result, lines = health_pass(path, kind, sample, rows_path, lambda done: progress("health", done, total),
                                        workers)
        else:
            rows = Sample(sample, rows_path)
            result = checkup.scan(path, kind, progress=lambda done: progress("health", done, total), on_row=rows.add)
            lines = rows.finish()
        result["health_s"] = round(time.monotonic() - started, 3)
        result["health_processes"] = workers
        _write_json(f"{base}.health.json", result)
        arrays = None
        if lines:
            from mmcore.workers import data_tokens  # torch: only now
            tok = data_tokens.tokenizer(tokenizer_dir)
            arrays = data_tokens.token_table(rows_path, kind, tok, lines,
                                             progress=lambda done, n: progress("tokens", done, n))
        report = {"file": str(path), "size": total, "kind": kind, "rows": result["rows"], "health": result,
                  "tokenizer": str(tokenizer_dir), "sampled_rows": len(lines), "elapsed_s": round(time.monotonic() - started, 3),
                  "worker_peak_rss_mb": _peak_rss_mb()}
        if arrays is not None:
            tmp = f"{base}.tmp.npz"
            np.savez(tmp, **arrays)
            os.replace(tmp, f"{base}.npz")
        _write_json(f"{base}.json", report)
        return 0
    except Exception as exc:  # the page shows why (a MemoryError too); the traceback goes to the scan's log
        traceback.print_exc()
        why = f"the scan went over its memory limit of {MEMORY_MB:g} MB (MINIMIND_SCAN_MEMORY_MB)" \
            if isinstance(exc, MemoryError) else f"{type(exc).__name__}: {exc}"
        Path(f"{base}.error.txt").write_text(why, encoding="utf-8")
        return 1
    finally:
        remove_temporary(base)


def _peak_rss_mb():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Handler(JsonLinesHandler):
    def serve(self, request):
        if request.get("op") == "encode":
            from mmcore.workers import data_tokens
            tok = data_tokens.tokenizer(request.get("tokenizer"))
            seqs = data_tokens.encode_row(request["text"], request["kind"], tok, int(request["max_seq_len"]))
            self.send(event="done", sequences=seqs)
        elif request.get("op") == "status":
            self.send(event="status", pid=os.getpid(), rss_mb=rss_mb())
        else:
            raise ValueError(f"unknown op {request.get('op')!r}")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path, exit_after):
        if os.path.exists(path):
            os.unlink(path)
        super().__init__(path, Handler)
        os.chmod(path, 0o600)
        self.exit_after, self.last = exit_after, time.monotonic()
        threading.Thread(target=self.housekeeping, daemon=True).start()

    def touch(self):
        self.last = time.monotonic()

    def housekeeping(self):
        while True:
            time.sleep(5)
            if time.monotonic() - self.last > self.exit_after:
                self.shutdown()
                return


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mmcore.workers.data_worker")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("scan")
    p.add_argument("--file", required=True)
    p.add_argument("--kind", required=True, choices=("pretrain", "sft", "dpo", "rlaif"))
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--out", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--socket", required=True)
    p.add_argument("--exit_after", type=float, default=1800.0)
    args = parser.parse_args(argv)
    if args.mode == "scan":
        return scan(args.file, args.kind, args.tokenizer, args.sample, args.out)
    server = Server(args.socket, args.exit_after)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        Path(args.socket).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
