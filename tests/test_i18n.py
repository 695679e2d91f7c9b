"""Languages: both tables have the same keys and fields, the choice of language, and the pages in
each language (AppTest) with no text missing from either table."""
import re

import pytest
from _pages_helpers import open_page, texts

from mmcore.base import i18n
from mmcore.base.i18n import t


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


def test_relabel_sets_each_kept_choice_again():
    """Setting a widget's value again makes Streamlit send its label in the current language."""
    class State(dict):
        def __init__(self, **values):
            super().__init__(**values)
            self.written = []

        def __setitem__(self, key, value):
            self.written.append(key)
            super().__setitem__(key, value)

    state = State(**{"jobs.limit": 50, "other": 1})
    i18n.relabel(state, "jobs.limit", "jobs.type_filter")
    assert state.written == ["jobs.limit"] and state["jobs.limit"] == 50 and "jobs.type_filter" not in state

    fresh = State()
    i18n.keep_choice(fresh, "jobs.limit", 200)  # first run: the default, set through the state
    i18n.keep_choice(state, "jobs.limit", 200)  # later runs: the kept choice, set again
    assert fresh.written == ["jobs.limit"] and fresh["jobs.limit"] == 200
    assert state.written == ["jobs.limit", "jobs.limit"] and state["jobs.limit"] == 50


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

    from mmcore.jobs.jobstore import JobStore
    store = JobStore()
    job_id = store.create("sft", "job-a", {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status="succeeded", started_at=time.time() - 60, ended_at=time.time(), exit_code=0)
    with open(store.get(job_id).log_path, "w") as f:
        f.write("".join(f"Epoch:[1/1]({s}/40) loss:{3 - s / 40:.4f} lr:0.0005 epoch_Time:0.0min:\n" for s in range(1, 41)))
    return job_id


def failed_job():
    """A finished job whose log ends with a traceback (the Logs page shows it as the last error)."""
    import time

    from mmcore.jobs.jobstore import JobStore
    job_id = finished_job()
    store = JobStore()
    store.update(job_id, status="failed", exit_code=1, ended_at=time.time())
    with open(store.get(job_id).log_path, "a") as f:
        f.write('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: bad batch\n')
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
    at.number_input(key="train.grpo.hidden_size").set_value(100).run()  # not a multiple of the heads' sizes
    assert len(at.error) >= 3, texts(at.error)
    return at


def pipeline_section(at):
    at.radio(key="queue.launch_what").set_value("pipeline").run()
    return at


def sick_rl_job():
    """A finished GRPO job with metrics and rollouts records whose health check fires."""
    from test_page_records import recorded_job

    from mmcore.jobs.jobstore import JobStore
    return recorded_job(JobStore(), steps=12, zero_std=1.0, name="sick")


# Expanders that build their content only while open (the queue's settings, a job's history, the
# audit trail), opened so that what they show is checked too.
OPENED = {"queue.settings_open": True, "jobs.history_open": True, "jobs.audit_open": True}


@pytest.mark.parametrize("page, setup, then", [
    ("pages/train.py", finished_job, None), ("pages/train.py", finished_job, train_with_errors),
    ("pages/train.py", finished_job, pipeline_section), ("pages/jobs.py", finished_job, None),
    ("pages/jobs.py", sick_rl_job, None), ("pages/jobs.py", failed_job, None), ("pages/logs.py", finished_job, None),
    ("pages/logs.py", failed_job, None), ("pages/logs.py", sick_rl_job, None),
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
    from mmcore.train import train_types
    from mmcore.widgets import train_form
    for train_type, spec in train_types.TYPES.items():
        for p in spec.params:
            if p.name == "device":
                continue  # chosen by the device mode, not a field
            with i18n.language("en"):
                assert train_form.param_help(train_type, p) == p.help, (train_type, p.name)
            with i18n.language("zh"):
                assert has_chinese(train_form.param_help(train_type, p)), (train_type, p.name)
    assert not i18n.missing


def field_messages(tmp_path):
    """Every kind of field message, from the real checks: trainer/rules/args.py, trainer/rules/roots.py,
    mmcore/train/commandline.py and mmcore/widgets/train_form.py."""
    import os
    from pathlib import Path

    from mmcore.train import commandline, train_types
    from mmcore.widgets import train_form
    from trainer.rules import args, job_paths, roots, specs
    found = [train_types.param("sft", "epochs").check(0), train_types.param("grpo", "top_p").check(2.0),
             train_types.param("sft", "learning_rate").check(0.0), train_types.param("sft", "use_moe").check(3),
             roots.name_problem("a/b"), roots.name_problem("x" * 500),
             commandline._convert(args.Arg("flag", bool, False, "a flag"), "maybe")[1]]
    outside = roots.Roots(read=(Path("/data"), Path("/tmp")), write=(Path("/out"),))
    found += [outside.problem("/etc", "read"), outside.problem("/etc", "write")]
    from mmcore.actions import core
    found += [core.write_refusal("a\0b")]  # an act's write target that is no path (mmcore.actions.core)
    checked = commandline.check("sft", {"epochs": "abc", "batch_size": "1.5", "learning_rate": "inf", "grad_clip": "abc",
                                    "save_weight": "-x",
                                    "data_path": "a\nb", "save_dir": "", "device": "tpu", "gpus": "a",
                                    "train_monitor": "tensorboard"})
    found += list(checked.errors.values())
    found += [commandline.check("sft", {"gpus": "0,0", "hidden_size": "100"}).errors[name] for name in ("gpus", "hidden_size")]
    found.append(args.cross_errors("sft", {"eval_data": "held.jsonl", "eval_holdout": 4})["eval_holdout"])
    # A weight file that is a symlink to a folder outside the write roots.
    (tmp_path / "out").mkdir()
    values = {**specs.spec("sft").defaults(), "save_dir": str(tmp_path / "out"), "save_weight": "x"}
    os.symlink(tmp_path / "elsewhere.pth", tmp_path / "out" / specs.spec("sft").weight_files(values)[0])
    writable = roots.Roots(read=(Path("/"),), write=(tmp_path / "out", (tmp_path / specs.CHECKPOINT_DIR).resolve()))
    found += job_paths.path_errors("sft", values, writable, base=tmp_path).values()
    for mode, gpu_count, form in (("bogus", 0, {}), ("single", 0, {}), ("single", 1, {}), ("multi", 2, {})):
        found += train_form._device_errors({"device_mode": mode, **form}, gpu_count).values()
    found += [train_form.check_form("sft", {"device_mode": "cpu", train_form.NAME_FIELD: " "}, 0).errors[train_form.NAME_FIELD]]
    return found


def test_field_messages_are_english_for_the_trainers_and_worded_from_their_keys(tmp_path):
    """Each check's message reads as English text (what a trainer prints) and carries its key: the
    English table words it the same, the Chinese one in Chinese. Every field.* key is given by a check."""
    messages = field_messages(tmp_path)
    assert all(isinstance(m, str) for m in messages)
    assert {m.key for m in messages} == {key for key in i18n.table("en") if key.startswith("field.")}
    for message in messages:
        with i18n.language("en"):
            assert i18n.field_error(message) == message
        with i18n.language("zh"):
            assert has_chinese(i18n.field_error(message)), message
    assert "must be at least 1" in messages and "must be a multiple of 16" in " ".join(messages)
    assert i18n.field_error("something new") == "something new"  # a message without a key: as it is
    assert not i18n.missing


def test_one_message_type_for_the_trainers_and_the_dashboard():
    """A trainer's check and a dashboard's stored text are the same kind of value, `Message`, made by
    the one `message` function: it reads as its English wording, keeps its key and values, is worded
    in the reader's language, and is stored as data and worded back from it."""
    import ast
    import json
    import pickle

    from mmcore.base.paths import ROOT
    from mmcore.train import train_types
    from trainer.rules import messages
    assert i18n.message is messages.message
    defined = [str(path.relative_to(ROOT)) for folder in ("mmcore", "trainer", "dataset", "model", "pages")
               for path in sorted((ROOT / folder).rglob("*.py"))
               for node in ast.parse(path.read_text(encoding="utf-8")).body  # a module's own names
               if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.lower() == "message"]
    assert defined == ["trainer/rules/messages.py", "trainer/rules/messages.py"], defined  # Message and message
    checked = train_types.param("sft", "epochs").check(0)  # a trainer's option check
    held = i18n.message("note.held", id=5, status=i18n.message("status.failed"))  # a job's note
    for m, english in ((checked, "must be at least 1"), (held, "held: the job before it (job 5) is failed")):
        assert isinstance(m, messages.Message) and m == english and str(m) == english
        with i18n.language("zh"):
            assert has_chinese(i18n.word(m)) and i18n.word(m) != english
        data = json.loads(i18n.stored(m))
        assert data["key"] == m.key and i18n.english(data) == english
        assert pickle.loads(pickle.dumps(m)).params == m.params
    assert json.loads(i18n.stored(held))["params"]["status"] == {"key": "status.failed", "params": {}}
    assert i18n.read_stored(i18n.stored(held), "key", str)["key"] == "note.held"
    assert i18n.read_stored("plain text", "key", str) is None and i18n.read_stored('{"key": 1}', "key", str) is None
    assert not i18n.missing


def test_train_page_words_each_field_error_in_chinese():
    """A message of the trainers' checks (bounds, names, the model's head sizes) is shown in Chinese."""
    with i18n.language("zh"):
        at = train_with_errors(open_page("pages/train.py", state={i18n.STATE_KEY: "zh"}))
    errors = texts(at.error)
    assert not at.exception and not [e for e in errors if "must" in e], errors
    for words in ("必须大于 0", "必须是简单名称", "必须是 16 的倍数（8 个注意力头"):
        assert any(words in e for e in errors), (words, errors)


def test_the_trainers_print_the_english_messages(tmp_path):
    """The command line's usage errors keep their English wording."""
    import subprocess
    import sys

    from mmcore.base.paths import ROOT
    run = subprocess.run([sys.executable, "trainer/train_full_sft.py", "--epochs", "0"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "argument --epochs: '0' must be at least 1" in run.stderr, run.stderr
    run = subprocess.run([sys.executable, "trainer/train_full_sft.py", "--hidden_size", "100"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and ("--hidden_size must be a multiple of 16 (8 attention heads, each of an even size), "
                                    "got 100") in run.stderr, run.stderr


def test_chart_titles_and_axes_speak_each_language_and_the_english_is_the_tables():
    from mmcore.logs import charts
    from mmcore.runs import metric_stream, rlview
    with i18n.language("en"):
        assert {name: charts.chart_title(name) for name in charts.TITLES} == charts.TITLES
        assert {x: charts.axis_title(x) for x in charts.X_AXES} == charts.X_AXES
        assert {x: rlview.x_label(x) for x in metric_stream.X_AXES} == metric_stream.X_AXES
        assert all(rlview.panel_title(p) == p.title for p in rlview.PANELS)
    with i18n.language("zh"):
        assert all(has_chinese(charts.chart_title(name)) for name in charts.TITLES)
        assert all(has_chinese(rlview.panel_title(p)) for p in rlview.PANELS if p.key != "kl")
    assert charts.chart_title("my_metric") == "my_metric"  # a metric without a title: as printed
    assert not i18n.missing


def test_pipeline_problems_and_refusals_in_chinese():
    from mmcore.queue import pipelines
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

    from mmcore.jobs import storeguard
    from mmcore.logs import log_parser, logfiles, urlstate
    parser = log_parser.LogParser(str(tmp_path / "none.log"))
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


def test_an_export_name_error_is_worded_when_shown():
    from mmcore.models import modelsview
    with pytest.raises(ValueError) as raised:
        modelsview.export_folder("../escape")
    with i18n.language("en"):
        assert str(raised.value) == ("The export name must be a plain name: letters, digits, '.', '_' or '-' "
                                     "(at most 100), e.g. grpo_512")
    with i18n.language("zh"):
        assert str(raised.value).startswith("导出名称必须是简单名称")
    assert not i18n.missing


def test_a_too_large_upload_is_worded_when_shown(tmp_path):
    from mmcore.logs import logfiles
    with pytest.raises(logfiles.UploadTooLarge) as raised:
        logfiles.save_upload(b"x" * (2 * 1024 * 1024), "big.log", folder=tmp_path, max_mb=1)
    assert str(raised.value) == ("big.log is 2 MB; uploads are limited to 1 MB (MINIMIND_UPLOAD_MAX_MB). "
                                 "Copy a large log into the logs folder instead.")
    with i18n.language("zh"):
        assert str(raised.value) == "big.log 有 2 MB；上传限制为 1 MB（MINIMIND_UPLOAD_MAX_MB）。大的日志请复制到日志文件夹中。"
