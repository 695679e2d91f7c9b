"""Languages: both tables have the same keys and fields, the choice of language, and the pages in
each language (AppTest) with no text missing from either table."""
import re

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


def finished_job():
    import time
    from mmcore.store import JobStore
    store = JobStore()
    job_id = store.create("sft", "job-a", {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status="succeeded", started_at=time.time() - 60, ended_at=time.time(), exit_code=0)
    with open(store.get(job_id).log_path, "w") as f:
        f.write("".join(f"Epoch:[1/1]({s}/40) loss:{3 - s / 40:.4f} lr:0.0005 epoch_Time:0.0min:\n" for s in range(1, 41)))
    return job_id


def labels(at):
    """Every widget label and button text on the page."""
    found = []
    for kind in ("button", "selectbox", "multiselect", "text_input", "number_input", "radio", "checkbox", "toggle",
                 "slider", "select_slider", "text_area"):
        found += [w.label for w in getattr(at, kind) if getattr(w, "label", None)]
    return found


def has_chinese(text):
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


# Option values that are data or names, the same in every language.
DATA_OPTIONS = {"bfloat16", "float16", "float32", "none", "wandb", "swanlab", "English", "CPU"}


def shown_texts(at):
    """Every text the page shows: messages, captions, headings, widget labels, help texts and options
    (each as (where, text))."""
    found = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "error", "success"):
        found += [(kind, e.value) for e in getattr(at, kind)]
    found += [("expander", e.label) for e in at.get("expander")]
    for kind in ("button", "selectbox", "multiselect", "text_input", "number_input", "radio", "checkbox", "toggle",
                 "slider", "select_slider", "text_area"):
        for w in getattr(at, kind):
            found += [(kind, w.label)] + ([(f"{kind} help", w.help)] if getattr(w, "help", None) else [])
            if kind in ("selectbox", "multiselect", "radio"):
                # Job labels ("3 — name") and prompts followed on Logs ("What is 6*7? (#1)") are data.
                found += [(f"{kind} option", o) for o in w.options
                          if o not in DATA_OPTIONS and " — " not in o and not re.search(r"\(#\d+\)$", o)]
    return [(where, str(text)) for where, text in found if text]


def english_left(at):
    same = {i18n.table("en")[k] for k in i18n.SAME_IN_EVERY_LANGUAGE}
    return [(where, text) for where, text in shown_texts(at)
            if any(ch.isalpha() for ch in text) and not has_chinese(text) and text.strip("*# ") not in same]


def train_with_errors(at):
    """Train, GRPO, with a field the check refuses and a file name that is not one."""
    at.selectbox(key="train.type").set_value("grpo").run()
    at.number_input(key="train.grpo.learning_rate").set_value(0.0).run()
    at.text_input(key="train.grpo.save_weight").set_value("a/b").run()
    assert len(at.error) >= 2, texts(at.error)
    return at


def pipeline_section(at):
    at.radio(key="queue.launch_what").set_value("pipeline").run()
    return at


def sick_rl_job():
    """A finished GRPO job with metrics and rollouts records whose health check fires."""
    from mmcore.store import JobStore
    from test_page_records import recorded_job
    return recorded_job(JobStore(), steps=12, zero_std=1.0, name="sick")


# Expanders that build their content only while open (the queue's settings, a job's history, the
# audit trail), opened so that what they show is checked too.
OPENED = {"queue.settings_open": True, "jobs.history_open": True, "jobs.audit_open": True}


@pytest.mark.parametrize("page, setup, then", [
    ("pages/train.py", finished_job, None), ("pages/train.py", finished_job, train_with_errors),
    ("pages/train.py", finished_job, pipeline_section), ("pages/jobs.py", finished_job, None),
    ("pages/jobs.py", sick_rl_job, None), ("pages/logs.py", finished_job, None), ("pages/logs.py", sick_rl_job, None),
    ("pages/models.py", finished_job, None)])
def test_every_page_in_chinese_has_no_english_left(page, setup, then):
    """Messages, captions, help texts and options too, not only labels; names and data (job names,
    dtype values) are allowed."""
    job_id = setup()
    # The test's own thread formats option values too (AppTest calls format_func here): in Chinese as well.
    with i18n.language("zh"):
        at = open_page(page, query={"job": str(job_id)}, state={i18n.STATE_KEY: "zh", **OPENED})
        if then is not None:
            at = then(at)
        assert not at.exception, at.exception
        assert has_chinese(at.title[0].value)
        english = english_left(at)
    assert not english, f"{page} in Chinese still shows: {english}"
    assert not {key for lang, key in i18n.missing if lang == "zh"}


def test_every_parameter_has_its_help_in_each_language_and_the_english_is_the_scripts():
    from mmcore import forms, registry
    for train_type, spec in registry.TYPES.items():
        for p in spec.params:
            if p.name == "device":
                continue  # chosen by the device mode, not a field
            with i18n.language("en"):
                assert forms.param_help(train_type, p) == p.help, (train_type, p.name)
            with i18n.language("zh"):
                assert has_chinese(forms.param_help(train_type, p)), (train_type, p.name)
    assert not i18n.missing


FIELD_MESSAGES = [  # as trainer/args.py, trainer/roots.py, mmcore/command.py and mmcore/forms.py write them
    "must be at least 1", "must be at most 0.5", "must be greater than 0", "must be one of 0, 1", "must be 1 or 0",
    "must be a whole number, got 'x'", "must be a number, got 'abc'", "must be a finite number, got 'inf'",
    "must not start with '-'", "must be a single line", "must be GPU ids 0, 1, ..., got 'a'",
    "must not list a GPU twice", "must be cpu or cuda:N (N = GPU index), got 'tpu'", "is required",
    "must be at most 64 characters",
    "must be a plain name: letters, digits, '.', '_' and '-', starting with a letter or digit (no folders)",
    "'/etc' is outside the folders a job may read from (/data, /tmp)",
    "'/etc' is outside the folders a job may write to (/out)",
    "the job would write ../out/x.pth, which resolves to /etc/x.pth: outside the folders a job may write to (a symlink?)",
    "no GPU was found on this machine: choose CPU", "choose a GPU", "choose at least one GPU",
]


def test_field_messages_read_the_same_in_english_and_are_translated():
    for message in FIELD_MESSAGES:
        with i18n.language("en"):
            assert i18n.field_error(message) == message
        with i18n.language("zh"):
            assert has_chinese(i18n.field_error(message)), message
    assert i18n.field_error("something new") == "something new"  # unknown: shown as it is


def test_the_checks_messages_are_ones_the_table_knows():
    """The real checks' wording, not a copy of it: a changed sentence in trainer/args.py fails here."""
    from mmcore import command, registry
    from trainer import roots
    samples = [registry.param("sft", "epochs").check(0), registry.param("grpo", "top_p").check(2.0),
               registry.param("sft", "learning_rate").check(0.0), registry.param("sft", "use_moe").check(3),
               roots.name_problem("a/b"), roots.name_problem("x" * 500)]
    checked = command.check("sft", {"epochs": "abc", "batch_size": "1.5", "save_weight": "-x", "device": "tpu"})
    samples += list(checked.errors.values())
    for message in samples:
        with i18n.language("zh"):
            assert has_chinese(i18n.field_error(message)), message


def test_chart_titles_and_axes_speak_each_language_and_the_english_is_the_tables():
    from mmcore import charts, metrics, rlview
    with i18n.language("en"):
        assert {name: charts.chart_title(name) for name in charts.TITLES} == charts.TITLES
        assert {x: charts.axis_title(x) for x in charts.X_AXES} == charts.X_AXES
        assert {x: rlview.x_label(x) for x in metrics.X_AXES} == metrics.X_AXES
        assert all(rlview.panel_title(p) == p.title for p in rlview.PANELS)
    with i18n.language("zh"):
        assert all(has_chinese(charts.chart_title(name)) for name in charts.TITLES)
        assert all(has_chinese(rlview.panel_title(p)) for p in rlview.PANELS if p.key != "kl")
    assert charts.chart_title("my_metric") == "my_metric"  # a metric without a title: as printed
    assert not i18n.missing


def test_pipeline_problems_and_refusals_in_chinese():
    from mmcore import pipelines
    stages = pipelines.TEMPLATES["minimind_full"].stages()
    with i18n.language("en"):
        english = pipelines.check(stages, 0)
    with i18n.language("zh"):
        chinese = pipelines.check(stages, 0)
    assert english and len(chinese) == len(english)  # the full chain's data is not bundled here
    assert all(p.startswith("Stage ") for p in english) and all(p.startswith("第 ") and has_chinese(p) for p in chinese)
    assert not i18n.missing


def test_log_link_and_store_messages_in_chinese(tmp_path):
    import sqlite3
    from mmcore import logfiles, logparse, storeguard, urlstate
    parser = logparse.LogParser(str(tmp_path / "none.log"))
    parser.update()
    (tmp_path / "jobs.db").write_bytes(b"not a database at all, just text")
    with i18n.language("zh"):
        assert has_chinese(logfiles.explain(parser, "job 1")[1])
        _, problems = urlstate.decode({"smooth": "lots", "job": "a,b"})
        assert problems and all(has_chinese(p) for p in problems)
        with pytest.raises(storeguard.StoreDamaged) as damaged:
            storeguard.check_intact(tmp_path / "jobs.db", tmp_path / "logs")
        assert has_chinese(str(damaged.value)) and "python -m mmcore restore" in str(damaged.value)
        assert has_chinese(storeguard.explain(sqlite3.OperationalError("database is locked"), tmp_path / "jobs.db"))
    assert not i18n.missing
