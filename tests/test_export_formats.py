"""Export formats on the tiny demo-sized model (64 x 2), dense, MoE and with a LoRA:

- the Llama folder loads in a fresh process with plain `AutoModelForCausalLM` / `AutoTokenizer`, stdin
  closed, no custom code and no prompt, with the MiniMind model's logits (<= 1e-4) and token ids;
- a MoE model falls back to the custom-code folder and says why (GGUF and PEFT refuse it);
- the LoRA as a PEFT adapter on the Llama base equals the merged model; merging stays available;
- GGUF f32/f16/q8_0 with its Ollama Modelfile; in llama.cpp (marker `llama_cpp`, skipped only when
  llama-cpp-python is not installed): token ids, logits, greedy text and chat template as ours;
- import: an exported Llama folder or a MiniMind .pth becomes a base weight with the same logits.
"""
import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from _trainer_helpers import REPO, save_random_weights
from test_export import random_lora, reference

from mmcore.jobs.progress import summarize
from mmcore.logs.log_parser import LogParser
from mmcore.models import export_job
from model import export_verify
from model.export_hf import export
from model.export_hf import main as export_main
from model.import_weight import import_weight
from model.weights import WeightFileError, load_model, load_tokenizer

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None

# A fresh process, stdin closed, loading what users load: no trust_remote_code for Llama and PEFT.
LOAD = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from peft import PeftModel
llama, custom, peft_dir = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(llama)
ids = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True,
                              return_tensors="pt", return_dict=True)["input_ids"]
model = AutoModelForCausalLM.from_pretrained(llama).eval()
peft_tok = AutoTokenizer.from_pretrained(peft_dir)
peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(peft_dir + "/base"), peft_dir).eval()
custom_tok = AutoTokenizer.from_pretrained(custom, trust_remote_code=True)
with torch.no_grad():
    out = {"class": type(model).__name__, "dtype": str(model.dtype), "ids": ids[0].tolist(),
           "logits": model(ids).logits[0].tolist(), "peft": peft_model(ids).logits[0].tolist(),
           "merged": peft_model.merge_and_unload()(ids).logits[0].tolist(),
           "encode": [t.encode("你好 world 😀 <|im_end|>") for t in (tok, peft_tok, custom_tok)]}
print("\nRESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The weights, and their Llama (LoRA merged), MoE-fallback and PEFT exports."""
    d = tmp_path_factory.mktemp("export-formats")
    dense = save_random_weights(d / "out", "full_sft", seed=3)
    moe = save_random_weights(d / "out", "grpo", use_moe=True, seed=4)
    lora = random_lora(dense, d / "out" / "lora" / "lora_identity_64.pth")
    made = SimpleNamespace(dir=d, dense=dense, moe=moe, lora=lora, llama=d / "llama", moe_dir=d / "moe",
                           peft=d / "peft")
    made.manifests = {"llama": export(str(dense), str(made.llama), lora=str(lora)),
                      "moe": export(str(moe), str(made.moe_dir)),
                      "peft": export(str(dense), str(made.peft), lora=str(lora), fmt="peft")}
    return made


def test_llama_folder_and_peft_adapter_load_with_plain_transformers_without_a_prompt(made):
    llama, moe, peft = made.manifests["llama"], made.manifests["moe"], made.manifests["peft"]
    assert llama["format"] == "llama" and llama["verification"]["ok"], llama["verification"]
    assert llama["verification"]["max_abs_diff"] <= 1e-4 and llama["fallback_reason"] is None
    assert not [n for n in os.listdir(made.llama) if n.endswith(".py")]  # no custom code
    config = json.loads((made.llama / "config.json").read_text())
    assert (config["architectures"], config["model_type"], config["tie_word_embeddings"], config["num_key_value_heads"],
            config["rope_theta"], config["rms_norm_eps"]) == (["LlamaForCausalLM"], "llama", True, 2, 1e6, 1e-5)
    assert "auto_map" not in config and "chat_template" in (made.llama / "tokenizer_config.json").read_text()
    assert json.loads((made.llama / "generation_config.json").read_text())["eos_token_id"] == 2
    # MoE: Llama cannot express it; the custom-code folder, with the reason.
    assert moe["format"] == "minimind" and "mixture of experts" in moe["fallback_reason"] and moe["verification"]["ok"]
    assert peft["format"] == "peft" and peft["verification"]["ok"], peft["verification"]
    adapter = json.loads((made.peft / "adapter_config.json").read_text())
    assert (adapter["peft_type"], adapter["r"], adapter["lora_alpha"]) == ("LORA", 8, 8)

    proc = subprocess.run([sys.executable, "-c", LOAD, str(made.llama), str(made.moe_dir), str(made.peft)],
                          cwd=made.dir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(made.dir / "hf_modules")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Do you wish" not in proc.stdout + proc.stderr and "trust_remote_code" not in proc.stderr
    got = json.loads(proc.stdout.split("\nRESULT ")[-1])
    assert got["class"] == "LlamaForCausalLM" and got["dtype"] == "torch.float32"
    ours = load_tokenizer()
    chat = ours.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True,
                                    tokenize=True, return_dict=True)
    assert got["ids"] == chat["input_ids"]
    assert got["encode"] == [ours.encode("你好 world 😀 <|im_end|>")] * 3
    ids = torch.tensor([got["ids"]])
    with torch.no_grad():
        merged = reference(made.dense, made.lora)(ids).logits[0]  # adapters applied, not merged
        base = reference(made.dense)(ids).logits[0]
    for key in ("logits", "peft", "merged"):
        assert (torch.tensor(got[key]) - merged).abs().max() <= 1e-4, key
    assert (torch.tensor(got["peft"]) - base).abs().max() > 1e-3  # the adapter really is applied


def test_import_round_trip_and_refusals(made, tmp_path, capsys):
    imported = tmp_path / "out" / "imported_64.pth"
    config = import_weight(str(made.llama), str(imported))
    assert (config.hidden_size, config.num_hidden_layers, config.use_moe) == (64, 2, False)
    ids = torch.tensor([[1, 77, 300, 5000, 2, 1, 9]])
    with torch.no_grad():
        want = reference(made.dense, made.lora)(ids).logits
        assert (load_model(str(imported))(ids).logits - want).abs().max() <= 1e-5
        upstream = tmp_path / "out" / "upstream_64_moe.pth"
        import_weight(str(made.moe), str(upstream))  # an upstream .pth is taken as it is
        assert torch.equal(load_model(str(upstream))(ids).logits, load_model(str(made.moe))(ids).logits)
    with pytest.raises(FileExistsError):
        import_weight(str(made.llama), str(imported))
    with pytest.raises(WeightFileError, match="not a Llama folder"):
        import_weight(str(made.moe_dir), str(tmp_path / "x_64.pth"))
    # mmcore.api: the same export from Python, refused with the export's own reason.
    from mmcore import api
    with pytest.raises(api.Refused, match="needs --lora"):
        api.export(str(made.dense), str(tmp_path / "api-peft"), format="peft")
    # GGUF and PEFT refuse a MoE model with the reason; nothing is written.
    for argv, says in (([str(made.moe), str(tmp_path / "g"), "--format", "gguf"],
                        "cannot export as gguf: it is a mixture"),
                       ([str(made.dense), str(tmp_path / "p"), "--format", "peft"], "needs --lora")):
        assert export_main(argv) == 2 and says in capsys.readouterr().err
        assert not os.path.exists(argv[1])


def test_gguf_and_modelfile_are_written_and_read_back_by_transformers(made):
    from gguf import GGUFReader
    out = made.dir / "gguf_f16"
    proc = subprocess.run([sys.executable, "-m", "mmcore", "export", str(made.dense), str(out), "--format", "gguf",
                           "--verify", "0"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ollama create gguf_f16 -f {out}/Modelfile" in proc.stdout
    log = made.dir / "export.log"  # as a job's log: its progress lines give the Jobs page's progress bar
    log.write_text(proc.stdout)
    parser = LogParser(str(log))
    parser.update()
    assert summarize(parser.records).percent == 100.0
    modelfile = (out / "Modelfile").read_text()
    assert modelfile.startswith("FROM ./model-f16.gguf\nTEMPLATE \"\"\"")
    for line in ('PARAMETER stop "<|im_end|>"', "PARAMETER temperature 0.85", "PARAMETER top_p 0.85",
                 "<|im_start|>assistant\n\"\"\""):
        assert line in modelfile
    fields = GGUFReader(str(out / "model-f16.gguf")).fields

    def text(key):
        field = fields[key]
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    assert (text("general.architecture"), text("tokenizer.ggml.model"), text("tokenizer.ggml.pre")) == \
        ("llama", "gpt2", "gpt-2")
    assert text("tokenizer.chat_template") == load_tokenizer().chat_template
    manifest = export_job.read_manifest(out)
    assert manifest["files"] == ["model-f16.gguf", "Modelfile"]
    assert manifest["ollama_command"].startswith("ollama create")
    # The second reader: transformers dequantises it into a LlamaForCausalLM with our logits.
    check = export_verify.verify_gguf_transformers(str(out / "model-f16.gguf"), "f16", load_model(str(made.dense)),
                                                   load_tokenizer())
    assert check["ok"] and check["max_abs_diff"] <= 1e-3, check
    _, code = export_job.how_to_run({**manifest, "folder": str(out)})
    assert "ollama create gguf_f16" in code and "llama-cli -m" in code


@pytest.mark.llama_cpp
@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install -e '.[export]')")
@pytest.mark.parametrize("gguf_type", ["f32", "f16", "q8_0"])
def test_gguf_in_llama_cpp_matches_our_tokens_logits_greedy_text_and_template(made, gguf_type):
    manifest = export(str(made.dense), str(made.dir / f"gguf-{gguf_type}"), lora=str(made.lora), fmt="gguf",
                      gguf_type=gguf_type)
    v = manifest["verification"]
    assert v["ok"] and v["token_ids_equal"] and v["template_equal"], v
    assert v["max_abs_diff"] <= {"f32": 1e-3, "f16": 5e-2, "q8_0": 2e-1}[gguf_type], v
    if gguf_type != "q8_0":
        assert v["greedy_equal"], v
    size = os.path.getsize(made.dir / f"gguf-{gguf_type}" / f"model-{gguf_type}.gguf")
    assert size < {"f32": 3.0e6, "f16": 1.7e6, "q8_0": 1.0e6}[gguf_type], size
