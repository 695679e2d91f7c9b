"""The end of a log as the pages show it: a box that opens at its last line (where a run says
"finished", "failed" or "killed"), wraps long lines instead of cutting them, and scrolls up for
the earlier ones."""
import html

MAX_HEIGHT_PX = 400

# column-reverse makes the browser anchor the scroll position at the bottom of the box: it opens at
# the end and stays there as the log grows, with no script.
_BOX = ("display:flex;flex-direction:column-reverse;overflow-y:auto;max-height:{height}px;"
        "border-radius:0.5rem;background:rgba(128,128,128,0.08);padding:0.75rem 1rem")
_PRE = ("margin:0;white-space:pre-wrap;overflow-wrap:anywhere;font-family:'Source Code Pro',monospace;"
        "font-size:0.8rem;line-height:1.45;background:none")


def tail_html(lines, empty="(empty)", height=MAX_HEIGHT_PX):
    """HTML of a log tail (`lines` without newlines); text is escaped, so a log cannot inject markup."""
    text = "\n".join(lines) if lines else empty
    return (f'<div class="minimind-log-tail" style="{_BOX.format(height=int(height))}">'
            f'<pre style="{_PRE}">{html.escape(text)}</pre></div>')
