"""End to end in headless Chromium: the Models page chats with the demo GRPO model and compares it with its
reasoning-distill base.

The demo checkpoints (trained by the real trainers, see _models_helpers) are copied into a copy of the
app; the catalogue lists them, a chat message gets the chat worker's reply streamed into the page (the
same text the worker gives for the same settings), and Compare, which by default puts the GRPO model
next to the `reason` weight it started from, shows both answers to demo prompts with their rewards; an
export from the page runs as a job and the page shows its verification result.
"""
import os
import re
import shutil
import signal
import time

import _browser_helpers as browser
import pytest

from mmcore.models import chat_client

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

MISSING = browser.browser_missing_reason()
PROMPT = "3-1=?"
MAX_NEW = 20


@pytest.fixture(scope="module")
def chromium():
    """The module's one browser (a second Playwright cannot start while the first runs)."""
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    with browser.chromium() as b:
        yield b


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory, demo_models, chromium):
    tmp = tmp_path_factory.mktemp("browser-models")
    app_dir = browser.copy_app(tmp / "app")
    shutil.copytree(demo_models / "out", app_dir / "out")
    home = tmp / "home"
    from trainer.rules import roots

    # the server's catalogue walks only the app's out/
    server = browser.StreamlitServer(app_dir, home=home, log_path=tmp / "streamlit.log",
                                     env={roots.WRITE_ENV: str(app_dir / "out")})
    try:
        with server, browser.app_page(server.url, timeout_ms=60_000, browser=chromium) as page:
            yield app_dir, home, page
    finally:
        info = chat_client.status(home)
        if info:
            os.kill(info["pid"], signal.SIGTERM)


def section(page, name):
    page.locator('[data-testid="stRadio"] label').filter(has_text=name).first.click()
    browser.wait_for_rerun(page, 60)


def test_chat_with_the_grpo_model_and_compare_it_with_its_base(dashboard):
    app_dir, home, page = dashboard
    with browser.screenshot_on_failure(page, "models"):
        browser.go_to(page, "Models", timeout=60)
        browser.wait_for_dataframe_cell(page, "out/grpo_64.pth")
        files = {c for row in browser.dataframe_cells(page) for c in row}
        assert "out/grpo_64.pth" in files and "out/reason_64.pth" in files, files

        section(page, "Chat")
        browser.choose(page, "Checkpoint", "out/grpo_64.pth", timeout=60)
        browser.fill(page, "Max new tokens", str(MAX_NEW), timeout=60)
        box = page.locator('[data-testid="stChatInputTextArea"]')
        box.fill(PROMPT)
        box.press("Enter")
        page.locator('[data-testid="stChatMessage"]').nth(1).wait_for(timeout=300_000)
        browser.wait_for_rerun(page, 300)
        assert not browser.exceptions(page)
        expected = chat_client.reply({"weight": str((app_dir / "out" / "grpo_64.pth").resolve()),
                                      "messages": [{"role": "user", "content": PROMPT}], "temperature": 0.85,
                                      "top_p": 0.85, "max_new_tokens": MAX_NEW, "seed": 0, "reasoning": True},
                                     home)["text"]
        thought, answer = chat_client.split_think(expected)
        reply = page.locator('[data-testid="stChatMessage"]').nth(1)
        shown = reply.inner_text()
        if thought is not None:
            assert "Thought" in shown  # folded: the thought is behind the expander's title
            reply.get_by_text("Thought").click()
            assert thought.split()[0] in reply.inner_text() if thought.split() else True
        if answer.strip():
            assert answer.strip().split()[0] in shown
        # The second turn re-draws the first from the history: nothing of Python's own shows (Streamlit magic
        # once echoed a DeltaGenerator box for each question and a None for each answer).
        box.fill("5-2=?")
        box.press("Enter")
        page.locator('[data-testid="stChatMessage"]').nth(3).wait_for(timeout=300_000)
        browser.wait_for_rerun(page, 300)
        text = browser.main_text(page)
        assert "DeltaGenerator" not in text and not re.search(r"^None$", text, re.M), text
        assert page.locator('[data-testid="stChatMessage"]').count() == 4 and not browser.exceptions(page)
        browser.screenshot(page, "models-chat")

        section(page, "Compare")
        browser.fill(page, "Number of prompts", "2", timeout=60)
        browser.fill(page, "Max new tokens", "12", timeout=60)
        chosen = page.locator('[data-testid="stMultiSelect"]').inner_text()
        assert "out/grpo_64.pth" in chosen and "out/reason_64.pth" in chosen, chosen
        page.get_by_role("button", name="Compare", exact=True).click()
        page.get_by_text("Reference").first.wait_for(timeout=300_000)
        browser.wait_for_rerun(page, 300)
        assert not browser.exceptions(page)
        text = browser.main_text(page)
        assert text.count("reward ") >= 4  # 2 prompts x 2 checkpoints, each scored
        assert "6-3=?" in text  # the demo file's first prompt
        browser.wait_for_dataframe_cell(page, "out/grpo_64.pth")
        browser.screenshot(page, "models-compare")


def test_export_from_the_models_page_runs_as_a_job_and_shows_its_verification(dashboard):
    """Export (Llama format, the default) from the page: the job writes the folder, the list of exports shows
    its verification result, and the "how to run it" card the plain transformers call."""
    app_dir, home, page = dashboard
    folder = app_dir / "out" / "hf" / "browser-export"
    with browser.screenshot_on_failure(page, "models-export"):
        browser.go_to(page, "Models", timeout=60)
        section(page, "Export")
        label = "Checkpoint (a LoRA is merged into its base, or kept apart as a PEFT adapter)"
        for checkpoint, name in (("out/reason_64.pth", "reason_64"), ("out/grpo_64.pth", "grpo_64")):
            browser.choose(page, label, checkpoint, timeout=60)  # the folder follows the checkpoint chosen
            browser.wait_for_input_value(page, "Folder name (under out/hf/)", name, timeout=60)
        browser.fill(page, "Folder name (under out/hf/)", folder.name, timeout=60)
        page.get_by_role("button", name="Export", exact=True).click()
        page.get_by_text("queued as job").wait_for(timeout=60_000)
        job_id = int(re.search(r"queued as job (\d+)", browser.main_text(page)).group(1))
        link = page.get_by_role("link", name=f"Open job {job_id} on Jobs")
        link.first.wait_for(timeout=60_000)  # drawn just after the message, by the same rerun
        assert link.count() == 1 and f"job={job_id}" in link.get_attribute("href")
        # The same folder again: it asks first, and Export waits for the answer.
        page.get_by_text(re.compile(r"already (?:exports into out/hf/browser-export|holds an export)")).first.wait_for(
            timeout=30_000)  # (not finished) or, once it ends, the export it wrote
        assert page.get_by_role("button", name="Export", exact=True).is_disabled()
        deadline = time.monotonic() + 300
        while not (folder / "minimind_export.json").is_file():
            assert time.monotonic() < deadline, "the export job wrote no folder"
            time.sleep(0.5)
        section(page, "Catalogue")  # come back: the page draws the list of exports anew
        section(page, "Export")
        browser.wait_for_dataframe_cell(page, "passed: LlamaForCausalLM", timeout=60)
        page.get_by_text("How to run it").wait_for(timeout=30_000)
        assert "AutoModelForCausalLM.from_pretrained" in browser.main_text(page)
        assert not browser.exceptions(page)
        browser.screenshot(page, "models-export")


def test_a_viewer_sees_the_models_but_is_told_why_it_may_not_chat_or_export(tmp_path, demo_models, chromium):
    """A viewer (roles.toml) browses the catalogue; chat and export are disabled, with the reason shown."""
    from mmcore.access import roles
    app_dir = browser.copy_app(tmp_path / "app")
    shutil.copytree(demo_models / "out", app_dir / "out")
    home = tmp_path / "home"
    home.mkdir()
    (home / "roles.toml").write_text(f'[users]\n"{roles.os_user()}" = "viewer"\n')
    server = browser.StreamlitServer(app_dir, home=home, log_path=tmp_path / "streamlit.log",
                                     unset_env=(roles.ROLES_ENV,))
    with server, browser.app_page(server.url, timeout_ms=60_000, browser=chromium) as page, \
            browser.screenshot_on_failure(page, "models-viewer"):
        browser.go_to(page, "Models", timeout=60)
        browser.wait_for_dataframe_cell(page, "out/grpo_64.pth")
        section(page, "Chat")
        assert page.locator('[data-testid="stChatInputTextArea"]').is_disabled()
        page.get_by_text("may not chat with a model").wait_for(timeout=30_000)
        section(page, "Export")
        assert page.get_by_role("button", name="Export", exact=True).is_disabled()
        page.get_by_text("may not export a model").wait_for(timeout=30_000)
        assert not browser.exceptions(page)
        browser.screenshot(page, "models-viewer")
