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
    python -m mmcore rescore RUN_DIR --reward rule|format|py:MODULE:FUNCTION|FOLDER [--name NAME] [--json] [--queue]
    python -m mmcore prompts RUN_DIR [--json] [--export FILE --keep learnable]
    python -m mmcore runs [--type pretrain] [--search WORDS] [--json]
    python -m mmcore diff 12 14 [--all] [--json]
    python -m mmcore annotate 12 [--tags baseline,lr] [--note TEXT]
    python -m mmcore sweep pretrain --set K=V --grid learning_rate=0.001,0.0005 [--random K=LO:HI --trials N]
                           [--seeds N] [--priority N] [--json]; sweep TYPE --stop SWEEP | --retry SWEEP
    python -m mmcore notify --events failed,guard_stopped [--email me@example.com] | --failures

Each subcommand is one `add_*` function that registers its parser and handler (those about jobs and the store
in job_commands.py, those about runs and their records in run_commands.py, what they share in shared.py); a new
one is a new function added to `COMMANDS`. A handler may return an exit status (None means 0); a refusal
(`api.Refused`) exits 1 with the reason on stderr, a usage error 2. What changes something is an act of
`mmcore.actions` (through `mmcore.api`, or directly for restore and export), recorded as asked from "cli".
"""
import argparse
import os
import sys

from mmcore import api
from mmcore.actions import core
from mmcore.base.paths import ROOT
from mmcore.cli.job_commands import (add_audit, add_backup, add_data, add_delete, add_export, add_history, add_list,
                                     add_queue, add_restore, add_status, add_stop, add_submit)
from mmcore.cli.run_commands import add_annotate, add_diff, add_notify, add_prompts, add_rescore, add_runs, add_sweep

#: Every subcommand, in the order `--help` lists them.
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
