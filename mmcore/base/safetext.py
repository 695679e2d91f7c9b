"""User-written text shown as text: job names, notes, paths, file names, identities and messages that
quote them are put into Markdown (st.markdown, st.caption, st.error, widget labels...) only through
`md`, so `![x](http://...)`, `[Session expired](http://...)`, `:red[...]`, headings or HTML render
as the characters they are, never as images, links, colours or layout.
"""
import re

# Every ASCII punctuation character may be backslash-escaped in CommonMark, and then stands for itself.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def md(value):
    """`value` as Markdown that renders literally, on one line."""
    text = " ".join(str(value).splitlines())
    return _PUNCTUATION.sub(r"\\\1", text)


def md_lines(text):
    """Several lines of user-derived text (a message listing reasons) as literal Markdown, line by line."""
    return "  \n".join(md(line) for line in str(text).splitlines())
