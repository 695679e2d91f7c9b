"""LoRA adapters for MiniMind, in upstream MiniMind's layout.

Every square `nn.Linear` (in_features == out_features: the attention q_proj and o_proj) gets a
low-rank update, y = W x + B(A(x)), with A ~ N(0, 0.02) and B = 0 so a fresh adapter changes
nothing. Adapter parameters are named `{module}.lora.A.weight` / `{module}.lora.B.weight`, the
keys of upstream's LoRA files, and `save_lora` writes only those.

The wrapped layer stays an `nn.Linear` (a subclass) holding the same weight tensor, so base
weight names and the optimizer's view of the base model are unchanged, and `copy.deepcopy` of
an adapted model (e.g. a frozen reference copy) works.
"""
import os

import torch
from torch import nn


class LoRA(nn.Module):
    """The low-rank update B(A(x)) of rank `rank`."""

    def __init__(self, in_features: int, out_features: int, rank: int):
        super().__init__()
        self.rank = rank
        self.A = nn.Linear(in_features, rank, bias=False)
        self.B = nn.Linear(rank, out_features, bias=False)
        nn.init.normal_(self.A.weight, mean=0.0, std=0.02)
        nn.init.zeros_(self.B.weight)  # zero update at the start: training begins from the base model

    def forward(self, x):
        return self.B(self.A(x))


class LoRALinear(nn.Linear):
    """A Linear layer plus its LoRA branch; shares weight (and bias) with the layer it replaced."""

    def __init__(self, base: nn.Linear, rank: int):
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.lora = LoRA(base.in_features, base.out_features, rank).to(base.weight.device, base.weight.dtype)

    def forward(self, x):
        return super().forward(x) + self.lora(x)


def _unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside torch.compile / DistributedDataParallel wrappers."""
    model = getattr(model, "_orig_mod", model)
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    return {name: m for name, m in _unwrap(model).named_modules() if isinstance(m, LoRALinear)}


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, new)


def apply_lora(model: nn.Module, rank: int = 8) -> nn.Module:
    """Wrap every square nn.Linear of `model` with a LoRA branch of `rank`; returns the model."""
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"LoRA rank must be a positive integer, got {rank!r}")
    model = _unwrap(model)
    targets = [name for name, m in model.named_modules()
               if isinstance(m, nn.Linear) and not isinstance(m, LoRALinear)
               and m.in_features == m.out_features and ".lora." not in f".{name}."]
    if not targets:
        raise ValueError("apply_lora: the model has no square nn.Linear layer to adapt")
    for name in targets:
        _replace(model, name, LoRALinear(model.get_submodule(name), rank))
    return model


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapter parameters, keyed `{module}.lora.A.weight` / `{module}.lora.B.weight`."""
    return {f"{name}.lora.{k}": v for name, m in _lora_modules(model).items() for k, v in m.lora.state_dict().items()}


def save_lora(model: nn.Module, path: str) -> None:
    """Write the adapter weights (float32, on CPU, like upstream) to `path` atomically."""
    state = lora_state_dict(model)
    if not state:
        raise ValueError("save_lora: the model has no LoRA adapters (call apply_lora first)")
    state = {k: v.detach().cpu().float() for k, v in state.items()}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)  # readers never see a half-written file
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_lora(model: nn.Module, path: str) -> None:
    """Load adapter weights saved by `save_lora` (or upstream) into a model that went through `apply_lora`."""
    modules = _lora_modules(model)
    if not modules:
        raise ValueError("load_lora: the model has no LoRA adapters (call apply_lora first)")
    device = next(iter(modules.values())).weight.device
    state = torch.load(path, map_location=device, weights_only=True)
    state = {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}
    expected = {k: v.shape for k, v in lora_state_dict(model).items()}
    missing, unexpected = sorted(expected.keys() - state.keys()), sorted(state.keys() - expected.keys())
    wrong_shape = sorted(k for k in expected.keys() & state.keys() if state[k].shape != expected[k])
    if missing or unexpected or wrong_shape:
        raise ValueError(f"LoRA file {path} does not match the model (rank or model size differ?): "
                         f"missing {missing[:4]}, unexpected {unexpected[:4]}, wrong shape {wrong_shape[:4]}")
    for name, m in modules.items():
        prefix = f"{name}.lora."
        m.lora.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """Fold each adapter into its base weight (W += B @ A) and drop the adapters; returns the model."""
    root = _unwrap(model)
    for name, m in _lora_modules(root).items():
        delta = m.lora.B.weight.float() @ m.lora.A.weight.float()
        m.weight.add_(delta.to(m.weight.dtype))
        plain = nn.Linear(m.in_features, m.out_features, bias=m.bias is not None, device="meta")
        plain.weight, plain.bias = m.weight, m.bias
        _replace(root, name, plain)
    return model
