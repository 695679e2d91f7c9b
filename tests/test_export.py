"""Export to a transformers folder: a fresh process reloads it with the Auto classes and gets the .pth model's
logits (within 1e-5) and greedy tokens; LoRA is merged; bad files are refused with a clear message.

The other formats (Llama folder, GGUF, PEFT adapter) and import are in tests/test_export_formats.py."""
import json
import os
import pickle
import subprocess
import sys

import pytest
import torch
from _trainer_helpers import REPO, save_random_weights

from model.export_hf import main as export_main
from model.model_lora import apply_lora, load_lora, save_lora
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from model.weights import WeightFileError, infer_config, read_state_dict

PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]
NEW_TOKENS = 12

RELOAD = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
out = {}
for folder in sys.argv[1:]:
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok.apply_chat_template(%r, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits[0]
        gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=%d, min_new_tokens=%d,
                             do_sample=False)
    out[folder] = {"ids": ids[0].tolist(), "logits": logits.tolist(), "tokens": gen[0, ids.shape[1]:].tolist(),
                   "class": type(model).__name__, "dtype": str(model.dtype)}
print("\nRESULT " + json.dumps(out))
""" % (PROMPT, NEW_TOKENS, NEW_TOKENS)


def reference(weight, lora=None, moe=False):
    """The .pth model built the plain way (adapters kept separate, not merged)."""
    model = MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2, use_moe=moe))
    model.load_state_dict(torch.load(weight, weights_only=True), strict=False)
    if lora:
        apply_lora(model)
        load_lora(model, lora)
    return model.float().eval()


def random_lora(base_weight, path):
    model = reference(base_weight)
    apply_lora(model)
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if ".lora.B." in name:
            p.data.normal_(0, 0.05)  # a trained adapter: a fresh one (B = 0) would change nothing
    save_lora(model, path)
    return path


def test_export_reloads_in_a_fresh_process_with_the_same_logits_and_tokens(tmp_path):
    dense = save_random_weights(tmp_path / "out", "full_sft", seed=3)
    moe = save_random_weights(tmp_path / "out", "grpo", use_moe=True, seed=4)
    lora = random_lora(dense, tmp_path / "out" / "lora" / "lora_identity_64.pth")
    dense_dir, moe_dir = tmp_path / "hf_dense_lora", tmp_path / "hf_moe"
    # The CLI (python -m mmcore export) for the dense model with its LoRA merged; the function for MoE.
    proc = subprocess.run([sys.executable, "-m", "mmcore", "export", str(dense), str(dense_dir), "--lora", str(lora),
                           "--format", "minimind", "--verify", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hidden_size=64, num_hidden_layers=2, use_moe=0" in proc.stdout
    assert export_main([str(moe), str(moe_dir), "--verify", "0"]) == 0  # the default (llama) falls back for MoE
    for folder in (dense_dir, moe_dir):
        names = set(os.listdir(folder))
        assert {"config.json", "model.safetensors", "model_minimind.py", "packing.py", "shared_prefix.py", "tokenizer.json", "tokenizer_config.json",
                "generation_config.json"} <= names
        config = json.loads((folder / "config.json").read_text())
        assert config["auto_map"]["AutoModelForCausalLM"] == "model_minimind.MiniMindForCausalLM"
    assert json.loads((moe_dir / "config.json").read_text())["use_moe"] is True

    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "hf_modules"), "HF_HUB_OFFLINE": "1"}
    reload = subprocess.run([sys.executable, "-c", RELOAD, str(dense_dir), str(moe_dir)], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert reload.returncode == 0, reload.stderr
    got = json.loads(reload.stdout.split("\nRESULT ")[-1])

    for folder, model in ((dense_dir, reference(dense, lora)), (moe_dir, reference(moe, moe=True))):
        result = got[str(folder)]
        assert result["class"] == "MiniMindForCausalLM" and result["dtype"] == "torch.float32"
        ids = torch.tensor([result["ids"]])
        with torch.no_grad():
            logits = model(ids).logits[0]
            tokens = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                    min_new_tokens=NEW_TOKENS, do_sample=False)[0, ids.shape[1]:].tolist()
        assert torch.allclose(torch.tensor(result["logits"]), logits, atol=1e-5, rtol=0), folder
        assert result["tokens"] == tokens
    # The merged LoRA really changed the model: the base alone gives other logits.
    with torch.no_grad():
        base_logits = reference(dense)(torch.tensor([got[str(dense_dir)]["ids"]])).logits[0]
    assert not torch.allclose(torch.tensor(got[str(dense_dir)]["logits"]), base_logits, atol=1e-3)


def test_export_refuses_what_is_not_a_minimind_state_dict(tmp_path, capsys):
    dense = save_random_weights(tmp_path, "full_sft")
    text = tmp_path / "notes.pth"
    text.write_text("not a checkpoint")
    planted = tmp_path / "evil.pth"
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    torch.save({"model.embed_tokens.weight": Payload()}, planted, pickle_module=pickle)
    lora_only = tmp_path / "adapter_64.pth"
    torch.save({"model.layers.0.self_attn.q_proj.lora.A.weight": torch.zeros(8, 64)}, lora_only)
    other = tmp_path / "other.pth"
    torch.save({"encoder.weight": torch.zeros(3, 3)}, other)

    cases = [([str(text)], "is not a MiniMind state dict"), ([str(planted)], "is not a MiniMind state dict"),
             ([str(lora_only)], "LoRA adapters only"), ([str(other)], "no model.embed_tokens.weight"),
             ([str(dense), "--hidden_size", "512"], "has hidden_size=64, not 512"),
             ([str(dense), "--use_moe", "1"], "has use_moe=0, not 1"),
             ([str(tmp_path / "missing.pth")], "no such file")]
    for argv, message in cases:
        out_dir = tmp_path / "hf"
        assert export_main([argv[0], str(out_dir)] + argv[1:]) == 2, argv
        assert message in capsys.readouterr().err, argv
        assert not out_dir.exists()
    assert not marker.exists()
    # The CLI passes the refusal and its status through.
    proc = subprocess.run([sys.executable, "-m", "mmcore", "export", str(text), str(tmp_path / "hf")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "is not a MiniMind state dict" in proc.stderr
    # An existing, non-empty folder is never overwritten.
    keep = tmp_path / "taken"
    keep.mkdir()
    (keep / "mine.txt").write_text("keep me")
    assert export_main([str(dense), str(keep)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (keep / "mine.txt").read_text() == "keep me"


def test_infer_config_reads_the_size_from_the_state_dict(tmp_path):
    path = save_random_weights(tmp_path, "pretrain", hidden_size=128, num_hidden_layers=3, use_moe=True)
    config = infer_config(read_state_dict(path))
    assert (config.hidden_size, config.num_hidden_layers, config.use_moe) == (128, 3, True)
    assert (config.n_routed_experts, config.n_shared_experts, config.num_key_value_heads) == (4, 1, 2)
    with pytest.raises(WeightFileError, match="num_hidden_layers=3, not 8"):
        infer_config(read_state_dict(path), num_hidden_layers=8)
