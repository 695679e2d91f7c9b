"""A reward model read from a local transformers folder, and the checks made before loading it."""
import json
import os

import torch

from trainer.rules import roots
from trainer.rules.setup_errors import SetupError


class RewardModel:
    """A reward model read from a local transformers folder.

    Two kinds are accepted: a model whose remote code offers InternLM2-style
    `get_score(tokenizer, messages) -> float` (loaded with AutoModel and `trust_remote_code=True`, only
    from a folder an admin allowed: see trainer/rules/roots.py), or
    any `AutoModelForSequenceClassification` with one label, whose logit is the score.
    """

    def __init__(self, path, device="cpu"):
        from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        check_reward_model_path(path)
        hf_logging.disable_progress_bar()  # a loading bar per start only clutters the training log
        dtype = torch.float16 if str(device).startswith("cuda") else torch.float32
        self.device = device
        # A folder's own Python code runs only where an admin allowed it (trainer/rules/roots.py).
        trust = roots.trusts_code(path)
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        model = None
        if "AutoModel" in (getattr(config, "auto_map", None) or {}):  # trusted: `check_reward_model_path`
            model = AutoModel.from_pretrained(path, dtype=dtype, trust_remote_code=True)
            if not callable(getattr(model, "get_score", None)):
                model = None  # remote code without get_score: try it as a classifier below
        if model is not None:
            self.kind = "get_score"
        else:
            model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype, trust_remote_code=trust)
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
        return self.score_many([messages])[0]

    #: Chats per classifier forward pass in `score_many`.
    BATCH = 16

    @torch.no_grad()
    def score_many(self, chats):
        """`score` of each chat: a classifier scores them in right-padded batches (each row attends to
        its own tokens only, so it gets the score it gets alone); a get_score model is asked
        once per chat, or once in all through its `get_scores` where it has one."""
        if self.kind == "get_score":
            if callable(getattr(self.model, "get_scores", None)) and len(chats) > 1:
                return [float(x) for x in self.model.get_scores(self.tokenizer, chats)]
            return [float(self.model.get_score(self.tokenizer, messages)) for messages in chats]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        pad_id = self.model.config.pad_token_id
        scores = []
        for start in range(0, len(chats), self.BATCH):
            rows = [self.tokenizer(self._chat_text(m), add_special_tokens=False)["input_ids"]
                    for m in chats[start:start + self.BATCH]]
            rows = [r[-limit:] if limit else r for r in rows]  # keep the response's end, where the score is read
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, r in enumerate(rows):
                ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r, dtype=torch.long), 1
            # The classifier reads each row at its last non-pad token, as it does for a chat alone.
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            scores += [float(x) for x in logits[:, 0]]
        return scores


def check_reward_model_path(path):
    """Raise FileNotFoundError naming `path` unless it is a folder holding a transformers config, and
    ValueError naming the switch an admin needs when the folder brings its own Python code (`auto_map`
    in config.json or tokenizer_config.json) and is not among the folders allowed to run it."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"reward model folder not found: {os.path.abspath(path)} "
                                f"(--reward_model_path {path}; use 'none' for rule rewards only)")
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        raise FileNotFoundError(f"reward model folder {os.path.abspath(path)} has no config.json")
    with_code = []
    for name in ("config.json", "tokenizer_config.json"):
        file = os.path.join(path, name)
        if name != "config.json" and not os.path.isfile(file):
            continue
        try:
            with open(file, encoding="utf-8") as f:
                content = json.load(f)  # a broken config fails here, before any training starts
        except ValueError as e:
            raise ValueError(f"reward model config {os.path.abspath(file)} is not valid JSON: {e}") from None
        if isinstance(content, dict) and content.get("auto_map"):
            with_code.append(name)
    if with_code and not roots.trusts_code(path):
        raise ValueError(untrusted_code_message(path, with_code))


def untrusted_code_message(path, files):
    """Why a reward-model folder with its own code is refused, and the switch that allows it."""
    return (f"reward model folder {os.path.abspath(path)} runs its own Python code (auto_map in "
            f"{' and '.join(files)}), and it is not among the folders allowed to run code. An admin of this "
            f"machine allows it by adding the folder to the environment variable {roots.TRUSTED_CODE_ENV} "
            f"(folders separated by '{os.pathsep}'; default: the upstream reward-model folder) where the "
            f"dashboard's server, or the shell that starts the trainer, runs; otherwise use a reward model "
            f"without its own code, or --reward_model_path none for rule rewards only")


def load_reward_model(path, device):
    """The reward model at `path`, or None without one (`path` None: rule rewards only; see
    `trainer.rules.specs.TypeSpec.reward_model_path`). A folder that cannot be loaded is a `SetupError`
    naming it (one clear line instead of a traceback)."""
    if path is None:
        return None
    try:
        return RewardModel(path, device)
    except (OSError, ValueError) as e:
        raise SetupError(f"could not load the reward model at {os.path.abspath(path)}: {e}") from None
