"""The Data page (AppTest): a demo file's health, mask view and sizes once the background scan is done;
a bad file's problems with their line numbers; bad input as one message; "Train on this file"."""
import json
import os
import signal
import urllib.parse

import pytest
from _pages_helpers import open_page, texts, wait_for

from mmcore.base.paths import ROOT
from mmcore.data import row_client, scans

DEMO = ROOT / "dataset" / "demo"


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory):
    """One dashboard home for the module: its scans and its data worker serve every test (as they serve
    every session); the worker is stopped at the end."""
    home = tmp_path_factory.mktemp("data-page") / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINIMIND_DASHBOARD_HOME", str(home))
        yield home
    status = row_client.status(home) if row_client.running(home) else None
    if status:
        os.kill(status["pid"], signal.SIGTERM)


@pytest.fixture(autouse=True)
def home(shared_home, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(shared_home))
    return shared_home


def scanned(at, home, path, kind):
    """Wait for the page's background scan of `path`, then rerun the page."""
    key = scans.scan_key(path, kind)
    wait_for(lambda: scans.state(home, key).status == "done", timeout=120, what="the data scan")
    at.run()
    assert not at.exception
    return at


def test_demo_dpo_file_health_mask_and_sizes(home):
    at = open_page("pages/data.py", query={"file": str(DEMO / "dpo.jsonl")})
    assert not at.exception
    scanned(at, home, DEMO / "dpo.jsonl", "dpo")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Bad rows"] == "0" and "Rows truncated" in metrics
    shown = texts(at.markdown)
    assert any("**dpo** format · 1000 rows" in s for s in shown)
    assert any(s.startswith("**Chosen**") for s in shown) and any(s.startswith("**Rejected**") for s in shown)
    masks = [h.proto.body for h in at.get("html")]
    assert any('data-mask="trained"' in m and 'data-mask="context"' in m for m in masks)
    assert any("Per epoch" in s for s in shown)


def test_a_file_has_one_format_whatever_type_checks_it(home):
    """The demo RL prompts are an sft-format file read by the SFT and the RL types: said the same under SFT
    and under GRPO. Sizes are figures, not changes: no arrow beside them. The demo's duplicates are explained."""
    said = {}
    for train_type in ("sft", "grpo"):
        at = open_page("pages/data.py", query={"file": str(DEMO / "rlaif.jsonl")})
        at.selectbox(key="data.type").set_value(train_type).run()
        scanned(at, home, DEMO / "rlaif.jsonl", "sft" if train_type == "sft" else "rlaif")
        [said[train_type]] = [s for s in texts(at.markdown) if " format · " in s]
        sizes = [m for m in at.metric if m.label in ("Rows truncated", "Answer tokens lost")]
        assert len(sizes) == 2 and all("direction: NONE" in str(m.proto) for m in sizes)
    assert said["sft"] == said["grpo"]
    assert said["sft"].startswith("**sft** format") and "SFT - Full" in said["sft"] and "RL - GRPO" in said["sft"]

    at = open_page("pages/data.py", query={"file": str(DEMO / "sft.jsonl")})
    scanned(at, home, DEMO / "sft.jsonl", "sft")
    assert {m.label: m.value for m in at.metric}["Duplicates"] != "0"
    assert any("trained on as often as it appears" in c and "bundled demo data" in c for c in texts(at.caption))


def test_bad_file_lists_problems_and_refuses_bad_input(home, tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path.write_text("\n".join([json.dumps(good), "{oops", json.dumps({"text": "x"}), json.dumps(good)]) + "\n")
    at = open_page("pages/data.py", query={"file": str(path)})
    scanned(at, home, path, "sft")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Bad rows"] == "2" and metrics["Duplicates"] == "1"
    frame = at.dataframe[0].value
    assert list(frame["Line"]) == [2, 3]
    at.text_input(key="data.problem_filter").set_value("JSON").run()
    assert list(at.dataframe[0].value["Line"]) == [2]
    at.text_input(key="data.search").set_value("HELLO").run()  # the two good rows, found by search
    assert [o.split(" · ")[0] for o in at.selectbox(key="data.row").options] == ["Line 1", "Line 4"]
    at.number_input(key="data.jump").set_value(2).run()  # the bad row itself: its reason, no worker call
    assert any("Line 2 is a bad row" in e for e in texts(at.error))

    (tmp_path / "zero.jsonl").write_bytes(b"")
    for bad, words in ((tmp_path / "zero.jsonl", "empty (0 bytes)"), ("/etc/hostname", "outside the folders")):
        at = open_page("pages/data.py", query={"file": str(bad)})
        assert not at.exception
        assert any(words in e for e in texts(at.error))


def test_a_jump_reads_no_further_than_the_search_budget(home, tmp_path, monkeypatch):
    from mmcore.data import rows
    monkeypatch.setattr(rows, "SEARCH_BUDGET", 2**20)
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(1, 100_001)))  # about 2 MB
    assert rows.line(path, 3).obj == {"text": "row 3"}
    with pytest.raises(rows.TooFar):
        rows.line(path, 90_000)
    assert rows.line(path, 90_000, budget=path.stat().st_size).obj == {"text": "row 90000"}
    at = open_page("pages/data.py", query={"file": str(path)})
    scanned(at, home, path, "pretrain")
    at.number_input(key="data.jump").set_value(90_000).run()
    assert not at.exception, at.exception
    assert any("Line 90000 starts past the first 1 MB of the file" in w for w in texts(at.warning)), texts(at.warning)


def test_train_on_this_file_fills_the_train_form(home):
    at = open_page("pages/data.py", query={"file": str(DEMO / "dpo.jsonl")})
    scanned(at, home, DEMO / "dpo.jsonl", "dpo")
    at.radio(key="data.suggest").set_value("p99").run()
    (link,) = [e.proto for e in at.get("page_link") if e.proto.label == "Train on this file"]
    assert link.page.endswith("train") and not at.exception
    query = dict(urllib.parse.parse_qsl(link.query_string))
    assert query == {"data": "../dataset/demo/dpo.jsonl", "type": "dpo", "max_seq_len": query["max_seq_len"]}
    at = open_page(query=query)  # the link followed (Train is the default page)
    assert not at.exception
    assert at.session_state["train.type"] == "dpo"
    assert at.session_state["train.dpo.data_path"] == "../dataset/demo/dpo.jsonl"
    assert at.session_state["train.dpo.max_seq_len"] % 8 == 0
    assert any("Filled in from the Data page" in s for s in texts(at.info))


def test_train_preflight_links_a_bad_data_file_to_the_data_page(home):
    at = open_page()  # Train
    at.text_input(key="train.pretrain.data_path").set_value(str(DEMO / "sft.jsonl")).run()  # sft rows for pretrain
    assert not at.exception
    links = [e.proto for e in at.get("page_link")]
    to_data = [link for link in links if link.page.endswith("data.py") or "data" in link.page]
    assert to_data and "Data page" in to_data[0].label
    assert to_data[0].query_string == f"file={DEMO / 'sft.jsonl'}".replace("/", "%2F")


def test_data_page_in_chinese(home):
    from test_i18n import english_left

    from mmcore.base import i18n

    with i18n.language("zh"):
        at = open_page("pages/data.py", query={"file": str(DEMO / "dpo.jsonl")}, state={i18n.STATE_KEY: "zh"})
        scanned(at, home, DEMO / "dpo.jsonl", "dpo")
        english = [(where, text) for where, text in english_left(at) if not text.endswith(".jsonl")]  # file names
    assert not at.exception
    assert at.title[0].value == "数据"
    assert not {key for lang, key in i18n.missing if lang == "zh"}
    assert not english, english
