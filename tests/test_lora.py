"""LoRA adapters: placement, zero start, save/load and merge."""
import copy

import pytest
import torch
from torch import nn

from model.model_lora import LoRALinear, apply_lora, load_lora, merge_lora, save_lora
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM


def tiny(seed=0, use_moe=False):
    torch.manual_seed(seed)
    return MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2, use_moe=use_moe)).eval()


def randomise_lora(model):
    """Give the adapters non-zero B so they actually change the output."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoRALinear):
                m.lora.B.weight.normal_(0, 0.05)


IDS = torch.randint(0, 6400, (2, 10), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("use_moe", [False, True])
def test_only_square_linears_are_wrapped(use_moe):
    model = apply_lora(tiny(use_moe=use_moe))
    wrapped = {n for n, m in model.named_modules() if isinstance(m, LoRALinear)}
    assert wrapped == {f"model.layers.{i}.self_attn.{p}" for i in range(2) for p in ("q_proj", "o_proj")}
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and not isinstance(m, LoRALinear) and ".lora." not in name:
            assert m.in_features != m.out_features, name
    lora = model.model.layers[0].self_attn.q_proj.lora
    assert lora.A.weight.shape == (8, 64) and lora.B.weight.shape == (64, 8)


def test_zero_initialised_b_leaves_logits_unchanged():
    model = tiny()
    before = model(IDS).logits
    apply_lora(model)
    assert torch.equal(model(IDS).logits, before)
    assert all(m.lora.B.weight.abs().sum() == 0 for m in model.modules() if isinstance(m, LoRALinear))


def test_base_weight_names_are_unchanged_and_adapter_trains():
    model = tiny()
    base_keys = set(model.state_dict())
    apply_lora(model, rank=4)
    keys = set(model.state_dict())
    assert base_keys <= keys
    assert keys - base_keys == {f"model.layers.{i}.self_attn.{p}.lora.{ab}.weight"
                                for i in range(2) for p in ("q_proj", "o_proj") for ab in "AB"}
    for name, p in model.named_parameters():
        p.requires_grad = ".lora." in name
    model.train()
    model(IDS, labels=IDS).loss.backward()
    assert model.model.layers[0].self_attn.q_proj.lora.B.weight.grad.abs().sum() > 0


def test_save_load_round_trip(tmp_path):
    trained = apply_lora(tiny())
    randomise_lora(trained)
    path = tmp_path / "lora" / "lora_identity_64.pth"
    save_lora(trained, str(path))
    saved = torch.load(path)
    assert set(saved) == {f"model.layers.{i}.self_attn.{p}.lora.{ab}.weight"
                          for i in range(2) for p in ("q_proj", "o_proj") for ab in "AB"}
    assert all(v.dtype == torch.float32 for v in saved.values())  # float32, as upstream saves adapters
    assert [p.name for p in tmp_path.joinpath("lora").iterdir()] == [path.name]  # no temp file left

    fresh = apply_lora(tiny())
    load_lora(fresh, str(path))
    for name, m in fresh.named_modules():
        if isinstance(m, LoRALinear):
            assert torch.equal(m.lora.B.weight, saved[f"{name}.lora.B.weight"])
    assert torch.equal(fresh(IDS).logits, trained(IDS).logits)  # exactly the trained adapters


def test_load_rejects_mismatched_file(tmp_path):
    path = tmp_path / "l.pth"
    save_lora(apply_lora(tiny(), rank=4), str(path))
    with pytest.raises(ValueError, match="does not match"):
        load_lora(apply_lora(tiny(), rank=8), str(path))
    with pytest.raises(ValueError, match="apply_lora"):
        load_lora(tiny(), str(path))
    with pytest.raises(ValueError, match="apply_lora"):
        save_lora(tiny(), str(tmp_path / "none.pth"))


def test_merge_equals_unmerged_output():
    model = apply_lora(tiny())
    randomise_lora(model)
    unmerged = model(IDS).logits
    assert not torch.allclose(unmerged, tiny()(IDS).logits, atol=1e-4)  # the adapters do something
    merge_lora(model)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert not any(".lora." in k for k in model.state_dict())
    assert set(model.state_dict()) == set(tiny().state_dict())
    assert torch.allclose(model(IDS).logits, unmerged, atol=1e-5)


def test_deepcopy_of_adapted_model_is_independent():
    model = apply_lora(tiny())
    reference = copy.deepcopy(model)
    randomise_lora(model)
    assert torch.equal(reference(IDS).logits, tiny()(IDS).logits)
    assert not torch.allclose(model(IDS).logits, reference(IDS).logits, atol=1e-4)


def test_rank_must_be_positive():
    with pytest.raises(ValueError, match="rank"):
        apply_lora(tiny(), rank=0)
