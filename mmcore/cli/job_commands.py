"""The subcommands about jobs and the store: submit, status, stop, delete, list, history, audit, backup,
restore, export, queue, and data check."""
import argparse
import json
import sys

from dataset.formats import KIND_OF_TYPE
from mmcore import api
from mmcore.actions import core, job_acts, model_acts
from mmcore.base.paths import default_home
from mmcore.cli.shared import pairs, time_text, user_option
from mmcore.data import report as data_report
from mmcore.jobs import storeguard
from trainer.rules.export_options import add_export_options


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
    user_option(p)

    def run(args):
        try:
            values = pairs(args.values)
            guards = pairs(args.guards, "--guard")
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
            print(f"{key}: {time_text(job[key])}")
    p.set_defaults(handler=run)


def add_stop(sub):
    p = sub.add_parser("stop", help="stop a queued or running job (SIGTERM, then SIGKILL after the grace period)")
    p.add_argument("job_id")
    p.add_argument("--grace", type=float, default=api.runner.DEFAULT_GRACE_S,
                   help="seconds between SIGTERM and SIGKILL")
    p.add_argument("--wait", action="store_true", help="return once the job's end is recorded")
    user_option(p)

    def run(args):
        if api.stop(args.job_id, user=args.user, grace=args.grace, wait=args.wait):
            print(f"job {args.job_id}: " + (api.get(args.job_id)["status"] if args.wait else "stopping"))
        else:
            print(f"job {args.job_id} had already ended")
    p.set_defaults(handler=run)


def add_delete(sub):
    p = sub.add_parser("delete", help="delete a finished job and its log (not its weights)")
    p.add_argument("job_id")
    user_option(p)

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
                  f"{time_text(j['created_at']):<19}  {j['name']}")
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
                    print(f"{time_text(r['at'])}  {r['user']:<20} {r['action']:<8} {job:<10} ({r['entry']}) "
                          f"refused: {reason}")
            return
        for e in api.history(args.job_id, args.limit or None):
            job = "" if e["job_id"] is None else f"job {e['job_id']}"
            print(f"{time_text(e['at'])}  {e['user']:<20} {e['action']:<8} {job:<10} {json.dumps(e['detail'])}")
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
    user_option(p)

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
    user_option(r)

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
