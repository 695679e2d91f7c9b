"""Preformatted text as the pages show it. The end of a log: a box that opens at its last line (where
a run says "finished", "failed" or "killed"), wraps long lines instead of cutting them, and scrolls
up for the earlier ones. A job's command: the same box at its full height.

Plain HTML, not `st.code`: the code block's syntax highlighter is 1.5 MB of script that a fresh page
loads and runs before it finishes drawing (on Jobs, before the jobs table)."""
import html

MAX_HEIGHT_PX = 400

_BOX = "border-radius:0.5rem;background:rgba(128,128,128,0.08);padding:0.75rem 1rem"
# column-reverse makes the browser anchor the scroll position at the bottom of the box: it opens at
# the end and stays there as the log grows, with no script.
_TAIL_BOX = "display:flex;flex-direction:column-reverse;overflow-y:auto;max-height:{height}px;" + _BOX
_PRE = ("margin:0;white-space:pre-wrap;overflow-wrap:anywhere;font-family:'Source Code Pro',monospace;"
        "font-size:0.8rem;line-height:1.45;background:none")


def tail_html(lines, empty="(empty)", height=MAX_HEIGHT_PX):
    """HTML of a log tail (`lines` without newlines); text is escaped, so a log cannot inject markup."""
    text = "\n".join(lines) if lines else empty
    return (f'<div class="minimind-log-tail" style="{_TAIL_BOX.format(height=int(height))}">'
            f'<pre style="{_PRE}">{html.escape(text)}</pre></div>')


def command_html(command):
    """HTML of a command line (or its environment) in the tail's box, wrapped, selectable to copy;
    escaped like a tail."""
    return (f'<div class="minimind-command" style="{_BOX}">'
            f'<pre style="{_PRE}">{html.escape(command)}</pre></div>')
