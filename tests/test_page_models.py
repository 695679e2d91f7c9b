"""Models page (AppTest, real chat worker, real demo checkpoints): the catalogue lists the demo runs' weights
with their jobs; chat answers with the worker's greedy reply, as plain text; compare scores each answer
with the training rewards; export writes a transformers folder; scoring agrees with hand-checked answers."""
import os
import shutil
import signal

import pytest

from _pages_helpers import open_page
from mmcore import chat_client, modelsview

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(autouse=True)
def only_default_write_roots(monkeypatch):
    """The catalogue walks the write roots: keep it to the repository's (the tests' temp folder is one
    too, see conftest); the demo runs' weights are found through their jobs' save folders."""
    from trainer import roots
    monkeypatch.setenv(roots.WRITE_ENV, os.pathsep.join(map(str, roots.default_roots().write)))


@pytest.fixture(scope="module", autouse=True)
def stop_worker():
    yield
    info = chat_client.status()
    if info:
        os.kill(info["pid"], signal.SIGTERM)


def models_page(section):
    at = open_page("pages/models.py")
    at.radio(key="models.section").set_value(section).run()
    assert not at.exception, at.exception
    return at


def test_catalogue_lists_the_demo_weights_with_their_jobs(demo_models):
    at = models_page("Catalogue")
    rows = at.dataframe[0].value
    ours = rows[rows["File"].str.startswith(str(demo_models / "out"))]
    by_name = {os.path.basename(f): r for f, r in zip(ours["File"], ours.to_dict("records"))}
    assert {"reason_64.pth", "grpo_64.pth", "full_sft_64.pth"} <= set(by_name)
    assert by_name["grpo_64.pth"]["Type"] == "grpo" and by_name["grpo_64.pth"]["Job"].startswith("/jobs?job=")
    assert by_name["reason_64.pth"]["Type"] == "distill_reason" and by_name["reason_64.pth"]["Size"] == "64x2"


def test_chat_streams_the_workers_greedy_reply_as_text(demo_models):
    at = models_page("Chat")
    label = str(demo_models / "out" / "grpo_64.pth")
    at.selectbox(key="models.chat.target").set_value(label).run()
    at.slider(key="models.chat.temperature").set_value(0.0)
    at.number_input(key="models.chat.max_new_tokens").set_value(24)
    at.text_input(key="models.chat.system").set_value("**bold** <b>x</b>")
    at.chat_input[0].set_value("3-1=?").run()
    assert not at.exception and not at.error, (at.exception, at.error)
    history = at.session_state["models.chat.history"][label]
    assert [m["role"] for m in history] == ["user", "assistant"]
    expected = chat_client.reply({"weight": label, "messages": [{"role": "user", "content": "3-1=?"}],
                                  "system": "**bold** <b>x</b>", "temperature": 0.0, "top_p": 0.85,
                                  "max_new_tokens": 24, "seed": 0, "reasoning": True})["text"]
    assert history[1]["content"] == expected
    thought, answer = chat_client.split_think(expected)
    shown = [t.value for t in at.text]
    assert "3-1=?" in shown and (answer in shown or thought in shown)
    assert not any(expected in m.value for m in at.markdown)  # model text is never rendered as markdown


def test_compare_scores_answers_with_the_training_rewards(demo_models):
    at = models_page("Compare")
    labels = [str(demo_models / "out" / name) for name in ("grpo_64.pth", "reason_64.pth")]
    at.multiselect(key="models.compare.targets").set_value(labels).run()
    at.number_input(key="models.compare.count").set_value(2)
    at.number_input(key="models.compare.max_new_tokens").set_value(16).run()
    next(b for b in at.button if b.label == "Compare").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    result = at.session_state["models.compare.result"]
    assert result["labels"] == labels and len(result["rows"]) == 2
    assert result["rows"][0]["reference"] == "3"  # dataset/demo/rlaif.jsonl's first record: 6-3=?
    summary = {s["Checkpoint"]: s for s in at.dataframe[0].value.to_dict("records")}
    assert set(summary) == set(labels)
    for row in result["rows"]:
        for label in labels:
            rewards = row["answers"][label]["rewards"]
            assert rewards["total"] == pytest.approx(rewards["format"] + rewards["rule"])


def test_score_reply_matches_hand_checked_answers():
    from model.chat_engine import score_reply
    good = "<think>\n6 minus 3\n</think>\n<answer>\n3\n</answer>"
    assert score_reply("", good, "3", reasoning=True) == {"total": 2.5, "format": 1.5, "rule": 1.0,
                                                               "reward_model": None}
    wrong = "<think>\nhmm\n</think>\n<answer>\n4\n</answer>"
    assert score_reply("", wrong, "3", reasoning=True) == {"total": 1.5, "format": 1.5, "rule": 0.0,
                                                                "reward_model": None}
    assert score_reply("", "3", "3", reasoning=False) == {"total": 1.0, "format": None, "rule": 1.0,
                                                                     "reward_model": None}
    assert score_reply("", "the answer is 3", "<answer>3</answer>", reasoning=True)["total"] == 0.0


def test_export_from_the_page_writes_a_transformers_folder(demo_models):
    at = models_page("Export")
    label = str(demo_models / "out" / "reason_64.pth")
    at.selectbox(key="models.export.target").set_value(label).run()
    at.text_input(key="models.export.name").set_value("../escape").run()
    assert any("plain name" in e.value for e in at.error)
    name = f"page-test-{os.getpid()}"
    at.text_input(key="models.export.name").set_value(name).run()
    folder = modelsview.export_folder(name)
    try:
        next(b for b in at.button if b.label == "Export").click().run()
        assert not at.exception, at.exception
        assert any("Export done" in s.value for s in at.success), [e.value for e in at.error]
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
