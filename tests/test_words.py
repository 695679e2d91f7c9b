"""The dashboard's own words say what things are, in the viewer's language (issue 40, point 8): the job
type names and the type's parameter card, the catalogue's model size, the not-a-log message, the CLI's
usage line and `data check`'s lists. (The job log's header is checked in test_runner.py.)"""
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from mmcore import cli
from mmcore.base import i18n
from mmcore.base.paths import ROOT
from mmcore.data import report as data_report
from mmcore.jobs import jobtable
from mmcore.models import modelsview
from mmcore.train import train_types


def test_type_names_and_the_types_own_card_follow_the_language():
    with i18n.language("zh"):
        assert train_types.group_label("type_specific", "pretrain") == "预训练 参数"
        assert train_types.group_label("type_specific", "grpo") == "GRPO 参数"
        assert jobtable.type_short("pretrain") == "预训练"
        assert jobtable.type_short("export") == "导出" and jobtable.type_short("evaluate") == "评测"
    with i18n.language("en"):
        assert train_types.group_label("type_specific", "pretrain") == "Pretrain parameters"
        assert jobtable.type_short("distill_reason") == "Reason"
        assert jobtable.type_short("export") == "Export"
    assert jobtable.type_short("no_such_type") == "no_such_type"


def test_the_catalogue_says_a_models_size_in_words():
    dense = SimpleNamespace(hidden_size=64, num_hidden_layers=2, use_moe=False)
    moe = SimpleNamespace(hidden_size=512, num_hidden_layers=8, use_moe=True)
    with i18n.language("en"):
        assert modelsview.size_label(dense) == "hidden 64 · 2 layers"
        assert modelsview.size_label(moe) == "hidden 512 · 8 layers · MoE"
        assert modelsview.size_label(SimpleNamespace(hidden_size=None, num_hidden_layers=None, use_moe=False)) == "?"
    with i18n.language("zh"):
        assert modelsview.size_label(dense) == "隐藏层 64 · 2 层"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_messages_shown_as_literal_text_hold_no_markdown(lang):
    """The Logs page shows why a log has no chart as literal text (safetext.md_lines): backticks would
    show as backticks."""
    for key, value in i18n.file_table(lang).items():
        if key.startswith("logfile."):
            assert "`" not in value, (key, value)


def test_minimind_help_names_the_command_it_was_started_as(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: minimind ")
    module = subprocess.run([sys.executable, "-m", "mmcore", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert module.returncode == 0 and module.stdout.startswith("usage: python -m mmcore "), module.stdout[:200]
    with pytest.raises(SystemExit):
        cli.main(["status"])  # a usage error names the command too
    assert "minimind status: error:" in capsys.readouterr().err


def _report(duplicates):
    items = [{"line": 2 * i + 2, "reason": f"same as line {2 * i + 1}"} for i in range(duplicates)]
    return {"file": "demo.jsonl", "kind": "sft", "rows": 3000, "types": ["sft"], "bad_rows": [],
            "problems": {"duplicate": items}, "counts": {"duplicate": duplicates}, "max_seq_len": 340,
            "truncated_rows": 0, "answer_tokens_lost": 0}


@pytest.mark.parametrize("lang, more", [("en", "  … and 1,434 more"), ("zh", "  …… 另有 1,434 条")])
def test_data_check_says_how_many_rows_it_does_not_list(lang, more):
    with i18n.language(lang):
        lines = data_report.text(_report(1454))
    listed = [line for line in lines if line.startswith("  ") and not line.startswith("  …")]
    assert len(listed) == data_report.CLI_ROWS
    assert lines[lines.index(listed[-1]) + 1] == more
    with i18n.language(lang):
        short = data_report.text(_report(3))
    assert not any(line.startswith("  …") for line in short)
    assert sum(line.startswith("  ") for line in short) == 3


@pytest.mark.parametrize("lang, button, limit", [("en", '"Upload"', '"50 MB per file · JSONL, JSON"'),
                                                 ("zh", '"上传"', '"每个文件最多 50 MB · JSONL, JSON"')])
def test_the_file_uploaders_own_words_follow_the_language(lang, button, limit):
    """Streamlit writes "Upload" and "50MB per file • ..." itself: the style puts the language's words in
    their place, for the one uploader it is drawn for."""
    from mmcore.widgets import uploader_words
    with i18n.language(lang):
        css = uploader_words.style("data.upload", ("jsonl", "json"), 50)
    assert css.startswith("<style>") and css.endswith("</style>")
    rules = dict(re.findall(r"([^{}]+)\{([^}]*)\}", css.removeprefix("<style>").removesuffix("</style>")))
    scoped = [selector for selector in rules if not selector.startswith(".st-key-data-upload ")]
    assert not scoped, scoped
    assert any(r == f"content:{button}" for r in rules.values()), rules
    assert any(r.startswith(f"content:{limit};") for r in rules.values()), rules
    assert sum(r == "display:none" for r in rules.values()) == 2  # Streamlit's own two texts


def test_the_jobs_tables_latest_metric_is_named_in_the_viewers_language():
    from mmcore.jobs import progress
    reward = progress.Progress(reward=0.51234, reward_name="Reward", loss=2.0, loss_name="loss")
    actor = progress.Progress(loss=0.12344, loss_name="Actor Loss")
    with i18n.language("en"):
        assert jobtable.metric_text(reward) == "Reward 0.5123" and jobtable.metric_text(actor) == "Actor Loss 0.1234"
        assert jobtable.metric_text(progress.Progress()) == ""
    with i18n.language("zh"):
        assert jobtable.metric_text(reward) == "奖励 0.5123" and jobtable.metric_text(actor) == "Actor 损失 0.1234"
        assert jobtable.metric_text(progress.Progress(loss=1.0, loss_name="Some Loss")) == "Some Loss 1"


def test_every_column_of_a_prompts_history_has_a_title_in_both_languages():
    """Logs → Rollouts → Follow a prompt: the table's columns are titled in the viewer's language."""
    import pandas as pd

    from mmcore.runs import rlview
    rows = pd.DataFrame({"step": [1, 1, 2], "reward": [0.5, 1.0, 2.0], "length": [10, 12, 8],
                         "truncated": [0, 1, 0], "accuracy": [0.0, 1.0, 1.0]})
    for frame in (rlview.history_table(rows), rlview.history_table(rows.iloc[0:0])):
        for lang in ("en", "zh"):
            table = i18n.file_table(lang)
            assert all(f"logs.history.{c}" in table for c in frame.columns), (lang, list(frame.columns))


def test_a_runs_summary_on_logs_names_its_loss_and_reward_in_the_viewers_language():
    from mmcore.jobs import progress, run_selection
    prog = progress.Progress(step=1, total=1, percent=100.0, loss=0.0, loss_name="Actor Loss", reward=0.0,
                             reward_name="Reward")
    with i18n.language("zh"):
        assert run_selection.summary_parts(prog)[1:] == ["Actor 损失 0", "奖励 0"]
    with i18n.language("en"):
        assert run_selection.summary_parts(prog)[1:] == ["Actor Loss 0", "Reward 0"]


def test_a_pipelines_stages_are_named_in_the_viewers_language():
    """Train → A pipeline in 中文: "第 3 阶段：推理蒸馏", not the English type name."""
    from _pages_helpers import open_page, texts
    at = open_page(state={i18n.STATE_KEY: "zh", "queue.launch_what": "pipeline"})
    assert not at.exception, at.exception
    shown = texts(at.markdown)
    with i18n.language("zh"):
        wanted = [i18n.t("queue.stage", n=n, type=i18n.t(f"type.{k}"))
                  for n, k in enumerate(("pretrain", "sft", "distill_reason", "grpo"), 1)]
    assert all(line in shown for line in wanted), [s for s in shown if "阶段" in s]
