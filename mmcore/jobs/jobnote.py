"""A job's note (how it ended when its trainer could not tell, or why it is held), kept as a message.

The job store's `note` column holds JSON text, `{"key": "note.cancelled", "params": {...}}`
(`stored`), written by the store, the supervisors, the scheduler and the backends. A page words it in
the viewer's language (`note_text`), the API and the CLI in English (`english`). A note stored as
plain text (by older versions) is shown as it is.
"""
from mmcore.base import i18n
from mmcore.base.i18n import language, message, word


def stored(key, **params):
    """The `note` column's text for the message `key` with `params` (which may hold messages)."""
    return i18n.stored(message(key, **params))


def _parse(text):
    return i18n.read_stored(text, "key", str)


def note_text(text):
    """A stored note in the current language; a plain-text note as it is ("" for none)."""
    parsed = _parse(text)
    return str(text or "") if parsed is None else str(word(parsed))


def english(text):
    """A stored note in English, whatever the viewer chose (the CLI, the API); None stays None."""
    if text is None:
        return None
    with language("en"):
        return note_text(text)
