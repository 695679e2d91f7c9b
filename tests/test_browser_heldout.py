"""A run's held-out evaluation in headless Chromium, in English and in 中文. A GRPO run whose records hold
held-out evaluations (means and greedy answers) and a rescore, written by the trainers' writers without
training, and step snapshots of its weights at two evaluated steps:

- Logs shows the training reward and the held-out signals as traces of one chart, and the per-prompt table;
- Models -> Compare shows the held-out prompts across the run's checkpoints, the answers recorded at each
  checkpoint's step side by side (no model runs).

Nothing cut, no Python object text, no English left on the 中文 page. Screenshots:
`test-artifacts/heldout-logs-<language>.png`, `test-artifacts/heldout-timeline-<language>.png`."""

import _browser_helpers as browser
import _walk_checks as checks
import pytest
from _trainer_helpers import save_random_weights
from test_heldout_page import HELD_OUT, RIGHT_AT, evaluated_job

from mmcore.base import i18n

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
LOCALES = {"en": "en-US", "zh": "zh-CN"}
SIGNALS = ["reward", "eval/reward/mean", "eval/accuracy", "rescore/format/mean"]
# The trace names of each drawn Plotly figure that holds a held-out signal.
HELD_OUT_JS = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')]
    .map(plot => (plot.data || []).map(trace => String(trace.name ?? '')))
    .filter(names => names.some(name => name.startsWith('eval/')))"""
# The cells of the st.dataframe whose header holds `column` (the per-prompt table), header first.
PROMPTS_JS = """(column) => {
    const frame = [...document.querySelectorAll('[data-testid="stDataFrame"]')]
        .find(f => [...f.querySelectorAll('table[role="grid"] thead th')].some(th => th.innerText.trim() === column));
    return frame ? [...frame.querySelectorAll('table[role="grid"] tr')]
        .map(tr => [...tr.querySelectorAll('th, td')].map(c => c.innerText.trim())) : null;
}"""


SNAPSHOTS = (6, 12)  # evaluated steps the run kept its weights at


def save_snapshots(out, job_id):
    """The run's weight file and its step snapshots, each with the metadata a trainer writes beside it
    (`weight_meta.after_save` under the job's supervisor)."""
    from trainer.rules import weight_meta

    path = str(save_random_weights(out, "grpo_ho", seed=3))
    for step in SNAPSHOTS:
        weight_meta.write_meta(path, weight_meta.build_meta(path, kind="full", train_type="grpo", hidden_size=64,
                                                            num_hidden_layers=2, use_moe=False, global_step=step,
                                                            extra={"job_id": job_id}))
        weight_meta.keep_snapshot(path, step, keep=5)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    from mmcore.jobs.jobstore import JobStore
    from trainer.rules import roots

    tmp = tmp_path_factory.mktemp("browser-heldout")
    app_dir = browser.copy_app(tmp / "app")
    home = tmp / "home"
    job_id, _ = evaluated_job(JobStore(home / "jobs.db"))
    save_snapshots(app_dir / "out", job_id)
    # The catalogue walks only the app's out/.
    server = browser.StreamlitServer(app_dir, home=home, log_path=tmp / "streamlit.log",
                                     env={roots.WRITE_ENV: str(app_dir / "out")})
    with server, browser.chromium() as chromium:
        yield server, chromium, job_id


def page_in(chromium, lang):
    """A page whose browser speaks `lang` (the dashboard follows the browser's language)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, locale=LOCALES[lang],
                                   extra_http_headers={"Accept-Language": LOCALES[lang]})
    page = context.new_page()
    page.set_default_timeout(60_000)
    return page


def in_both_languages(dashboard, name, path, check):
    """Open `path` in an English and a 中文 browser, run `check(page)` in each and save its screenshot
    `<name>-<lang>`; returns what a person should not see there (see _walk_checks.findings), by page."""
    server, chromium, _ = dashboard
    findings = {}
    for lang in ("en", "zh"):
        page = page_in(chromium, lang)
        with i18n.language(lang), browser.screenshot_on_failure(page, f"{name}-{lang}"):
            browser.open_app(page, f"{server.url}{path}", timeout=90)
            check(page)
            shot = browser.screenshot(page, f"{name}-{lang}")
            if seen := checks.findings(page, lang):
                findings[f"{lang} ({shot.name})"] = seen
        page.context.close()
    return findings


def test_logs_shows_training_and_held_out_reward_on_one_chart_and_the_prompt_table(dashboard):
    def check(page):
        page.get_by_text(i18n.t("logs.heldout"), exact=True).wait_for()
        page.set_viewport_size({"width": 1400, "height": 8000})  # charts draw once they are on screen
        page.wait_for_function(f"() => ({HELD_OUT_JS})().length === 1", timeout=60_000, polling=200)
        assert page.evaluate(HELD_OUT_JS) == [SIGNALS]  # one figure: the training reward and each held-out signal
        browser.wait_for_dataframe_cell(page, i18n.t("logs.prompts.flag.always_wrong"), timeout=60)
        rows = page.evaluate(PROMPTS_JS, i18n.t("logs.prompts.col.flag"))
        assert rows[0][:3] == [i18n.t(f"logs.prompts.col.{c}") for c in ("prompt_id", "prompt", "flag")], rows
        assert sorted(r[0] for r in rows[1:]) == ["1", "2"] and all(r[1].endswith("assistant") or r[1] == "another"
                                                                      for r in rows[1:]), rows
        page.set_viewport_size({"width": 1400, "height": 1000})

    findings = in_both_languages(dashboard, "heldout-logs", f"/logs?job={dashboard[2]}", check)
    assert not findings, findings


def pick(page, text):
    """Click the radio option whose label is `text`, then wait for the rerun."""
    page.locator('[data-testid="stRadio"] label').filter(has=page.get_by_text(text, exact=True)).first.click()
    browser.wait_for_rerun(page, 90)


def test_compare_shows_the_held_out_answers_across_the_run_checkpoints(dashboard):
    def check(page):
        pick(page, i18n.t("models.section.Compare"))
        pick(page, i18n.t("models.timeline"))
        browser.wait_for_dataframe_cell(page, i18n.t("models.timeline.source.recorded"), timeout=60)
        scores = page.evaluate(PROMPTS_JS, i18n.t("models.timeline.col.held_out_accuracy"))
        header = scores[0]
        steps = [row[header.index(i18n.t("models.timeline.col.step"))] for row in scores[1:]]
        accuracy = [row[header.index(i18n.t("models.timeline.col.held_out_accuracy"))] for row in scores[1:]]
        assert steps == [str(s) for s in SNAPSHOTS], scores
        assert [float(a) for a in accuracy] == [RIGHT_AT[s] / len(HELD_OUT) for s in SNAPSHOTS], scores
        # each held-out prompt with the answer recorded at each checkpoint's step, side by side
        text = checks.page_text(page)
        assert all(question in text for question, _ in HELD_OUT)
        assert text.count(i18n.t("models.timeline.source.recorded")) >= len(HELD_OUT) * len(SNAPSHOTS)
        assert i18n.t("models.timeline.not_answered") not in text
        assert i18n.t("models.timeline.help.answered", prompts=len(HELD_OUT), checkpoints=len(SNAPSHOTS)) in text
        assert not page.get_by_role("button", name=i18n.t("models.timeline.answer", n=1)).count()

    findings = in_both_languages(dashboard, "heldout-timeline", "/models", check)
    assert not findings, findings
