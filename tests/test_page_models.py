"""Models page (AppTest, real chat worker, real demo checkpoints): the catalogue lists the demo runs' weights
with their jobs; chat answers with the worker's greedy reply, as plain text; compare scores each answer
with the training rewards, or with a reward model; export runs as a job and lists its verified folder; scoring agrees
with hand-checked answers; a viewer browses but runs and writes nothing, and is told why."""
import os
import re
import shutil
import signal

import pytest
from _models_helpers import only_default_write_roots  # noqa: F401  (fixture)
from _pages_helpers import open_page, texts, wait_for
from _reward_models import get_score_reward_model  # noqa: F401  (fixture)
from _trainer_helpers import DEMO
from test_page_magic import python_object_text

from mmcore.access import audit, roles
from mmcore.base import i18n
from mmcore.jobs.jobstore import JobStore
from mmcore.models import chat_client, eval_jobs, modelsview

pytestmark = [pytest.mark.timeout(900), pytest.mark.usefixtures("only_default_write_roots")]


def stop_chat_worker():
    info = chat_client.status()
    if info:
        os.kill(info["pid"], signal.SIGTERM)
        wait_for(lambda: not chat_client.worker_running(), timeout=60, what="the chat worker to stop")


@pytest.fixture(scope="module", autouse=True)
def stop_worker():
    yield
    stop_chat_worker()


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
    assert by_name["grpo_64.pth"]["Type"] == "GRPO" and by_name["grpo_64.pth"]["Job"].startswith("/jobs?job=")
    assert by_name["reason_64.pth"]["Type"] == "Reason" and by_name["reason_64.pth"]["Size"] == "hidden 64 · 2 layers"
    assert by_name["full_sft_64.pth"]["Job"] == "" and by_name["full_sft_64.pth"]["Kind"] == "full"  # no job, no "None"


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
    at.chat_input[0].set_value("5-2=?").run()  # the second turn re-draws the first from the history
    assert not at.exception and [m["role"] for m in history] == ["user", "assistant"] * 2
    assert python_object_text(at) == []  # no DeltaGenerator box, no stray None
    assert [t.value for t in at.text if t.value in ("3-1=?", "5-2=?")] == ["3-1=?", "5-2=?"]


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
    assert any("Reasoning on" in c and "A plain answer without `<answer>` tags scores 0" in c for c in texts(at.caption))
    for row in result["rows"]:
        for label in labels:
            rewards = row["answers"][label]["rewards"]
            assert rewards["total"] == pytest.approx(rewards["format"] + rewards["rule"])


def test_compare_scores_answers_with_the_chosen_reward_model(demo_models, get_score_reward_model, monkeypatch,
                                                             tmp_path):
    from trainer.rules import roots
    at = models_page("Compare")
    labels = [str(demo_models / "out" / name) for name in ("grpo_64.pth", "reason_64.pth")]
    at.multiselect(key="models.compare.targets").set_value(labels)
    at.number_input(key="models.compare.count").set_value(2)
    at.number_input(key="models.compare.max_new_tokens").set_value(16)
    compare = lambda: next(b for b in at.button if b.label == "Compare")  # noqa: E731
    # Outside the read roots, or a folder with its own code that no admin allowed: refused before anything runs.
    for folder, why in (("/etc", "outside the folders a job may read"),
                        (str(get_score_reward_model), roots.TRUSTED_CODE_ENV)):
        at.text_input(key="models.compare.reward_model").set_value(folder).run()
        assert any(why in e for e in texts(at.error)), texts(at.error)
        assert compare().disabled

    stop_chat_worker()  # the worker reads the allow-list from its environment when it starts
    monkeypatch.setenv(roots.TRUSTED_CODE_ENV, str(get_score_reward_model))
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "hf_modules"))  # the remote code's copy stays here
    try:
        at.text_input(key="models.compare.reward_model").set_value(str(get_score_reward_model)).run()
        assert not at.error and not compare().disabled, texts(at.error)
        compare().click().run()
        assert not at.exception and not at.error, (at.exception, at.error)
        rows = at.session_state["models.compare.result"]["rows"]
    finally:
        stop_chat_worker()

    from mmcore.workers.chat_engine import build_prompt, score_reply
    from model.weights import load_tokenizer
    from trainer.rl.reward_model import RewardModel
    reward_model, tokenizer = RewardModel(str(get_score_reward_model)), load_tokenizer()
    for row, p in zip(rows, modelsview.load_prompts(DEMO / "rlaif.jsonl", 2)):
        prompt = build_prompt(tokenizer, p["messages"], None, True)
        for label in labels:
            answer = row["answers"][label]
            expected = score_reply(prompt, answer["text"], p["reference"], True, reward_model)
            assert answer["rewards"]["reward_model"] is not None and answer["rewards"]["rule"] is None
            assert answer["rewards"] == pytest.approx(expected, abs=1e-5)
    for summary in modelsview.compare_summary(rows, labels):  # accuracy: still against the references
        assert summary["Accuracy"] in (0.0, 0.5, 1.0)


@pytest.fixture
def as_viewer(tmp_path, monkeypatch):
    """The session's user (the OS user: local sign-in mode) is a viewer."""
    path = tmp_path / "roles.toml"
    path.write_text(f'[users]\n"{roles.os_user()}" = "viewer"\n')
    monkeypatch.setenv(roles.ROLES_ENV, str(path))


def primary_buttons(at):
    """The page's action buttons (Compare, Launch evaluation, Export): there is one."""
    found = [b for b in at.button if b.proto.type == "primary"]
    assert found, [b.label for b in at.button]
    return found


@pytest.mark.parametrize("lang, says", [("en", "may not chat with a model"), ("zh", "不能与模型对话")])
def test_a_viewer_browses_models_but_runs_and_writes_nothing(demo_models, as_viewer, lang, says):
    store = JobStore()
    evals = eval_jobs.eval_store_for(store)
    grpo = str(demo_models / "out" / "grpo_64.pth")
    eval_id = evals.create(DEMO / "rlaif.jsonl", {}, [{"weight": grpo, "label": grpo}])
    evals.add_result(eval_id, grpo, grpo, "grpo", None, 2, {"n": 1, "accuracy": 1.0, "format_rate": 1.0,
                                                           "mean_reward": 2.5, "mean_length": 9})
    recorded, jobs = len(audit.entries(limit=None, home=store.home)), len(store.list(limit=None))
    # The test's own thread formats option values too (AppTest calls format_func here): in that language.
    with i18n.language(lang):
        at = open_page("pages/models.py", state={"app.language": lang})
        assert grpo in list(at.dataframe[0].value["File"])  # the catalogue is open to everyone

        at.radio(key="models.section").set_value("Chat").run()
        assert any(says in i for i in texts(at.info)), texts(at.info)
        assert at.chat_input[0].proto.disabled
        at.chat_input[0].proto.disabled = False  # as if a crafted request sent a message anyway
        at.chat_input[0].set_value("3-1=?").run()
        assert not at.exception and not at.session_state["models.chat.history"].get(grpo)

        at.radio(key="models.section").set_value("Compare").run()
        at.multiselect(key="models.compare.targets").set_value([grpo, str(demo_models / "out" / "reason_64.pth")]).run()
        assert all(b.disabled for b in primary_buttons(at)) and len(at.info) == 1

        at.radio(key="models.section").set_value("Evaluate").run()
        assert eval_id in list(at.dataframe[0].value["Eval"])  # evaluation results are open to everyone
        at.multiselect(key="models.eval.targets").set_value([grpo]).run()
        assert all(b.disabled for b in primary_buttons(at)) and len(at.info) == 1

        at.radio(key="models.section").set_value("Export").run()
        assert all(b.disabled for b in primary_buttons(at)) and len(at.info) == 1
        assert not at.exception, at.exception
    assert len(audit.entries(limit=None, home=store.home)) == recorded and len(store.list(limit=None)) == jobs


def test_score_reply_matches_hand_checked_answers():
    from mmcore.workers.chat_engine import score_reply
    good = "<think>\n6 minus 3\n</think>\n<answer>\n3\n</answer>"
    assert score_reply("", good, "3", reasoning=True) == {"total": 2.5, "format": 1.5, "rule": 1.0,
                                                               "reward_model": None, "correct": 1.0}
    wrong = "<think>\nhmm\n</think>\n<answer>\n4\n</answer>"
    assert score_reply("", wrong, "3", reasoning=True) == {"total": 1.5, "format": 1.5, "rule": 0.0,
                                                                "reward_model": None, "correct": 0.0}
    assert score_reply("", "3", "3", reasoning=False) == {"total": 1.0, "format": None, "rule": 1.0,
                                                                     "reward_model": None, "correct": 1.0}
    assert score_reply("", "the answer is 3", "<answer>3</answer>", reasoning=True)["total"] == 0.0


def test_export_from_the_page_runs_as_a_job_and_lists_the_verified_export(demo_models):
    at = models_page("Export")
    label = str(demo_models / "out" / "reason_64.pth")
    at.selectbox(key="models.export.target").set_value(label).run()
    assert at.text_input(key="models.export.name").value == "reason_64"  # the folder follows the checkpoint
    at.selectbox(key="models.export.target").set_value(str(demo_models / "out" / "grpo_64.pth")).run()
    assert at.text_input(key="models.export.name").value == "grpo_64"
    at.selectbox(key="models.export.target").set_value(label).run()
    assert at.text_input(key="models.export.name").value == "reason_64"
    at.radio(key="models.section").set_value("Catalogue").run()  # away and back: the field is filled again
    at.radio(key="models.section").set_value("Export").run()
    shown = os.path.basename(at.selectbox(key="models.export.target").value).removesuffix(".pth")
    assert at.text_input(key="models.export.name").value == shown  # the checkpoint shown, whichever it is
    at.selectbox(key="models.export.target").set_value(label).run()
    at.text_input(key="models.export.name").set_value("../escape").run()
    assert any("plain name" in e.value for e in at.error)
    name = f"page-test-{os.getpid()}"
    at.text_input(key="models.export.name").set_value(name).run()
    assert at.radio(key="models.export.format").value == "llama"  # the default for a dense model
    folder = modelsview.export_folder(name)
    try:
        next(b for b in at.button if b.label == "Export").click().run()
        assert not at.exception, at.exception
        assert at.success, (texts(at.error), texts(at.warning))
        job_id = int(re.search(r"queued as job (\d+)", at.success[0].value).group(1))
        (link,) = [e.proto for e in at.get("page_link") if e.proto.label == f"Open job {job_id} on Jobs"]
        assert link.page.endswith("jobs") and link.query_string == f"job={job_id}"
        # The same folder again, while that job is queued or running: asked first, Export held back.
        assert any(f"Job {job_id} (not finished)" in w for w in texts(at.warning)), texts(at.warning)
        assert next(b for b in at.button if b.label == "Export").disabled
        store = JobStore()
        job = wait_for(lambda: (j := store.get(job_id)).finished and j, timeout=300, what="the export job")
        assert job.status == "succeeded", open(job.log_path, encoding="utf-8").read()
        assert {"config.json", "model.safetensors", "tokenizer.json", "minimind_export.json"} <= set(os.listdir(folder))
        last = next(e for e in audit.entries(limit=5, home=store.home) if e.action == "export")  # who, what, where
        asked, result = last.detail["request"], last.detail["result"]
        assert (last.user, asked["weight"], asked["out_dir"], asked["format"], result["job"]) == \
            (roles.os_user(), label, str(folder.resolve()), "llama", job_id)
        at.run()  # the list of exports: format, source, job and verification; how to run the chosen one
        assert any("already holds an export (of reason_64.pth)" in w for w in texts(at.warning)), texts(at.warning)
        replace = next(c for c in at.checkbox if c.key.startswith("models.export.replace."))
        assert not replace.value and next(b for b in at.button if b.label == "Export").disabled
        replace.check().run()
        assert not next(b for b in at.button if b.label == "Export").disabled
        replace.uncheck().run()
        rows = at.dataframe[0].value
        row = rows[rows["Folder"] == name].iloc[0]
        assert (row["Format"], row["Source"], row["Job"]) == ("llama", "reason_64.pth", f"/jobs?job={job_id}")
        assert row["Verified"].startswith("passed: LlamaForCausalLM: logits max abs diff")
        at.selectbox(key="models.export.run_which").set_value(name).run()
        assert any(f"AutoModelForCausalLM.from_pretrained({str(folder)!r})" in c.value for c in at.code)
        # The way back: the exported folder imported as a base weight the Train page can start from.
        at.text_input(key="models.import.source").set_value(f"out/hf/{name}").run()
        at.text_input(key="models.import.name").set_value(name).run()
        at.button(key="models.import.go").click().run()
        assert any("Import done" in s.value for s in at.success), [e.value for e in at.error]
        assert (folder.parents[1] / f"{name}_64.pth").is_file()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        (folder.parents[1] / f"{name}_64.pth").unlink(missing_ok=True)


def test_the_scoring_note_names_the_rewards_of_each_setting():
    from mmcore.models import modelsview
    notes = {(r, m): modelsview.scoring_note(r, m) for r in (True, False) for m in (None, "/rm")}
    assert len(set(notes.values())) == 4
    assert all("Reasoning on" in n for (r, _), n in notes.items() if r)
    assert all("Reasoning off" in n and "no format reward" in n for (r, _), n in notes.items() if not r)
    assert all("reward model" in n for (_, m), n in notes.items() if m)
