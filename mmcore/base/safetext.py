"""User-written text shown as text: job names, notes, paths, file names, identities and messages that
quote them are put into Markdown (st.markdown, st.caption, st.error, widget labels...) only through
`md`, so `![x](http://...)`, `[Session expired](http://...)`, `:red[...]`, headings or HTML render
as the characters they are, never as images, links, colours or layout.

Escaping is not enough for bare addresses: Streamlit's GitHub-flavoured Markdown turns `http://...`,
`https://...` and `www.x...` in the *rendered* text into links, escaped or not. `md` puts an invisible
WORD JOINER (U+2060) inside each of those patterns (after `:` before `/`, after `www` before `.`), so
the text reads the same and no web address in it is a link. E-mail addresses are left whole on purpose:
they are the signed-in identities people copy into roles.toml, and GFM makes them at most a `mailto:`
link (no page to open).
"""
import re

# Every ASCII punctuation character may be backslash-escaped in CommonMark, and then stands for itself.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


#: Invisible, zero-width, and no break opportunity: the text reads (and wraps) as before.
WORD_JOINER = "\u2060"
# Where GFM's web autolink literals start: a scheme's "://" (http, https, and any other), "www.".
_AUTOLINK = re.compile(r"(?<=:)(?=/)|(?<=www)(?=\.)", re.IGNORECASE)


def defuse_links(text):
    """`text` with a WORD JOINER inside every pattern GFM would turn into a link (see the module docstring)."""
    return _AUTOLINK.sub(WORD_JOINER, text)


def md(value):
    """`value` as Markdown that renders literally, on one line, with no link in it."""
    text = defuse_links(" ".join(str(value).splitlines()))
    return _PUNCTUATION.sub(r"\\\1", text)


def md_lines(text):
    """Several lines of user-derived text (a message listing reasons) as literal Markdown, line by line."""
    return "  \n".join(md(line) for line in str(text).splitlines())
