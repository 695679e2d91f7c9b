"""A reward model read from a local transformers folder, and the checks made before loading it."""
import json
import os

import torch

from trainer.trainer_utils import SetupError


class RewardModel:
    """A reward model read from a local transformers folder.

    Two kinds are accepted: a model whose remote code offers InternLM2-style
    `get_score(tokenizer, messages) -> float` (loaded with AutoModel and `trust_remote_code=True`), or
    any `AutoModelForSequenceClassification` with one label, whose logit is the score.
    """

    def __init__(self, path, device="cpu"):
        from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        check_reward_model_path(path)
        hf_logging.disable_progress_bar()  # a loading bar per start only clutters the training log
        dtype = torch.float16 if str(device).startswith("cuda") else torch.float32
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
        config = AutoConfig.from_pretrained(path, trust_remote_code=True)
        model = None
        if "AutoModel" in (getattr(config, "auto_map", None) or {}):
            model = AutoModel.from_pretrained(path, dtype=dtype, trust_remote_code=True)
            if not callable(getattr(model, "get_score", None)):
                model = None  # remote code without get_score: try it as a classifier below
        if model is not None:
            self.kind = "get_score"
        else:
            model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype, trust_remote_code=True)
            if model.config.num_labels != 1:
                raise ValueError(f"reward model {path}: a sequence classifier needs num_labels=1, "
                                 f"this one has {model.config.num_labels}")
            self.kind = "classifier"
            if model.config.pad_token_id is None:
                model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model = model.to(device).eval().requires_grad_(False)

    def _chat_text(self, messages):
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)

    @torch.no_grad()
    def score(self, messages):
        """The reward of a chat whose last message is the assistant's response."""
        if self.kind == "get_score":
            return float(self.model.get_score(self.tokenizer, messages))
        ids = self.tokenizer(self._chat_text(messages), return_tensors="pt", add_special_tokens=False)["input_ids"]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit:
            ids = ids[:, -limit:]  # keep the response's end, where a classifier reads the score
        return float(self.model(input_ids=ids.to(self.device)).logits[0, 0])


def check_reward_model_path(path):
    """Raise FileNotFoundError naming `path` unless it is a folder holding a transformers config."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"reward model folder not found: {os.path.abspath(path)} "
                                f"(--reward_model_path {path}; use 'none' for rule rewards only)")
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        raise FileNotFoundError(f"reward model folder {os.path.abspath(path)} has no config.json")
    try:
        with open(config, encoding="utf-8") as f:
            json.load(f)  # a broken config fails here, before any training starts
    except ValueError as e:
        raise ValueError(f"reward model config {os.path.abspath(config)} is not valid JSON: {e}") from None


def load_reward_model(path, device):
    """The reward model at `path`, or None for 'none' (rule rewards only). A folder that cannot be
    loaded is a `SetupError` naming it (one clear line instead of a traceback)."""
    if str(path).strip().lower() == "none":
        return None
    try:
        return RewardModel(path, device)
    except (OSError, ValueError) as e:
        raise SetupError(f"could not load the reward model at {os.path.abspath(path)}: {e}") from None
