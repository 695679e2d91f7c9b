"""The subcommands about runs and what they recorded: runs, diff, annotate, sweep, notify, rescore and
prompts."""
import argparse
import json
import sys

from mmcore import api
from mmcore.cli.shared import cell, pairs, time_text, user_option


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
        print(table.to_string(index=False, na_rep="", float_format=cell) if len(table) else "no runs")
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
        rows += [(name, *map(cell, values)) for name, values in found["params"].items()]
        rows += [(f"data {f['param']}", *(
            next((f"{g['path']} {g['size']} B sha256:{(g['sha256'] or '?')[:12]}" for g in d["files"]
                  if g["param"] == f["param"]), "") for d in found["data"]))
                 for f in (found["data"][0]["files"] if found["data"] else [])]
        rows.append(("code", *((c["commit"] or "unknown")[:12] + ("+changes" if c["dirty"] else "")
                               for c in found["code"])))
        rows += [(key, *map(cell, values)) for key, values in found["results"].items()]
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
    user_option(p)

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
    user_option(p)

    def run(args):
        if args.stop is not None:
            print(f"sweep {args.stop}: stopping jobs {api.stop_sweep(args.stop, user=args.user)}")
            return
        if args.retry is not None:
            print(f"sweep {args.retry}: new jobs {api.retry_sweep(args.retry, user=args.user)}")
            return
        try:
            base = pairs(args.values)
            grid = {k: text.split(",") for k, text in pairs(args.grid, "--grid").items()}
            ranges = {}
            for k, text in pairs(args.random, "--random").items():
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
    user_option(p)

    def run(args):
        if args.failures:
            for f in api.notification_failures():
                print(f"{time_text(f['at'])}  job {f['job']}  {f['event']:<14} {f['target']}  tries {f['attempts']}: "
                      f"{f['error']}")
            return
        if args.events is None:
            p.error("give --events (or --failures)")
        kept = api.set_notifications([e.strip() for e in args.events.split(",") if e.strip()], args.email,
                                     user=args.user)
        print(f"events: {', '.join(kept['events']) or '-'}; e-mail: {kept['email'] or '-'}")
    p.set_defaults(handler=run)


def add_rescore(sub):
    p = sub.add_parser("rescore", help="score every stored response of a run again with another reward")
    p.add_argument("run_dir", help="the run's records folder (its rollouts.sqlite)")
    p.add_argument("--reward", required=True, help="rule, format, py:MODULE:FUNCTION (an admin-trusted function), "
                                                   "or a reward-model folder (a transformers folder)")
    p.add_argument("--name", default=None, help="recorded as rescore/NAME (default: the reward's name)")
    p.add_argument("--json", action="store_true", help="the summary and every response's scores, as JSON "
                                                      '(with --queue: {"job": id})')
    p.add_argument("--queue", action="store_true", help="queue it as a job (small-job lane, progress on Jobs) "
                                                       "and print its id instead of waiting")
    user_option(p)

    def run(args):
        if args.queue:
            job_id = api.rescore(args.run_dir, args.reward, name=args.name, user=args.user, wait=False)
            print(json.dumps({"job": job_id}) if args.json else f"rescore queued as job {job_id}")
            return
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
    user_option(p)

    def run(args):
        from mmcore.runs import prompt_record
        unknown = [f for f in args.keep if f not in prompt_record.FLAGS]
        if unknown:
            p.error(f"--keep takes {', '.join(prompt_record.FLAGS)}; got {', '.join(unknown)}")
        try:
            table = prompt_record.prompts(args.run_dir)
        except prompt_record.NoPromptRecord as exc:
            print(f"python -m mmcore prompts: {exc}", file=sys.stderr)
            return 1
        if args.export:  # the act: inside the write roots, a new file, audited (Refused exits 1)
            written = api.export_prompts(args.run_dir, args.export, keep=args.keep, user=args.user)
            print(f"{written} prompts ({', '.join(args.keep)}) written to {args.export}", file=sys.stderr)
        if args.json:
            print(json.dumps(table.to_dict("records"), indent=1, ensure_ascii=False, default=str))
            return
        for row in table.itertuples():
            text = " ".join(row.prompt.split())[-60:]
            print(f"{row.prompt_id:5d} seen {row.times_seen:3d} reward {row.mean_reward:7.3f} "
                  f"pass {row.pass_rate:5.2f} "
                  f"equal {row.zero_std_share:4.2f} steps {row.first_step}-{row.last_step} {row.flag:12s}"
                  f"{' no-advantage' if row.no_advantage else ''}  {text}")
    p.set_defaults(handler=run)
