"""Option error messages that a dashboard can word in its viewer's language.

The option checks (trainer/rules/args.py, trainer/rules/roots.py, and the dashboard's form parsing) give their
messages in English: that is what a trainer prints. Each message is also tagged with a message key
and its values (`key`, `params`), so the dashboard words it from its language files
(`mmcore/base/locales/<language>.json`, where the English text of `key` is the same template) instead of
matching the English words. Everywhere else a message is the plain string it reads as.
"""


class Message(str):
    """An English message (a str) with the message key and values it was made from."""
    key = None
    params = {}


def message(key, template, **params):
    """`template` filled with `params` (str.format), tagged with `key` and `params`."""
    text = Message(template.format(**params))
    text.key, text.params = key, params
    return text
