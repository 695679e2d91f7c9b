"""A sequence from the data worker drawn token by token, its loss mask coloured (HTML for st.html).

Each token is a span with `data-mask` = "trained" (the loss counts on it), "context" (it is read, not
trained) or "cut" (max_seq_len drops it: beyond the cut, or before it for an RL prompt, which keeps
its end). The text is escaped; newlines and tabs show as visible marks.
"""
import html

STYLE = """<style>
.mm-seq { font-family: ui-monospace, monospace; font-size: 0.85rem; line-height: 1.9; white-space: pre-wrap;
          word-break: break-all; }
.mm-tok { border-radius: 3px; padding: 1px 1px; margin: 0 1px 0 0; }
.mm-trained { background: rgba(33, 195, 84, 0.28); border-bottom: 2px solid rgb(33, 160, 70); }
.mm-context { background: rgba(128, 128, 128, 0.16); }
.mm-cut { background: rgba(255, 75, 75, 0.16); color: rgba(128, 128, 128, 0.9); text-decoration: line-through; }
.mm-cutmark { color: rgb(255, 75, 75); font-weight: 700; padding: 0 4px; }
.mm-legend span { margin-right: 12px; }
</style>"""


def classes(sequence):
    """One of "trained", "context", "cut" per token of a worker sequence."""
    n, kept = len(sequence["ids"]), sequence["kept"]
    first_kept = n - kept if sequence.get("keep_end") else 0
    out = []
    for i, trained in enumerate(sequence["trained"]):
        if i < first_kept or i >= first_kept + kept:
            out.append("cut")
        else:
            out.append("trained" if trained else "context")
    return out


def counts(sequence):
    """{"trained", "context", "cut"} token counts of a sequence."""
    found = {"trained": 0, "context": 0, "cut": 0}
    for c in classes(sequence):
        found[c] += 1
    return found


def _visible(text):
    return html.escape(text).replace("\n", "↵\n").replace("\t", "→\t")


def to_html(sequence, cut_label="max_seq_len", limit=4000, cut_limit=200):
    """The sequence's tokens as HTML spans (at most `limit` tokens, and `cut_limit` of those beyond a
    cut; the cut marked where it falls)."""
    kinds = classes(sequence)
    parts = [STYLE, '<div class="mm-seq">']
    previous, cut_shown, kept_seen = None, 0, False
    for i, (token, kind) in enumerate(zip(sequence["tokens"], kinds)):
        kept_seen = kept_seen or kind != "cut"
        cut_shown += kind == "cut" and kept_seen  # the tail a max_seq_len drops: a few are enough
        if i >= limit or cut_shown > cut_limit:
            parts.append(f'<span class="mm-cutmark">… +{len(kinds) - i}</span>')
            break
        if previous is not None and (previous == "cut") != (kind == "cut"):
            parts.append(f'<span class="mm-cutmark" data-cut="1">✂ {html.escape(cut_label)}</span>')
        parts.append(f'<span class="mm-tok mm-{kind}" data-mask="{kind}" title="#{i} id {sequence["ids"][i]} · {kind}">'
                     f'{_visible(token)}</span>')
        previous = kind
    parts.append("</div>")
    return "".join(parts)


def legend_html(names):
    """The colours' legend: `names` {"trained", "context", "cut"} -> text."""
    return (STYLE + '<div class="mm-legend">' + "".join(
        f'<span><span class="mm-tok mm-{k}">&nbsp;&nbsp;</span> {html.escape(names[k])}</span>'
        for k in ("trained", "context", "cut")) + "</div>")
