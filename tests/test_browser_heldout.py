"""The Logs page's held-out view in headless Chromium, in English and in 中文: a GRPO run whose records hold
held-out evaluations and a rescore (written by the trainers' writers, no training) shows the training reward
and the held-out signals as traces of one chart, and the per-prompt table; nothing cut, no Python object
text, no English left on the 中文 page. Screenshots: `test-artifacts/heldout-logs-<language>.png`."""
import _browser_helpers as browser
import _walk_checks as checks
import pytest
from test_heldout_page import evaluated_job

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


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    from mmcore.jobs.jobstore import JobStore

    tmp = tmp_path_factory.mktemp("browser-heldout")
    app_dir = browser.copy_app(tmp / "app")
    home = tmp / "home"
    job_id, _ = evaluated_job(JobStore(home / "jobs.db"))
    with browser.StreamlitServer(app_dir, home=home, log_path=tmp / "streamlit.log") as server:
        with browser.chromium() as chromium:
            yield server, chromium, job_id


def page_in(chromium, lang):
    """A page whose browser speaks `lang` (the dashboard follows the browser's language)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, locale=LOCALES[lang],
                                   extra_http_headers={"Accept-Language": LOCALES[lang]})
    page = context.new_page()
    page.set_default_timeout(60_000)
    return page


def test_logs_shows_training_and_held_out_reward_on_one_chart_and_the_prompt_table(dashboard):
    server, chromium, job_id = dashboard
    findings = {}
    for lang in ("en", "zh"):
        page = page_in(chromium, lang)
        with i18n.language(lang), browser.screenshot_on_failure(page, f"heldout-logs-{lang}"):
            browser.open_app(page, f"{server.url}/logs?job={job_id}", timeout=90)
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
            shot = browser.screenshot(page, f"heldout-logs-{lang}")
            seen = checks.python_text(page) + checks.cut_text(page)
            if lang == "zh":
                seen += [f"English on the 中文 page: {text!r} ({key})" for text, key in checks.untranslated(page)]
            if seen:
                findings[f"{lang} ({shot.name})"] = seen
        page.context.close()
    assert not findings, findings
