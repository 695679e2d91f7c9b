"""What the subcommands of `minimind` share: how they print a time and a cell, read `name=value` items, and
name the acting user."""
import argparse
import datetime


def time_text(ts):
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else ""


def pairs(items, option="--set"):
    """`--set name=value` items (or those of `option`) -> {name: value}; argparse errors for a malformed item."""
    values = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"{option} takes name=value, got {item!r}")
        values[name.strip()] = value
    return values


def user_option(parser):
    parser.add_argument("--user", default=None, help="acting user (default: the OS user); owns what it submits")


def cell(value):
    """A table cell of `runs` and `diff`: blank for None, 4 significant digits for a float."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
