"""--tokenizer_path is honoured end to end with a second, differently trained tokenizer: the trainer loads it
(train and resume), records its fingerprint in the weight's metadata, keeps the asked step snapshots;
preflight warns when a base weight was trained with another tokenizer; the chat worker and the export
use it."""
import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from _trainer_helpers import DEMO, REPO, head_jsonl, make_repo_copy, proc_output, run_trainer, tiny_args

from mmcore.models import chat_client
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from model.weights import load_tokenizer
from trainer.rules import specs, weight_meta
from trainer.train_tokenizer import train_tokenizer

pytestmark = pytest.mark.timeout(900)
VOCAB = 400  # far smaller than the bundled 6400: every id it makes is < 400


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A repository copy, a second tokenizer, and a pretrain run (then its resume) made with it."""
    tmp = tmp_path_factory.mktemp("tokenizer-path")
    tok2 = tmp / "tok2"
    train_tokenizer([str(DEMO / "pretrain.jsonl")], str(tok2), vocab_size=VOCAB, max_lines=300, char_seed=False)
    repo = make_repo_copy(tmp / "repo")
    data = head_jsonl(DEMO / "pretrain.jsonl", repo / "data" / "pretrain.jsonl", 16)
    argv = tiny_args(data_path=data, save_weight="pretrain", from_weight="none", tokenizer_path=tok2,
                     save_interval=1, keep_checkpoints=2, accumulation_steps=1)
    first = run_trainer(repo, "train_pretrain.py", argv)
    assert first.returncode == 0, proc_output(first)
    first_meta = weight_meta.read_meta(str(repo / "out" / "pretrain_64.pth"))
    resumed = run_trainer(repo, "train_pretrain.py", argv[:argv.index("--epochs")] + ["--epochs", "2"]
                          + argv[argv.index("--epochs") + 2:] + ["--from_resume", "1"])
    assert resumed.returncode == 0, proc_output(resumed)
    return repo, tok2, first, first_meta, resumed


def test_trainer_loads_records_and_resumes_with_the_chosen_tokenizer(trained):
    repo, tok2, first, first_meta, resumed = trained
    fingerprint = weight_meta.tokenizer_fingerprint(str(tok2))
    assert fingerprint != weight_meta.tokenizer_fingerprint(weight_meta.BUNDLED_TOKENIZER)
    for proc in (first, resumed):
        assert f"Tokenizer: {tok2} ({VOCAB} tokens" in proc.stdout, proc_output(proc)
    assert "skipping" in resumed.stdout or "Epoch:[2/2]" in resumed.stdout
    weight = repo / "out" / "pretrain_64.pth"
    meta = weight_meta.read_meta(str(weight))
    assert meta["tokenizer"] == {"path": str(tok2), "fingerprint": fingerprint}
    assert meta["model"] == {"hidden_size": 64, "num_hidden_layers": 2, "use_moe": False}
    assert (meta["kind"], meta["train_type"], first_meta["global_step"]) == ("full", "pretrain", 4)
    assert meta["global_step"] == 8 and meta["epoch"] == 1  # the resumed run's second epoch
    # --keep_checkpoints 2: the two newest step snapshots, the newest identical to the weight file.
    snaps = sorted(p.name for p in (repo / "out").glob("pretrain_64_step*.pth"))
    assert snaps == ["pretrain_64_step7.pth", "pretrain_64_step8.pth"]
    assert (repo / "out" / "pretrain_64_step8.pth").read_bytes() == weight.read_bytes()
    assert weight_meta.read_meta(str(repo / "out" / "pretrain_64_step7.pth"))["global_step"] == 7


def test_preflight_warns_when_the_base_weights_tokenizer_differs(trained):
    from mmcore.train import preflight
    repo, tok2, *_ = trained
    spec = specs.spec("sft")
    values = {**spec.defaults(), "from_weight": "pretrain", "weight_dir": str(repo / "out"), "hidden_size": 64,
              "num_hidden_layers": 2}
    warned = preflight.tokenizer_mismatch(spec, values, REPO / "trainer")  # default: the bundled ../model
    assert len(warned) == 1 and "pretrain_64.pth was trained with another tokenizer" in warned[0]
    assert preflight.tokenizer_mismatch(spec, {**values, "tokenizer_path": str(tok2)}, REPO / "trainer") == []
    assert preflight.tokenizer(values, REPO / "trainer") == []
    missing = preflight.tokenizer({**values, "tokenizer_path": str(repo / "nowhere")}, REPO / "trainer")
    assert "has no tokenizer.json" in missing[0]


def test_chat_and_export_use_the_chosen_tokenizer(trained, tmp_path):
    repo, tok2, *_ = trained
    weight = repo / "out" / "pretrain_64.pth"
    tok = load_tokenizer(str(tok2))
    model = MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2))
    model.load_state_dict(torch.load(weight, weights_only=True), strict=False)
    model = model.float().eval()
    messages = [{"role": "user", "content": "Tell me about the sea."}]
    ids = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), return_tensors="pt",
              add_special_tokens=False)["input_ids"]
    assert int(ids.max()) < VOCAB
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                                  eos_token_id=2, pad_token_id=0)[0, ids.shape[1]:].tolist()
    expected = expected[:expected.index(2)] if 2 in expected else expected

    home = tmp_path / "home"
    try:
        done = chat_client.reply({"weight": str(weight), "tokenizer_path": str(tok2), "messages": messages,
                                  "temperature": 0, "max_new_tokens": 12}, home)
    finally:
        info = chat_client.status(home)
        if info:
            os.kill(info["pid"], signal.SIGTERM)
    assert done["ids"] == expected
    assert done["text"] == tok.decode(expected, skip_special_tokens=True)

    out = tmp_path / "hf"
    proc = subprocess.run([sys.executable, "-m", "mmcore", "export", str(weight), str(out), "--tokenizer_path",
                           str(tok2)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (out / "tokenizer.json").read_bytes() == (tok2 / "tokenizer.json").read_bytes()
    assert json.loads((out / "minimind_export.json").read_text())["tokenizer_path"] == str(tok2)


RELOAD = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, messages, new_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
tok = AutoTokenizer.from_pretrained(folder)
ids = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), return_tensors="pt",
          add_special_tokens=False)["input_ids"]
with torch.no_grad():
    gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                         eos_token_id=2, pad_token_id=0)[0, ids.shape[1]:].tolist()
print("\nRESULT " + json.dumps({"prompt": ids[0].tolist(), "tokens": gen[:gen.index(2)] if 2 in gen else gen}))
"""


@pytest.fixture(scope="module")
def sft_weight(trained):
    """A full SFT run from the pretrain weight, with the second tokenizer, then its resume."""
    repo, tok2, *_ = trained
    data = head_jsonl(DEMO / "sft.jsonl", repo / "data" / "sft.jsonl", 8)
    argv = tiny_args(data_path=data, from_weight="pretrain", save_weight="full_sft", tokenizer_path=tok2,
                     accumulation_steps=1, learning_rate=1e-3)
    runs = [run_trainer(repo, "train_full_sft.py", argv)]
    runs.append(run_trainer(repo, "train_full_sft.py", [*argv, "--epochs", "2", "--from_resume", "1"]))
    for proc in runs:
        assert proc.returncode == 0, proc_output(proc)
    return repo / "out" / "full_sft_64.pth", runs


def test_sft_from_the_catalogue_chats_and_exports_with_its_own_tokenizer(trained, sft_weight, tmp_path):
    """A second trainer (full SFT, and its resume) honours --tokenizer_path; the catalogue reads the
    tokenizer from the weight's metadata, so chatting with it and exporting it from the Models page use
    that tokenizer without being told: the exported folder, reloaded in a fresh process, gives the chat
    worker's greedy tokens."""
    from mmcore.access import roles
    from mmcore.actions import model_acts
    from mmcore.models import catalogue, modelsview
    repo, tok2, *_ = trained
    weight, runs = sft_weight
    for proc in runs:
        assert f"Tokenizer: {tok2} ({VOCAB} tokens" in proc.stdout, proc_output(proc)
    assert "Epoch:[2/2]" in runs[1].stdout, proc_output(runs[1])
    [entry] = [e for e in catalogue.scan(None, roots=[repo / "out"]) if e.path == str(weight.resolve())]
    assert (entry.train_type, entry.tokenizer_path) == ("sft", str(tok2))
    assert entry.tokenizer_fingerprint == weight_meta.tokenizer_fingerprint(str(tok2))
    target = modelsview.chat_targets([entry])[entry.label]
    assert target.payload() == {"weight": entry.path, "lora": None, "tokenizer_path": str(tok2)}

    messages = [{"role": "user", "content": "Tell me about the sea."}]
    home = tmp_path / "home"
    try:
        done = chat_client.reply({**target.payload(), "messages": messages, "temperature": 0, "max_new_tokens": 12},
                                 home)
    finally:
        info = chat_client.status(home)
        if info:
            os.kill(info["pid"], signal.SIGTERM)
    tok = load_tokenizer(str(tok2))
    assert done["text"] == tok.decode(done["ids"], skip_special_tokens=True)

    out = tmp_path / "hf"
    code, output = model_acts.export(roles.os_user(), target.weight, out, home, **{
        k: v for k, v in target.payload().items() if k != "weight"}).value
    assert code == 0, output
    assert (out / "tokenizer.json").read_bytes() == (tok2 / "tokenizer.json").read_bytes()
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "hf_modules"), "HF_HUB_OFFLINE": "1"}
    reload = subprocess.run([sys.executable, "-c", RELOAD, str(out), json.dumps(messages), "12"], cwd=tmp_path,
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert reload.returncode == 0, reload.stderr
    got = json.loads(reload.stdout.split("\nRESULT ")[-1])
    assert max(got["prompt"]) < VOCAB  # the prompt was tokenized by the second tokenizer
    assert got["tokens"] == done["ids"]
