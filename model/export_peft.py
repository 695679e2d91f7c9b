"""A MiniMind LoRA file as a PEFT adapter on top of the exported Llama-format base.

MiniMind's LoRA is y = W x + B(A(x)) with no scaling, on every square Linear (q_proj and o_proj):
PEFT's LoRA with lora_alpha = r (scaling 1), no dropout and no bias, targeting those same modules.
Keys `model.layers.N.self_attn.q_proj.lora.A.weight` become
`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight` in adapter_model.safetensors.

    base = AutoModelForCausalLM.from_pretrained(folder + "/base")
    model = PeftModel.from_pretrained(base, folder)
"""
import json
import os

import torch

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def peft_state(lora_state):
    """(PEFT adapter tensors, rank, target module names) of a MiniMind LoRA state dict."""
    tensors, ranks, targets = {}, set(), set()
    for key, value in lora_state.items():
        module, _, rest = key.partition(".lora.")
        if rest not in ("A.weight", "B.weight"):
            raise ValueError(f"unexpected LoRA key {key!r}")
        if rest == "A.weight":
            ranks.add(value.shape[0])
        targets.add(module)
        name = f"base_model.model.{module}.lora_{rest[0]}.weight"
        tensors[name] = value.detach().to("cpu", torch.float32).contiguous()
    if len(ranks) != 1:
        raise ValueError(f"the LoRA file mixes ranks {sorted(ranks)}")
    return tensors, ranks.pop(), sorted(targets)


def write_adapter(lora_state, folder, base_folder):
    """Write adapter_config.json and adapter_model.safetensors into `folder` for the base in `base_folder`."""
    from safetensors.torch import save_file
    tensors, rank, targets = peft_state(lora_state)
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": os.path.abspath(base_folder),
        "r": rank, "lora_alpha": rank, "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
        "target_modules": targets, "use_rslora": False, "use_dora": False, "inference_mode": True,
        "init_lora_weights": True, "modules_to_save": None,
    }
    with open(os.path.join(folder, ADAPTER_CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    save_file(tensors, os.path.join(folder, ADAPTER_WEIGHTS), metadata={"format": "pt"})
    return config
