"""The "Demo preset": a tiny model on the bundled `dataset/demo/` data, so the chain
pretrain -> SFT -> reasoning distill -> GRPO runs on a CPU laptop in minutes.

Values are strings, as a form submits them; paths are relative to `trainer/`, where jobs run.
Demo weights go to `../out/demo` so they never overwrite full-size runs in `../out`.
"""

DEMO_DIR = "../dataset/demo"
DEMO_WEIGHTS = "../out/demo"

# Shared by every type: a small model and fast feedback.
_TINY = {
    "hidden_size": "64", "num_hidden_layers": "2", "use_moe": "0",
    "save_dir": DEMO_WEIGHTS, "weight_dir": DEMO_WEIGHTS,
    "dtype": "float32", "num_workers": "0", "accumulation_steps": "1",
    "log_interval": "5", "save_interval": "50",
}

_RL = {"data_path": f"{DEMO_DIR}/rlaif.jsonl", "max_seq_len": "64", "max_gen_len": "48", "reward_model_path": "none", "reasoning": "1",
       "batch_size": "4", "epochs": "1", "log_interval": "1"}

DEMO_PRESETS = {
    "pretrain": {**_TINY, "data_path": f"{DEMO_DIR}/pretrain.jsonl", "epochs": "1", "batch_size": "16",
                 "learning_rate": "2e-3", "max_seq_len": "128"},
    "sft": {**_TINY, "data_path": f"{DEMO_DIR}/sft.jsonl", "epochs": "1", "batch_size": "16",
            "learning_rate": "1e-3", "max_seq_len": "128"},
    "lora": {**_TINY, "save_dir": f"{DEMO_WEIGHTS}/lora", "data_path": f"{DEMO_DIR}/lora_identity.jsonl",
             "epochs": "3", "batch_size": "16", "learning_rate": "1e-3", "max_seq_len": "128"},
    "dpo": {**_TINY, "data_path": f"{DEMO_DIR}/dpo.jsonl", "epochs": "1", "batch_size": "8",
            "learning_rate": "1e-5", "max_seq_len": "128"},
    "distill_reason": {**_TINY, "data_path": f"{DEMO_DIR}/reason.jsonl", "from_weight": "full_sft",
                       "epochs": "1", "batch_size": "16", "learning_rate": "1e-3", "max_seq_len": "160"},
    "distillation": {**{k: v for k, v in _TINY.items() if k not in ("hidden_size", "num_hidden_layers")},
                     "data_path": f"{DEMO_DIR}/sft.jsonl", "student_hidden_size": "64", "student_num_layers": "2",
                     "teacher_hidden_size": "64", "teacher_num_layers": "2", "epochs": "1", "batch_size": "16",
                     "learning_rate": "1e-3", "max_seq_len": "128"},
    "ppo": {**_TINY, **_RL, "learning_rate": "1e-5", "critic_learning_rate": "1e-4"},
    "grpo": {**_TINY, **_RL, "learning_rate": "2e-4", "num_generations": "4"},
    "spo": {**_TINY, **_RL, "learning_rate": "2e-4"},
}


def demo_preset(train_type):
    """The demo values of one training type (a fresh dict: callers may change it)."""
    return dict(DEMO_PRESETS[train_type])
