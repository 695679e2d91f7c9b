"""`minimind COMMAND ...` (or `python -m mmcore COMMAND ...`): the dashboard's jobs from a shell, with the
pages' rules; and `minimind-dashboard [STREAMLIT OPTIONS]`, which serves the app.

    python -m mmcore submit pretrain --set hidden_size=64 --set data_path=../dataset/demo/pretrain.jsonl
                            [--guard loss_above=8 --guard patience=20]
    python -m mmcore status 12
    python -m mmcore stop 12 [--wait]
    python -m mmcore delete 12
    python -m mmcore list [--status running]
    python -m mmcore history [JOB] [--refused]
    python -m mmcore audit repair --user ADMIN
    python -m mmcore backup
    python -m mmcore restore [latest | FILE] [--adopt-running]
    python -m mmcore export out/full_sft_512.pth out/hf/full_sft_512 [--lora out/lora/x_512.pth]
                            [--format llama|minimind|gguf|peft] [--gguf_type f16|f32|q8_0]
    python -m mmcore queue [JOB --move up|down|top|bottom | --priority N]
    python -m mmcore data check dataset/demo/sft.jsonl --type sft --max_seq_len 512 [--json]
    python -m mmcore rescore RUN_DIR --reward rule|format|py:MODULE:FUNCTION [--name NAME] [--json]
    python -m mmcore prompts RUN_DIR [--json] [--export FILE --keep learnable]
    python -m mmcore runs [--type pretrain] [--search WORDS] [--json]
    python -m mmcore diff 12 14 [--all] [--json]
    python -m mmcore annotate 12 [--tags baseline,lr] [--note TEXT]
    python -m mmcore sweep pretrain --set K=V --grid learning_rate=0.001,0.0005 [--random K=LO:HI --trials N]
                           [--seeds N] [--priority N] [--json]; sweep TYPE --stop SWEEP | --retry SWEEP
    python -m mmcore notify --events failed,guard_stopped [--email me@example.com] | --failures

Each subcommand is one `add_*` function below that registers its parser and handler; a new one is a
new function added to `COMMANDS`. A handler may return an exit status (None means 0); a refusal
(`api.Refused`) exits 1 with the reason on stderr, a usage error 2. What changes something is an act of
`mmcore.actions` (through `mmcore.api`, or directly for restore and export), recorded as asked from "cli".
"""
import argparse
import datetime
import json
import os
import sys

from dataset.formats import KIND_OF_TYPE
from mmcore import api
from mmcore.actions import core, job_acts, model_acts
from mmcore.base.paths import ROOT, default_home
from mmcore.data import report as data_report
from mmcore.jobs import storeguard
from trainer.rules.export_options import add_export_options


def _time(ts):
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else ""


def _pairs(items, option="--set"):
    """`--set name=value` items (or those of `option`) -> {name: value}; argparse errors for a malformed item."""
    values = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"{option} takes name=value, got {item!r}")
        values[name.strip()] = value
    return values


def _user_option(parser):
    parser.add_argument("--user", default=None, help="acting user (default: the OS user); owns what it submits")


def add_submit(sub):
    p = sub.add_parser("submit", help="launch a training job; prints its id")
    p.add_argument("train_type", help="pretrain, sft, lora, dpo, ppo, grpo, spo, distill_reason or distillation")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", dest="values",
                   help="a field of the Train form (repeatable); fields not set take the script's default")
    p.add_argument("--name", default=None, help="job name (default: TYPE-YYYYMMDD-HHMM)")
    p.add_argument("--backend", choices=("local", "slurm"), default=None,
                   help="where it runs (default: the queue settings' default_backend)")
    p.add_argument("--gpus", default=None, metavar="N|IDS",
                   help="GPUs it needs: a number (any free ones) or ids like 0,2 (default: the device in --set)")
    p.add_argument("--after", type=int, default=None, metavar="JOB",
                   help="the queued or running job that will write its base weight: start when that one has succeeded")
    p.add_argument("--guard", action="append", metavar="NAME=VALUE", dest="guards",
                   help="stop the run when its records say it went wrong (repeatable): nonfinite=0|1 (on by default), "
                        "loss_above=X, reward_below=X, patience=N (logged steps), eval_patience=N (evaluations)")
    _user_option(p)

    def run(args):
        try:
            values = _pairs(args.values)
            guards = _pairs(args.guards, "--guard")
        except argparse.ArgumentTypeError as exc:
            p.error(str(exc))
        gpus = args.gpus
        if gpus is not None:
            gpus = int(gpus) if gpus.strip().isdigit() else [g for g in gpus.split(",") if g.strip()]
        print(api.submit(args.train_type, values, user=args.user, name=args.name, backend=args.backend, gpus=gpus,
                         after=args.after, guards=guards or None))
    p.set_defaults(handler=run)


def add_status(sub):
    p = sub.add_parser("status", help="one job's status, owner, exit code and log file")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true", help="every field, as JSON")

    def run(args):
        job = api.get(args.job_id)
        if args.json:
            print(json.dumps(job, indent=2, default=str))
            return
        for key in ("id", "name", "train_type", "status", "exit_code", "owner", "log_path", "note", "backend",
                    "external_id", "queue_reason"):
            print(f"{key}: {'' if job[key] is None else job[key]}")
        for key in ("created_at", "started_at", "ended_at"):
            print(f"{key}: {_time(job[key])}")
    p.set_defaults(handler=run)


def add_stop(sub):
    p = sub.add_parser("stop", help="stop a queued or running job (SIGTERM, then SIGKILL after the grace period)")
    p.add_argument("job_id")
    p.add_argument("--grace", type=float, default=api.runner.DEFAULT_GRACE_S, help="seconds between SIGTERM and SIGKILL")
    p.add_argument("--wait", action="store_true", help="return once the job's end is recorded")
    _user_option(p)

    def run(args):
        if api.stop(args.job_id, user=args.user, grace=args.grace, wait=args.wait):
            print(f"job {args.job_id}: " + (api.get(args.job_id)["status"] if args.wait else "stopping"))
        else:
            print(f"job {args.job_id} had already ended")
    p.set_defaults(handler=run)


def add_delete(sub):
    p = sub.add_parser("delete", help="delete a finished job and its log (not its weights)")
    p.add_argument("job_id")
    _user_option(p)

    def run(args):
        api.delete(args.job_id, user=args.user)
        print(f"deleted job {args.job_id}")
    p.set_defaults(handler=run)


def add_list(sub):
    p = sub.add_parser("list", help="jobs, newest first")
    p.add_argument("--status", action="append", help="only this status (repeatable)")
    p.add_argument("--type", dest="train_type", action="append", help="only this training type (repeatable)")
    p.add_argument("--limit", type=int, default=50, help="at most this many (0: all)")

    def run(args):
        jobs = api.list_jobs(status=args.status, train_type=args.train_type, limit=args.limit or None)
        print(f"{'id':>5}  {'type':<14} {'status':<10} {'owner':<20} {'created':<19}  name")
        for j in jobs:
            print(f"{j['id']:>5}  {j['train_type']:<14} {j['status']:<10} {j['owner']:<20} "
                  f"{_time(j['created_at']):<19}  {j['name']}")
    p.set_defaults(handler=run)


def add_history(sub):
    p = sub.add_parser("history", help="the audit trail (of one job, or of all)")
    p.add_argument("job_id", nargs="?", type=int)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--refused", action="store_true", help="the refused attempts instead: who, what, why")

    def run(args):
        if args.refused:
            for r in api.refusals(args.limit or None):
                if args.job_id is None or r["job_id"] == args.job_id:
                    job = "" if r["job_id"] is None else f"job {r['job_id']}"
                    reason = " ".join(r["reason"].split())
                    print(f"{_time(r['at'])}  {r['user']:<20} {r['action']:<8} {job:<10} ({r['entry']}) "
                          f"refused: {reason}")
            return
        for e in api.history(args.job_id, args.limit or None):
            job = "" if e["job_id"] is None else f"job {e['job_id']}"
            print(f"{_time(e['at'])}  {e['user']:<20} {e['action']:<8} {job:<10} {json.dumps(e['detail'])}")
    p.set_defaults(handler=run)


def add_backup(sub):
    p = sub.add_parser("backup", help="copy the job database now (SQLite online backup) into <home>/backups/")

    def run(args):
        store = api.open_store()
        print(storeguard.backup(store.path))
    p.set_defaults(handler=run)


def add_restore(sub):
    p = sub.add_parser("restore", help="list the job database's backups, or put one back ('latest' or a file)")
    p.add_argument("backup", nargs="?", help="'latest' or a backup file; without it, the backups are listed")
    p.add_argument("--adopt-running", action="store_true",
                   help="while jobs of the store run: keep them running and adopt them into the restored database "
                        "(without it, the restore is refused)")
    _user_option(p)

    def run(args):
        home = default_home()
        if args.backup is None:
            found = storeguard.backups(home)
            print("\n".join(str(b) for b in found) if found else f"no backups in {home / storeguard.BACKUP_DIR}")
            return
        outcome = job_acts.restore_store(home, args.backup, args.user, entry=core.CLI, adopt_running=args.adopt_running)
        if outcome.refused:
            raise api.Refused.of(outcome)
        print(outcome.message)
    p.set_defaults(handler=run)


def add_audit(sub):
    """`python -m mmcore audit repair --user ADMIN`: keep a damaged audit trail aside and start a new one (an
    admin's act; never done without being asked)."""
    p = sub.add_parser("audit", help="repair a damaged audit trail (admins)")
    what = p.add_subparsers(dest="audit_command", required=True, metavar="repair")
    r = what.add_parser("repair", help="keep the damaged audit.db aside and start a new, empty trail")
    _user_option(r)

    def run(args):
        outcome = job_acts.repair_audit(default_home(), args.user, entry=core.CLI)
        if outcome.refused:
            raise api.Refused.of(outcome)
        print(outcome.message)
    r.set_defaults(handler=run)


def add_export(sub):
    """`python -m mmcore export WEIGHT.pth OUT_DIR [...] [--user U]`: a member's or admin's action, audited."""
    p = sub.add_parser("export", help="export a .pth weight file: a Llama-format transformers folder (default), "
                                      "the custom-code folder, GGUF + Ollama Modelfile, or a PEFT adapter; verified")
    add_export_options(p)
    p.add_argument("--user", default=None, help="acting user (default: the OS user); viewers may not export")

    def run(args):
        options = {k: getattr(args, k) for k in ("format", "gguf_type", "hidden_size", "num_hidden_layers", "use_moe",
                                                 "lora", "tokenizer_path", "dtype", "verify")}
        outcome = model_acts.export(args.user, args.weight, args.out_dir, capture=False, entry=core.CLI, timeout=None,
                                    **options)
        if outcome.refused:
            raise api.Refused.of(outcome)
        return outcome.value[0]
    p.set_defaults(handler=run)


def add_queue(sub):
    p = sub.add_parser("queue", help="jobs waiting in the queue, with their place and reason; move or prioritise one")
    p.add_argument("job_id", nargs="?", help="a waiting job to move or prioritise")
    p.add_argument("--move", choices=("up", "down", "top", "bottom"), help="move the job among jobs of its priority")
    p.add_argument("--priority", type=int, help="set the job's priority (admins; higher starts first)")
    p.add_argument("--user", default=None, help="acting user (default: the OS user)")

    def run(args):
        if args.job_id is None:
            if args.move or args.priority is not None:
                p.error("--move and --priority need a job id")
            for job in api.queue():
                print(f"{job['id']:>5}  {job['train_type']:<14} {job['owner']:<16} p={job['priority']:<4} "
                      f"{job['backend']:<6} {job['queue_reason'] or ''}")
            return None
        if args.move is None and args.priority is None:
            p.error("give --move or --priority with a job id")
        done = True
        if args.priority is not None:
            done = api.set_priority(args.job_id, args.priority, user=args.user) and done
        if args.move:
            done = api.move(args.job_id, args.move, user=args.user) and done
        if not done:
            print(f"job {args.job_id} is not waiting in the queue")
            return 1
        return None
    p.set_defaults(handler=run)


def add_data(sub):
    """`python -m mmcore data check FILE [--type T] [--max_seq_len N] [--json]`: the Data page's report of a
    file (format, bad rows with line numbers, health, truncation, steps per epoch); exit 1 on bad rows,
    so a team's CI can run it. Same read roots as the pages."""
    p = sub.add_parser("data", help="check a training data file: format, bad rows, health, truncation")
    what = p.add_subparsers(dest="data_command", required=True, metavar="check")
    c = what.add_parser("check", help="report on FILE; exits 1 when it has bad rows")
    c.add_argument("file", help="a jsonl data file inside the read roots")
    c.add_argument("--type", default=None, choices=list(KIND_OF_TYPE), help="training type (default: from the rows)")
    c.add_argument("--max_seq_len", type=int, default=None, help="default: the type's default")
    c.add_argument("--batch_size", type=int, default=None)
    c.add_argument("--accumulation_steps", type=int, default=None)
    c.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the bundled one)")
    c.add_argument("--sample", type=int, default=0, help="encode only this many rows (a uniform sample; 0: all)")
    c.add_argument("--json", action="store_true", help="print one JSON object")

    def run(args):
        try:
            report = api.check_data(args.file, args.type, args.max_seq_len, tokenizer=args.tokenizer,
                                    sample=args.sample, batch_size=args.batch_size,
                                    accumulation_steps=args.accumulation_steps)
        except (ValueError, RuntimeError) as exc:  # a file that cannot be opened (DataFileError), a failed scan
            print(f"{args.prog} data check: {exc}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(report, ensure_ascii=False))
        else:
            print("\n".join(data_report.text(report)))
        return 1 if report["bad_rows"] else 0
    c.set_defaults(handler=run)


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def add_runs(sub):
    """`python -m mmcore runs [--json]`: every run with its parameters and results (the Runs page's table)."""
    p = sub.add_parser("runs", help="every run with its parameters (those that differ) and results")
    p.add_argument("--type", dest="train_type", default=None, help="only runs of this training type")
    p.add_argument("--search", default="", help="only runs whose name, tags or note hold every word")
    p.add_argument("--limit", type=int, default=0, help="at most this many, newest first (0: all)")
    p.add_argument("--json", action="store_true", help="every run with every parameter, as one JSON list")

    def run(args):
        from mmcore.experiments import runtable
        found = api.runs(train_type=args.train_type, limit=args.limit or None)
        table = runtable.search(runtable.frame(found), args.search)
        if args.json:
            shown = set(table["id"])
            print(json.dumps([r for r in found if r["id"] in shown], indent=2, default=str))
            return
        print(table.to_string(index=False, na_rep="", float_format=_cell) if len(table) else "no runs")
    p.set_defaults(handler=run)


def add_diff(sub):
    """`python -m mmcore diff JOB JOB... [--json]`: what differs between 2 to 8 runs."""
    p = sub.add_parser("diff", help="what differs between 2 to 8 runs: parameters, data files, code, results")
    p.add_argument("job_ids", nargs="+", metavar="JOB")
    p.add_argument("--all", action="store_true", help="every parameter, not only those that differ")
    p.add_argument("--json", action="store_true", help="one JSON object")

    def run(args):
        found = api.diff(args.job_ids, only_differences=not args.all)
        if args.json:
            print(json.dumps(found, indent=2, default=str))
            return
        ids = [f"job {r['id']}" for r in found["runs"]]
        rows = [("", *ids), ("name", *(r["name"] for r in found["runs"]))]
        rows += [(name, *map(_cell, values)) for name, values in found["params"].items()]
        rows += [(f"data {f['param']}", *(
            next((f"{g['path']} {g['size']} B sha256:{(g['sha256'] or '?')[:12]}" for g in d["files"]
                  if g["param"] == f["param"]), "") for d in found["data"]))
                 for f in (found["data"][0]["files"] if found["data"] else [])]
        rows.append(("code", *((c["commit"] or "unknown")[:12] + ("+changes" if c["dirty"] else "")
                               for c in found["code"])))
        rows += [(key, *map(_cell, values)) for key, values in found["results"].items()]
        widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())
    p.set_defaults(handler=run)


def add_annotate(sub):
    """`python -m mmcore annotate JOB [--tags a,b] [--note TEXT]`: the run's owner or an admin, audited."""
    p = sub.add_parser("annotate", help="set a run's tags and note (its owner or an admin)")
    p.add_argument("job_id")
    p.add_argument("--tags", default=None, help="comma-separated tags (replaces the run's tags; '' clears them)")
    p.add_argument("--note", default=None, help="the run's note (replaces it; '' clears it)")
    _user_option(p)

    def run(args):
        if args.tags is None and args.note is None:
            p.error("give --tags or --note")
        now = api.annotate(args.job_id, tags=args.tags, note=args.note, user=args.user)
        print(f"job {args.job_id}: tags {', '.join(now['tags']) or '-'}; note {now['note'] or '-'}")
    p.set_defaults(handler=run)


def add_sweep(sub):
    """`python -m mmcore sweep TYPE [--set K=V] [--grid K=V1,V2] [--random K=LO:HI --trials N] [--seeds N]`: queue
    the runs as one sweep (every run checked first; nothing queued when one cannot start); prints the sweep id
    and its job ids."""
    p = sub.add_parser("sweep", help="queue a sweep: every combination of --grid values, --trials draws of --random "
                                     "ranges, each once per seed")
    p.add_argument("train_type")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", dest="values", help="a value every run shares")
    p.add_argument("--grid", action="append", metavar="NAME=V1,V2,...", help="values to try (repeatable)")
    p.add_argument("--random", action="append", metavar="NAME=LOW:HIGH", help="a range to draw from (repeatable)")
    p.add_argument("--trials", type=int, default=1, help="draws of the --random ranges (default 1)")
    p.add_argument("--seeds", type=int, default=1, help="runs of each combination with --seed 1..N (default 1)")
    p.add_argument("--name", default=None, help="the sweep's name (its jobs are NAME-swID-N)")
    p.add_argument("--backend", choices=("local", "slurm"), default=None)
    p.add_argument("--json", action="store_true", help='print {"sweep": id, "jobs": [ids]}')
    p.add_argument("--priority", type=int, default=None, help="the runs' queue priority (admins)")
    p.add_argument("--stop", type=int, metavar="SWEEP", default=None, help="stop every job of this sweep instead")
    p.add_argument("--retry", type=int, metavar="SWEEP", default=None,
                   help="queue again the runs of this sweep that failed, were stopped or were lost, instead")
    _user_option(p)

    def run(args):
        if args.stop is not None:
            print(f"sweep {args.stop}: stopping jobs {api.stop_sweep(args.stop, user=args.user)}")
            return
        if args.retry is not None:
            print(f"sweep {args.retry}: new jobs {api.retry_sweep(args.retry, user=args.user)}")
            return
        try:
            base = _pairs(args.values)
            grid = {k: text.split(",") for k, text in _pairs(args.grid, "--grid").items()}
            ranges = {}
            for k, text in _pairs(args.random, "--random").items():
                low, sep, high = text.partition(":")
                if not sep:
                    raise argparse.ArgumentTypeError(f"--random takes name=low:high, got {k}={text}")
                ranges[k] = (low, high)
        except argparse.ArgumentTypeError as exc:
            p.error(str(exc))
        found = api.sweep(args.train_type, base, grid, ranges, trials=args.trials, seeds=args.seeds, name=args.name,
                          user=args.user, backend=args.backend, priority=args.priority)
        if args.json:
            print(json.dumps(found))
        else:
            print(f"sweep {found['sweep']}: jobs {' '.join(map(str, found['jobs']))}")
    p.set_defaults(handler=run)


def add_notify(sub):
    """`python -m mmcore notify --events E1,E2 [--email ADDR]`: which of your runs' events reach you;
    `--failures`: the messages that could not be delivered (what admins look at)."""
    p = sub.add_parser("notify", help="choose which of your runs' events reach you; or list failed deliveries")
    p.add_argument("--events", default=None, help="comma-separated: failed, succeeded, guard_stopped, health, "
                                                 "sweep_finished ('' for none)")
    p.add_argument("--email", default="", help="where e-mail goes (the admin's notify.toml names the SMTP server)")
    p.add_argument("--failures", action="store_true", help="messages that could not be delivered, with the error")
    _user_option(p)

    def run(args):
        if args.failures:
            for f in api.notification_failures():
                print(f"{_time(f['at'])}  job {f['job']}  {f['event']:<14} {f['target']}  tries {f['attempts']}: "
                      f"{f['error']}")
            return
        if args.events is None:
            p.error("give --events (or --failures)")
        kept = api.set_notifications([e.strip() for e in args.events.split(",") if e.strip()], args.email,
                                     user=args.user)
        print(f"events: {', '.join(kept['events']) or '-'}; e-mail: {kept['email'] or '-'}")
    p.set_defaults(handler=run)


#: Every subcommand, in the order `--help` lists them.
def add_rescore(sub):
    p = sub.add_parser("rescore", help="score every stored response of a run again with another reward")
    p.add_argument("run_dir", help="the run's records folder (its rollouts.sqlite)")
    p.add_argument("--reward", required=True, help="rule, format, or py:MODULE:FUNCTION (an admin-trusted function)")
    p.add_argument("--name", default=None, help="recorded as rescore/NAME (default: the reward's name)")
    p.add_argument("--json", action="store_true", help="the summary and every response's scores, as JSON")
    _user_option(p)

    def run(args):
        summary = api.rescore(args.run_dir, args.reward, name=args.name, user=args.user)
        if args.json:
            from mmcore.runs import rollout_store
            stored = rollout_store.read(args.run_dir)
            columns = ["step", "group", "sample", "reward"] + [c for c in stored.columns if c.startswith("reward/")]
            column = f"rescore/{summary['name']}"
            responses = stored[columns + [column]].astype(object).where(stored[columns + [column]].notna(), None)
            print(json.dumps({**summary, "responses_scored": responses.to_dict("records")}, indent=1))
            return
        print(f"rescore/{summary['name']}: {summary['responses']} responses, {summary['steps']} steps, "
              f"{summary['seconds']} s")
        for s in summary["per_step"]:
            print(f"step {s['step']}: mean {s['mean']:.6f} std {s['std']:.6f} ({s['responses']} responses)")
    p.set_defaults(handler=run)


def add_prompts(sub):
    p = sub.add_parser("prompts", help="one row per training prompt of an RL run: seen, reward, pass rate, flag")
    p.add_argument("run_dir", help="the run's records folder (its rollouts.sqlite)")
    p.add_argument("--json", action="store_true", help="the rows as JSON")
    p.add_argument("--export", metavar="FILE", help="write the kept prompts as an RLAIF file (a new file)")
    p.add_argument("--keep", nargs="+", default=["learnable"], metavar="FLAG",
                   help="flags of the prompts --export writes (always_right always_wrong learned forgotten "
                        "learnable; default: learnable)")

    def run(args):
        from mmcore.runs import prompt_record
        unknown = [f for f in args.keep if f not in prompt_record.FLAGS]
        if unknown:
            p.error(f"--keep takes {', '.join(prompt_record.FLAGS)}; got {', '.join(unknown)}")
        if args.export and prompt_record.export_error(args.export):
            p.error(prompt_record.export_error(args.export))
        try:
            table = prompt_record.prompts(args.run_dir)
        except prompt_record.NoPromptRecord as exc:
            print(f"python -m mmcore prompts: {exc}", file=sys.stderr)
            return 1
        if args.export:
            written = prompt_record.export(table[table["flag"].isin(args.keep)], args.export)
            print(f"{written} prompts ({', '.join(args.keep)}) written to {args.export}", file=sys.stderr)
        if args.json:
            print(json.dumps(table.to_dict("records"), indent=1, ensure_ascii=False, default=str))
            return
        for row in table.itertuples():
            text = " ".join(row.prompt.split())[-60:]
            print(f"{row.prompt_id:5d} seen {row.times_seen:3d} reward {row.mean_reward:7.3f} pass {row.pass_rate:5.2f} "
                  f"equal {row.zero_std_share:4.2f} steps {row.first_step}-{row.last_step} {row.flag:12s}"
                  f"{' no-advantage' if row.no_advantage else ''}  {text}")
    p.set_defaults(handler=run)


COMMANDS = [add_submit, add_status, add_stop, add_delete, add_list, add_history, add_audit, add_backup, add_restore,
            add_export, add_queue, add_data, add_rescore, add_prompts, add_runs, add_diff,
            add_annotate, add_sweep, add_notify]


#: The program's name in usage and error lines, as it was started: the installed command (`minimind`, from
#: pyproject's scripts) or the module (`python -m mmcore`, mmcore/__main__.py).
COMMAND_NAME = "minimind"
MODULE_NAME = "python -m mmcore"


def build_parser(prog=COMMAND_NAME):
    parser = argparse.ArgumentParser(prog=prog, description="MiniMind dashboard jobs from the shell.")
    parser.set_defaults(prog=prog)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv=None, prog=COMMAND_NAME):
    args = build_parser(prog).parse_args(argv)
    try:
        with api.called_from(core.CLI):
            if problem := core.roles_file_problem():  # reads too: a broken roles file closes every door
                raise api.Refused(problem)
            return args.handler(args) or 0
    except api.AuditUnavailable as exc:  # nothing was done: the act could not be recorded (exit 2, as a usage error)
        print(f"{args.prog} {args.command}: {exc}", file=sys.stderr)
        return 2
    except api.Refused as exc:
        print(f"{args.prog} {args.command}: {exc}", file=sys.stderr)
        return 1


def dashboard(argv=None):
    """`minimind-dashboard [OPTIONS]`: `streamlit run streamlit_app.py [OPTIONS]` from the repository root,
    so the project's .streamlit/config.toml applies wherever it is started."""
    argv = sys.argv[1:] if argv is None else list(argv)
    os.chdir(ROOT)
    os.execv(sys.executable, [sys.executable, "-m", "streamlit", "run", str(ROOT / "streamlit_app.py"), *argv])
