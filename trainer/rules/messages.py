"""Texts kept as data: one type, `Message`, for every text that is worded for whoever reads it.

A `Message` is made from a message key and its values, `message("field.at_least", n="1")`, and keeps
both (`key`, `params`), so the dashboard can word it in its viewer's language when it shows it
(`mmcore.base.i18n.word`, from its language files). It is also a str: its English wording, which is
what a trainer prints and what a log, the API and the CLI show, and what a message compares equal to.
The job store keeps messages as data, `{"key": ..., "params": {...}}` (`data`).

English wording: the messages the rules give (the option checks of trainer/rules/args.py and
trainer/rules/roots.py) have their English text here, in `TEMPLATES`, since a trainer has no dashboard
and its language files; the dashboard's English table takes them from here. Every other message is
worded in English by the dashboard (`word_english_with`, set by mmcore.base.i18n).
"""

#: The English text of each message the rules give: the one place of these texts. The dashboard's
#: English table includes them; its other languages translate them under the same keys.
TEMPLATES = {
    "field.one_of": "must be one of {choices}",
    "field.positive": "must be greater than 0",
    "field.at_least": "must be at least {n}",
    "field.at_most": "must be at most {n}",
    "field.head_multiple": "must be a multiple of {multiple} ({heads} attention heads, each of an even size), got {got}",
    "field.eval_one_source": "give either a held-out file or a number of held-out rows, not both",
    "field.name_too_long": "must be at most {n} characters",
    "field.plain_name": "must be a plain name: letters, digits, '.', '_' and '-', starting with a letter or digit "
                        "(no folders)",
    "field.outside_read": "{value} is outside the folders a job may read from ({roots})",
    "field.outside_write": "{value} is outside the folders a job may write to ({roots})",
    "field.path_unusable": "{value} is not a path a job may write to (empty, a NUL character, or too long)",
    "field.symlink_out": "the job would write {path}, which resolves to {target}: outside the folders a job may "
                         "write to (a symlink?)",
}

# (key, params) -> English text, for keys not in TEMPLATES; set by the dashboard (mmcore.base.i18n).
_english = None


def word_english_with(render):
    """Word messages whose key is not in `TEMPLATES` with `render(key, params)` -> English text."""
    global _english
    _english = render


def _english_text(key, params):
    template = TEMPLATES.get(key)
    if template is not None:
        return template.format(**params)
    if _english is not None:
        return _english(key, params)
    return key  # no wording known here: the key shows, rather than a crash


class Message(str):
    """A text kept as data (`key`, `params`) that reads as its English wording. A parameter is a plain
    value, a message, or a list of them. Make one with `message`."""

    def __new__(cls, key, params):
        text = super().__new__(cls, _english_text(key, params))
        text.key, text.params = key, params
        return text

    def __reduce__(self):  # copied and pickled by its key and values, not its English text
        return Message, (self.key, self.params)


def message(key, /, **params):
    """The message `key` with the values `params`."""
    return Message(key, params)


_PLAIN = frozenset({int, float, bool, str, type(None)})


def data(value):
    """`value` with each message in it as `{"key": ..., "params": {...}}` (lists as lists): JSON-ready
    when the values are. What a store keeps; `mmcore.base.i18n.word` words it back. A queue round
    stores thousands of these: plain values are passed through without a call, and a message's data
    is made once."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if isinstance(value, Message):
        try:
            return value.stored_data
        except AttributeError:
            value.stored_data = {"key": value.key, "params": data(value.params)}
            return value.stored_data
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _PLAIN else data(v) for v in value]
    if isinstance(value, dict):
        return {name: v if type(v) in _PLAIN else data(v) for name, v in value.items()}
    return value
