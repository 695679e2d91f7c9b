"""The seed's backend check: a default GRPO launch and a default SPO launch, from the Train page,
write the seed's flags in the command at the top of the job's log.

The check runs in a temporary copy of the project, with every file the defaults point at put in
its default place, so preflight passes and the launch really starts:

- data: ``../dataset/rlaif-mini.jsonl`` (the bundled demo RLAIF data);
- base weight: ``../out/reason_512.pth``, a real state dict of a 512 x 8 MiniMind in half precision
  (reasoning=1 starts from reason);
- reward model: ``../../internlm2-1_8b-reward`` (a sibling of the project folder), a tiny real
  ``AutoModelForSequenceClassification`` saved with save_pretrained, with the project's tokenizer.

A 512 x 8 GRPO run on a CPU takes long, so each job is stopped once its log header is written.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from _pages_helpers import wait_for

from mmcore.base.paths import ROOT
from mmcore.jobs import runner
from mmcore.jobs.jobstore import JobStore

SEED = {
    "grpo": "--beta 0.02 --num_generations 8 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward",
    "spo": "--beta 0.02 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward",
}
CODE_DIRS = ("trainer", "model", "mmcore", "dataset", "pages")


def copy_project(dest):
    """The project's code, the bundled demo data and the app entry, without outputs or caches."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in CODE_DIRS:
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for big in (dest / "dataset").glob("*.jsonl"):  # users' full data sets stay behind
        big.unlink()
    shutil.copy2(ROOT / "streamlit_app.py", dest / "streamlit_app.py")


def build_default_files(project):
    """Data, base weight and reward model at the paths the GRPO/SPO defaults name."""
    shutil.copy2(ROOT / "dataset" / "demo" / "rlaif.jsonl", project / "dataset" / "rlaif-mini.jsonl")
    code = textwrap.dedent("""
        import sys
        from pathlib import Path
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification
        project = Path(sys.argv[1])
        from model.model_minimind import MiniMindConfig, MiniMindForCausalLM

        torch.manual_seed(0)
        model = MiniMindForCausalLM(MiniMindConfig(hidden_size=512, num_hidden_layers=8))
        (project / "out").mkdir(exist_ok=True)
        torch.save({k: v.half() for k, v in model.state_dict().items()}, project / "out" / "reason_512.pth")

        tokenizer = AutoTokenizer.from_pretrained(str(project / "model"))
        reward_dir = project.parent / "internlm2-1_8b-reward"
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, num_labels=1,
                             pad_token_id=tokenizer.pad_token_id or 0)
        LlamaForSequenceClassification(config).save_pretrained(reward_dir)
        tokenizer.save_pretrained(reward_dir)
    """)
    out = subprocess.run([sys.executable, "-c", code, str(project)], cwd=project, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


# Runs inside the copy: the Train page as AppTest, default form of one type, Launch.
LAUNCH_FROM_PAGE = textwrap.dedent("""
    import json, sys
    from streamlit.testing.v1 import AppTest
    train_type = sys.argv[1]
    at = AppTest.from_file("streamlit_app.py", default_timeout=120).run()
    at.selectbox(key="train.type").set_value(train_type).run()
    result = {"exception": [str(e.value) for e in at.exception], "warnings": [w.value for w in at.warning],
              "preview": [c.value for c in at.code], "errors": [e.value for e in at.error]}
    [b for b in at.button if b.label == "Launch"][0].click().run()
    result["success"] = [s.value for s in at.success]
    result["errors"] += [e.value for e in at.error]
    print("RESULT " + json.dumps(result))
""")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The project copy with the default files in place (built once: the 512 x 8 weight takes a while)."""
    base = tmp_path_factory.mktemp("seed")
    project = base / "minimind"
    copy_project(project)
    build_default_files(project)
    return project


@pytest.mark.timeout(900)
@pytest.mark.parametrize("train_type", ["grpo", "spo"])
def test_default_launch_writes_the_seed_flags_in_the_log_header(project, train_type):
    home = project / "runs"
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", LAUNCH_FROM_PAGE, train_type], cwd=project, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert not result["exception"], result
    assert not result["warnings"], result["warnings"]  # preflight found everything in place
    assert len(result["preview"]) == 1 and SEED[train_type] in result["preview"][0]
    assert result["success"], result["errors"]

    store = JobStore(home / "jobs.db")
    job = store.list(limit=1)[0]
    try:
        assert job.train_type == train_type
        assert job.cwd == str(project / "trainer")
        header = wait_for(lambda: _header(job.log_path), timeout=120, what="the log header")
    finally:
        runner.stop(store, job.id, grace=5, wait=True)
    command_lines = [line for line in header if line.startswith("# command: ")]
    assert len(command_lines) == 1
    for line in command_lines:
        assert SEED[train_type] in line
        assert f"../trainer/train_{train_type}.py" in line
        assert "--device cpu" in line
        assert "--from_weight" not in line
        if train_type == "spo":
            assert "--num_generations" not in line
    assert store.get(job.id).finished


def _header(log_path):
    """The log's lines once the header's command line is written, else None."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    if any(line.startswith("# command: ") for line in lines):
        return lines
    return None
