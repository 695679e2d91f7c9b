"""MiniMind model: shapes, names, losses, caching and generation, on tiny random models."""
import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache

from model.model_minimind import MiniMindConfig, MiniMindForCausalLM, precompute_freqs_cis

PAD = 0


def tiny(use_moe=False, seed=0, **kw):
    torch.manual_seed(seed)
    config = MiniMindConfig(hidden_size=64, num_hidden_layers=2, use_moe=use_moe, **kw)
    return MiniMindForCausalLM(config).eval()


def left_padded_batch(seed=1):
    """Three prompts of lengths 5, 7 and 3, left-padded to 7."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 6400, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    for row, n_pad in ((0, 2), (2, 4)):
        ids[row, :n_pad], mask[row, :n_pad] = PAD, 0
    return ids, mask


def test_config_defaults_match_upstream():
    c = MiniMindConfig()
    assert (c.hidden_size, c.num_hidden_layers, c.vocab_size) == (512, 8, 6400)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (8, 2, 64)
    assert c.intermediate_size == 1408  # 64 * ceil(int(512 * 8 / 3) / 64)
    assert MiniMindConfig(hidden_size=768).intermediate_size == 2048
    assert (c.rope_theta, c.rms_norm_eps, c.max_position_embeddings) == (1e6, 1e-5, 32768)
    assert (c.bos_token_id, c.eos_token_id, c.tie_word_embeddings, c.use_moe) == (1, 2, True, False)
    assert (c.n_routed_experts, c.num_experts_per_tok, c.n_shared_experts) == (4, 2, 1)
    assert (c.scoring_func, c.aux_loss_alpha, c.seq_aux, c.norm_topk_prob) == ("softmax", 0.1, True, True)
    assert c.model_type == "minimind" and c.yarn_parameters() is None


def test_config_rejects_bad_shapes():
    with pytest.raises(ValueError, match="multiple of num_attention_heads"):
        MiniMindConfig(hidden_size=100)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        MiniMindConfig(num_key_value_heads=3)
    with pytest.raises(ValueError, match="hidden_size must be a positive integer"):
        MiniMindConfig(hidden_size="512")


def test_config_accepts_cli_style_values_and_round_trips():
    c = MiniMindConfig(hidden_size=64, num_hidden_layers=2, use_moe=1, dropout=0)
    assert c.use_moe is True and c.dropout == 0.0
    again = MiniMindConfig.from_dict(c.to_dict())
    assert (again.hidden_size, again.use_moe, again.intermediate_size) == (64, True, 192)


@pytest.mark.parametrize("use_moe", [False, True])
def test_forward_shapes(use_moe):
    model = tiny(use_moe)
    ids = torch.randint(0, 6400, (2, 9))
    out = model(ids)
    assert out.logits.shape == (2, 9, 6400)
    assert out.hidden_states.shape == (2, 9, 64)
    assert out.aux_loss.shape == () and out.loss is None and out.past_key_values is None


def test_embedding_and_head_are_one_tensor():
    model = tiny()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    # Head initialised like upstream (Linear default), not N(0, 1) embedding init.
    assert model.lm_head.weight.abs().max() <= 1 / 64 ** 0.5 + 1e-6


def expected_keys(n_layers, use_moe, n_experts=4, n_shared=1):
    keys = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(n_layers):
        p = f"model.layers.{i}."
        keys |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        keys |= {p + f"self_attn.{x}_proj.weight" for x in "qkvo"}
        ffn = [f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")]
        if use_moe:
            keys.add(p + "mlp.gate.weight")
            for j in range(n_experts):
                keys |= {p + f.replace("mlp.", f"mlp.experts.{j}.") for f in ffn}
            for j in range(n_shared):
                keys |= {p + f.replace("mlp.", f"mlp.shared_experts.{j}.") for f in ffn}
        else:
            keys |= {p + f for f in ffn}
    return keys


@pytest.mark.parametrize("use_moe", [False, True])
def test_state_dict_names_and_shapes(use_moe):
    sd = tiny(use_moe).state_dict()
    assert set(sd) == expected_keys(2, use_moe)
    assert sd["model.layers.0.self_attn.q_proj.weight"].shape == (64, 64)
    assert sd["model.layers.0.self_attn.k_proj.weight"].shape == (16, 64)  # 2 KV heads of 8
    assert sd["model.embed_tokens.weight"].shape == (6400, 64)
    if use_moe:
        assert sd["model.layers.1.mlp.gate.weight"].shape == (4, 64)
        assert sd["model.layers.1.mlp.experts.3.down_proj.weight"].shape == (64, 192)
    else:
        assert sd["model.layers.1.mlp.gate_proj.weight"].shape == (192, 64)


@pytest.mark.parametrize("use_moe", [False, True])
def test_half_precision_state_dict_reloads_identically(use_moe, tmp_path):
    source = tiny(use_moe, seed=0)
    path = tmp_path / "w.pth"
    torch.save({k: v.half() for k, v in source.state_dict().items()}, path)
    loaded = tiny(use_moe, seed=1)
    loaded.load_state_dict(torch.load(path), strict=True)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    with torch.no_grad():  # the same rounding the saved file went through
        for p in source.parameters():
            p.copy_(p.half().float())
    ids = torch.randint(0, 6400, (2, 11))
    assert torch.equal(source(ids).logits, loaded(ids).logits)


def test_labels_loss_is_shifted_cross_entropy():
    model = tiny()
    ids = torch.randint(0, 6400, (2, 8))
    labels = ids.clone()
    labels[0, :3] = -100
    labels[1, 5] = -100
    out = model(ids, labels=labels)
    logits = out.logits
    terms = [F.cross_entropy(logits[b, t], labels[b, t + 1], reduction="sum")
             for b in range(2) for t in range(7) if labels[b, t + 1] != -100]
    assert torch.allclose(out.loss, torch.stack(terms).mean(), atol=1e-6)


def test_aux_loss_positive_for_moe_in_training_and_zero_for_dense():
    ids = torch.randint(0, 6400, (2, 16))
    moe = tiny(use_moe=True).train()
    out = moe(ids, labels=ids)
    assert out.aux_loss.item() > 0
    (out.loss + out.aux_loss).backward()
    gate = moe.model.layers[0].mlp.gate.weight
    assert gate.grad is not None and gate.grad.abs().sum() > 0
    assert moe.eval()(ids).aux_loss.item() == 0.0  # upstream computes it only while training
    assert tiny().train()(ids).aux_loss.item() == 0.0


def test_moe_top_k_weights_are_normalised():
    gate = tiny(use_moe=True).model.layers[0].mlp.gate
    idx, weight, _ = gate(torch.randn(2, 5, 64))
    assert idx.shape == weight.shape == (10, 2)
    assert torch.allclose(weight.sum(-1), torch.ones(10))


def test_logits_to_keep():
    model = tiny()
    ids = torch.randint(0, 6400, (2, 10))
    full = model(ids).logits
    last = model(ids, logits_to_keep=1)
    assert last.logits.shape == (2, 1, 6400)
    assert torch.allclose(last.logits, full[:, -1:], atol=1e-6)
    assert last.hidden_states.shape == (2, 10, 64)
    with pytest.raises(ValueError, match="logits_to_keep=0"):
        model(ids, logits_to_keep=3, labels=ids)


def test_right_padding_leaves_real_tokens_unchanged():
    model = tiny()
    ids = torch.randint(3, 6400, (2, 10))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    padded = model(ids, attention_mask=mask).logits
    assert torch.allclose(padded[0, :6], model(ids[:1, :6]).logits[0], atol=1e-5)
    assert torch.allclose(padded[1], model(ids[1:]).logits[0], atol=1e-5)


def test_left_padded_rows_match_unpadded_rows_and_stay_finite():
    model = tiny()
    ids, mask = left_padded_batch()
    logits = model(ids, attention_mask=mask).logits
    assert torch.isfinite(logits).all()
    for row in range(3):
        n = int(mask[row].sum())
        alone = model(ids[row:row + 1, -n:]).logits[0]
        assert torch.allclose(logits[row, -n:], alone, atol=1e-5)


def test_manual_cache_step_equals_full_forward():
    model = tiny()
    ids = torch.randint(3, 6400, (2, 9))
    cache = DynamicCache(config=model.config)
    first = model(ids[:, :6], past_key_values=cache, use_cache=True)
    assert first.past_key_values is cache and cache.get_seq_length() == 6
    step = model(ids[:, 6:], past_key_values=cache, use_cache=True)  # several new tokens at once
    assert torch.allclose(step.logits, model(ids).logits[:, 6:], atol=1e-5)
    with pytest.raises(TypeError, match="Cache"):
        model(ids, past_key_values=[(torch.zeros(1), torch.zeros(1))])


@pytest.mark.parametrize("use_moe", [False, True])
def test_cached_greedy_generation_equals_recomputation(use_moe):
    model = tiny(use_moe)
    ids, mask = left_padded_batch()
    kw = dict(attention_mask=mask, max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=PAD)
    cached = model.generate(ids, use_cache=True, **kw)
    recomputed = model.generate(ids, use_cache=False, **kw)
    assert cached.shape == (3, 7 + 12)
    assert torch.equal(cached, recomputed)
    # Padding does not change what a prompt generates.
    for row in range(3):
        n = int(mask[row].sum())
        alone = model.generate(ids[row:row + 1, -n:], max_new_tokens=12, min_new_tokens=12,
                               do_sample=False, pad_token_id=PAD)
        assert torch.equal(alone[0, n:], cached[row, 7:])


def test_sampling_with_num_return_sequences():
    model = tiny()
    ids, mask = left_padded_batch()
    torch.manual_seed(0)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=True,
                         top_p=0.9, temperature=0.8, num_return_sequences=4, pad_token_id=PAD)
    assert out.shape == (12, 13)
    assert torch.equal(out[:4, :7], ids[:1].expand(4, 7))  # copies of each prompt stay together


def test_yarn_rope_scaling():
    plain, _ = precompute_freqs_cis(8, 4096, 1e6)
    config = MiniMindConfig(hidden_size=64, num_hidden_layers=1, inference_rope_scaling=True, max_position_embeddings=4096)
    assert config.yarn_parameters()["factor"] == 16
    scaled = MiniMindForCausalLM(config).model.freqs_cos
    assert torch.allclose(scaled[:, 0], plain[:, 0])  # the fastest-rotating dimension is left alone
    assert not torch.allclose(scaled[:, 3], plain[:, 3])  # slow dimensions are stretched
    via_dict = MiniMindConfig(rope_scaling={"type": "yarn", "factor": 4, "original_max_position_embeddings": 2048})
    assert via_dict.yarn_parameters()["factor"] == 4


def test_dropout_is_active_only_in_training():
    model = tiny(dropout=0.5)
    ids = torch.randint(0, 6400, (1, 8))
    assert torch.equal(model(ids).logits, model(ids).logits)
    model.train()
    assert not torch.equal(model(ids).logits, model(ids).logits)


def test_too_long_input_is_a_clear_error():
    config = MiniMindConfig(hidden_size=64, num_hidden_layers=1, max_position_embeddings=16)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        MiniMindForCausalLM(config)(torch.zeros(1, 17, dtype=torch.long))
