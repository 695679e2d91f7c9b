"""Tiny local reward models for tests, saved with the project's tokenizer (pytest fixtures, module scope):

- `classifier_reward_model`: a one-label Llama sequence classifier (its logit is the score);
- `get_score_reward_model`: a remote-code model offering InternLM2's `get_score(tokenizer, messages)`
  (its folder holds its modeling file and `auto_map`, so it loads only where its code is trusted).

Import both names into a test module to use them there.
"""
import json
import sys

import pytest
import torch
from _trainer_helpers import REPO

# A reward model whose remote code offers InternLM2's `get_score(tokenizer, messages)`.
GET_SCORE_MODELING = '''
import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel


class TinyScoreConfig(PretrainedConfig):
    model_type = "tiny_score"

    def __init__(self, vocab_size=6400, hidden_size=8, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


class TinyScoreModel(PreTrainedModel):
    config_class = TinyScoreConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(self, input_ids):
        return self.head(self.embed(input_ids).mean(dim=1)).squeeze(-1)

    @torch.no_grad()
    def get_score(self, tokenizer, conversation):
        text = "".join(m["role"] + m["content"] for m in conversation)
        ids = tokenizer(text, return_tensors="pt")["input_ids"].to(self.embed.weight.device)
        return 5.0 + float(self.forward(ids)[0])  # about 5: the trainer clips it to 3
'''



@pytest.fixture(scope="module")
def classifier_reward_model(tmp_path_factory):
    """A tiny Llama sequence classifier (one label) with the project's tokenizer, saved locally."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification
    path = tmp_path_factory.mktemp("rm_classifier")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=6400, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         num_labels=1, pad_token_id=0)
    LlamaForSequenceClassification(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(REPO / "model").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def get_score_reward_model(tmp_path_factory):
    """A tiny remote-code model exposing get_score, saved with its modeling file and auto_map."""
    import importlib.util

    from transformers import AutoTokenizer
    path = tmp_path_factory.mktemp("rm_get_score")
    source = tmp_path_factory.mktemp("rm_source") / "modeling_tiny_score.py"  # save_pretrained copies it
    source.write_text(GET_SCORE_MODELING, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("modeling_tiny_score", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules["modeling_tiny_score"] = module
    spec.loader.exec_module(module)
    module.TinyScoreConfig.register_for_auto_class()
    module.TinyScoreModel.register_for_auto_class("AutoModel")
    torch.manual_seed(0)
    module.TinyScoreModel(module.TinyScoreConfig()).save_pretrained(path)
    AutoTokenizer.from_pretrained(REPO / "model").save_pretrained(path)
    assert "AutoModel" in json.loads((path / "config.json").read_text())["auto_map"]
    return path
