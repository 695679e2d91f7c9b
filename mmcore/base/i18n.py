"""The dashboard's languages: English and Simplified Chinese.

Every label, help text, message and button text a page shows is `t(key, **values)`: the text of
`key` in the viewer's language, formatted with `values` (`str.format`). One flat table per language,
with the same keys (a test checks it): `mmcore/base/locales/<language>.json`, except for the English
texts the trainers print too, which have their one place in trainer/rules: the options' help texts
(`help.*`, trainer/rules/args.py) and the option checks' messages (trainer/rules/messages.py). The
English table takes those from there; zh.json translates them under the same keys.

A text kept before its reader is known (a job's note, why a job waits, a field's error, an exception)
is a `Message` (trainer/rules/messages.py, made with `message(key, **params)`), worded when shown
(`word`); the job store keeps messages as JSON (`stored`, read back with `read_stored`).

The language is chosen per viewer: an explicit `language(...)` block (tests, command line), else the
Streamlit session's choice (`STATE_KEY`), which `choose_language` fills on a session's first run from
the viewer's remembered choice (a cookie), else the browser's language, else English.
"""
import contextlib
import functools
import json
import re
from contextvars import ContextVar
from pathlib import Path

from trainer.rules import args as rule_args
from trainer.rules import messages
from trainer.rules.messages import Message, message  # noqa: F401  (the dashboard's `message` is this one)

LOCALES_DIR = Path(__file__).with_name("locales")
LANGUAGES = {"en": "English", "zh": "简体中文"}  # code -> the language's name in itself
DEFAULT = "en"
STATE_KEY = "app.language"  # session state: the session's language code
COOKIE = "minimind_language"  # the browser's remembered choice, read on its next visit
COOKIE_MAX_AGE_S = 400 * 24 * 3600  # browsers cap cookie lifetimes at 400 days

# Keys whose text is the same in every language: names and symbols (checked by a test).
SAME_IN_EVERY_LANGUAGE = frozenset({"app.gpus", "device.cpu", "param.alpha", "param.beta", "train.gpu", "type.dpo",
                                    "type.grpo", "type.lora", "type.ppo", "type.spo", "rl.panel.kl"})

_forced = ContextVar("minimind_language", default=None)
# (language, key) pairs asked for but missing from that language's table; a test keeps it empty.
missing = set()


def file_table(lang):
    """The texts of one language's file, `locales/<lang>.json`: key -> text."""
    with open(LOCALES_DIR / f"{lang}.json", encoding="utf-8") as f:
        return json.load(f)


def rules_english():
    """The English texts whose one place is trainer/rules: help texts and the option checks' messages."""
    return {**rule_args.help_texts(), **messages.TEMPLATES}


@functools.cache
def table(lang):
    """The texts of one language: key -> text (read once per process). English: en.json and the
    trainer's own texts (`rules_english`)."""
    texts = file_table(lang)
    return {**texts, **rules_english()} if lang == DEFAULT else texts


def normalize(code):
    """A language code of ours from a browser's ("zh-CN", "zh_Hans", "en-US;q=0.9"), or None."""
    if not code:
        return None
    code = str(code).strip().lower().replace("_", "-").split(";")[0]
    base = code.split("-")[0]
    return base if base in LANGUAGES else None


def from_accept_language(header):
    """The first of our languages in an HTTP Accept-Language header, by its q-weights, or None."""
    ranked = []
    for i, part in enumerate((header or "").split(",")):
        match = re.match(r"\s*([A-Za-z_-]+)\s*(?:;\s*q=([0-9.]+))?", part)
        if match:
            try:
                q = float(match.group(2)) if match.group(2) else 1.0
            except ValueError:
                q = 0.0
            ranked.append((-q, i, match.group(1)))
    for _, _, code in sorted(ranked):
        if (lang := normalize(code)) is not None:
            return lang
    return None


#: Reads the running session's language (None outside a session); set by the widgets wing
#: (`mmcore.widgets.session_language`), so that this module needs no Streamlit.
_session_language = None


def read_session_language_with(reader):
    """Use `reader()` -> language code or None as the session's choice (see `current`)."""
    global _session_language
    _session_language = reader


def current():
    """The language code texts are given in right now."""
    lang = _forced.get() or (_session_language() if _session_language else None)
    return lang if lang in LANGUAGES else DEFAULT


@contextlib.contextmanager
def language(lang):
    """Give texts in `lang` inside the block (in this thread/context), whatever the session chose."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}; known: {', '.join(LANGUAGES)}")
    token = _forced.set(lang)
    try:
        yield
    finally:
        _forced.reset(token)


def t(key, **values):
    """The text of `key` in the current language, formatted with `values`.

    A key missing from that language falls back to English (and is recorded in `missing`); a key
    missing everywhere shows as the key itself, so a gap is visible rather than a crash.
    """
    lang = current()
    text = table(lang).get(key)
    if text is None:
        missing.add((lang, key))
        text = table(DEFAULT).get(key, key)
    return text.format(**values) if values else text


def word(value):
    """A message (a `Message`, or one read back from the store: `{"key": ..., "params": {...}}`) in the
    current language; a list of values is joined by `sep.list`, a plain value is given back as it is
    (so a text's format spec, `{share:.0%}`, still applies)."""
    if isinstance(value, Message):
        return t(value.key, **{name: word(v) for name, v in value.params.items()})
    if isinstance(value, dict) and "key" in value:
        return t(value["key"], **{name: word(v) for name, v in (value.get("params") or {}).items()})
    if isinstance(value, (list, tuple)):
        return t("sep.list").join(str(word(v)) for v in value)
    return value


def _english_of(key, params):
    """The English wording of a message: called for every `Message` made (a queue round makes
    thousands), so it reads the English table directly; a nested message already is its English text."""
    english = table(DEFAULT)
    text = english.get(key)
    if text is None:
        missing.add((DEFAULT, key))
        return key
    return text.format(**{name: _english_value(v, english) for name, v in params.items()}) if params else text


def _english_value(value, english):
    if isinstance(value, dict) and "key" in value:  # a message read back from the store
        return _english_of(value["key"], value.get("params") or {})
    if isinstance(value, (list, tuple)):
        return english["sep.list"].join(str(_english_value(v, english)) for v in value)
    return value  # a plain value, or a Message: a str of its English wording


messages.word_english_with(_english_of)  # a Message reads as its English wording

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # one encoder: a queue round stores 1,000s


def stored(value):
    """JSON text of `value` with its messages kept as data (`{"key": ..., "params": {...}}`): what the
    job store keeps, worded by whoever reads it (`read_stored`, then `word`). A message's text is made
    once: a queue round stores the same reason for many jobs."""
    if isinstance(value, Message):
        try:
            return value.stored_json
        except AttributeError:
            value.stored_json = _JSON.encode(messages.data(value))
            return value.stored_json
    return _JSON.encode(messages.data(value))


def read_stored(text, field, kind):
    """The dict that `stored` wrote, when `text` is one holding `field` of type `kind`; None for a text
    stored plain (by older versions), for none at all, or for anything else."""
    if not text or not str(text).startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get(field), kind) else None


def english(value):
    """A message (see `message`) in English, whatever the viewer chose: for logs, the API, the CLI."""
    with language(DEFAULT):
        return word(value)


class MessageError(ValueError):
    """An error kept as messages (see `message`): `str(error)` words them, joined by `sep.parts`, in
    the language current when it is shown, not when it was raised."""

    def __init__(self, messages):
        self.messages = [messages] if isinstance(messages, (str, dict)) else list(messages)
        super().__init__(*self.messages)

    def __str__(self):
        return t("sep.parts").join(str(word(m)) for m in self.messages)


def field_error(error):
    """A field's error message ("must be at least 1") in the current language: a `Message` is worded
    from its key, a plain text is shown as it is."""
    return str(word(error))


def relabel(session_state, *keys):
    """Call before drawing keyed widgets whose option labels are translated (select boxes,
    multiselects, radios). Streamlit keeps such a widget's choice as the text of its label, so after
    a language switch the browser would show, and send back, the other language's label, and the
    choice would fall back to its default at the next run. Setting each value again before its widget
    is drawn sends the label in the viewer's language. (A widget whose value is set this way must not
    also be given a default other than its first option: Streamlit warns about both.)"""
    for key in keys:
        if key in session_state:
            session_state[key] = session_state[key]


def keep_choice(session_state, key, default):
    """`relabel` for a widget whose default is not its first option: its choice (`default` on the
    first run) is always set through session state, so draw the widget without `index`."""
    session_state[key] = session_state.get(key, default)


def choose_language(session_state, cookies=None, locale=None, accept_language=None):
    """Set the session's language on its first run (later runs keep it) and return it.

    The viewer's remembered choice (cookie) wins, then the browser's language (`navigator.language`
    as `st.context.locale`, or the Accept-Language header), then English.
    """
    lang = session_state.get(STATE_KEY)
    if lang not in LANGUAGES:
        lang = (normalize((cookies or {}).get(COOKIE)) or normalize(locale)
                or from_accept_language(accept_language) or DEFAULT)
        session_state[STATE_KEY] = lang
    return lang


def remember_script(lang):
    """HTML with a script that stores `lang` in the browser's cookie (run in a same-origin frame)."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}")
    return (f"<script>parent.document.cookie = '{COOKIE}={lang}; path=/; "
            f"max-age={COOKIE_MAX_AGE_S}; SameSite=Lax';</script>")


def placeholders(text):
    """The `{name}` fields of a text (how a test checks both languages take the same values)."""
    return {m.group(1) for m in re.finditer(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)[^{}]*\}", text)}


def browser_preferences(context):
    """What `choose_language` needs from Streamlit's `st.context`: the cookies, the browser's
    language and the Accept-Language header (each empty where this Streamlit cannot tell)."""
    found = {}
    for name, read in (("cookies", lambda: dict(context.cookies)), ("locale", lambda: context.locale),
                       ("accept_language", lambda: context.headers.get("Accept-Language"))):
        try:
            found[name] = read()
        except Exception:  # no browser behind this run (AppTest, bare mode)
            found[name] = None
    return found
