"""`python -m mmcore COMMAND ...`: the dashboard from a shell.

    python -m mmcore export out/full_sft_512.pth exported/full_sft_512 [--lora out/lora/x_512.pth]

Each subcommand is one `add_*` function that registers its parser and a handler; a new one is a new
function added to `COMMANDS`. A handler may return an exit status (None means 0).
"""
import argparse
import sys

from mmcore.export import add_export

#: Every subcommand, in the order `--help` lists them.
COMMANDS = [add_export]


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m mmcore", description="MiniMind dashboard from the shell.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.handler(args) or 0


if __name__ == "__main__":
    sys.exit(main())
