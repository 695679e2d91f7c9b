"""Languages: both tables have the same keys and fields, the choice of language, and the pages in
each language (AppTest) with no text missing from either table."""
import pytest

from _pages_helpers import open_page, texts
from mmcore import i18n
from mmcore.i18n import t


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))


def test_every_language_has_the_same_keys_and_fields():
    english = i18n.table("en")
    for lang in i18n.LANGUAGES:
        table = i18n.table(lang)
        assert set(table) == set(english), f"{lang}: keys differ from English"
        for key, text in table.items():
            assert text.strip(), f"{lang}: {key} is empty"
            assert i18n.placeholders(text) == i18n.placeholders(english[key]), f"{lang}: fields of {key}"


def test_chinese_table_is_chinese():
    """A key copied over untranslated would pass the key check: each Chinese text has Chinese in it,
    except texts that are names or symbols in both languages."""
    same_in_both = {key for key, text in i18n.table("en").items() if i18n.table("zh")[key] == text}
    untranslated = {key for key in same_in_both if not any("\u4e00" <= ch <= "\u9fff" for ch in text_of(key))}
    assert untranslated <= i18n.SAME_IN_EVERY_LANGUAGE, sorted(untranslated - i18n.SAME_IN_EVERY_LANGUAGE)


def text_of(key):
    return i18n.table("zh")[key]


def test_t_formats_in_the_chosen_language():
    with i18n.language("zh"):
        assert t("app.job_counts", running=2, queued=1) == "**任务** · 运行中 2 · 排队 1"
    with i18n.language("en"):
        assert t("app.job_counts", running=2, queued=1) == "**Jobs** · 2 running · 1 queued"
    assert i18n.current() == "en"  # outside a block and outside Streamlit: English


def test_a_missing_key_falls_back_and_is_recorded():
    with i18n.language("zh"):
        assert t("no.such.key") == "no.such.key"
    assert ("zh", "no.such.key") in i18n.missing
    i18n.missing.discard(("zh", "no.such.key"))


@pytest.mark.parametrize("cookies, locale, header, expected", [
    ({}, None, None, "en"),
    ({}, "zh-CN", None, "zh"),
    ({}, "zh_Hans", None, "zh"),
    ({}, "fr-FR", "fr-FR,zh-CN;q=0.8,en;q=0.5", "zh"),
    ({}, None, "de,en-US;q=0.9,zh;q=0.8", "en"),
    ({i18n.COOKIE: "zh"}, "en-US", "en-US", "zh"),  # the remembered choice wins
    ({i18n.COOKIE: "xx"}, "en-US", None, "en"),  # a cookie we cannot use is ignored
])
def test_language_of_a_new_session(cookies, locale, header, expected):
    state = {}
    assert i18n.choose_language(state, cookies, locale, header) == expected
    assert state[i18n.STATE_KEY] == expected
    assert i18n.choose_language(state, {i18n.COOKIE: "en" if expected == "zh" else "zh"}) == expected  # kept


def test_remember_script_sets_a_cookie_for_the_whole_site():
    script = i18n.remember_script("zh")
    assert f"{i18n.COOKIE}=zh" in script and "path=/" in script
    with pytest.raises(ValueError):
        i18n.remember_script("en'; alert(1); '")


@pytest.mark.parametrize("lang", list(i18n.LANGUAGES))
def test_sidebar_in_each_language(lang):
    at = open_page(state={i18n.STATE_KEY: lang})
    assert not at.exception
    with i18n.language(lang):
        assert f"### {t('app.title')}" in texts(at.sidebar.markdown)
        assert t("app.cpu_only") in texts(at.sidebar.caption)
    assert not {key for lang_, key in i18n.missing if lang_ == lang}
