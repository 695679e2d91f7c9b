"""The work the lean sampler (model/sampling.py) does per token: the output head only at the positions a
token is sampled from, every weight once per decode step for all rows, and which GEMM path a decode
step takes on a float32 CPU."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import model.sampling as sampling
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2)).eval()


def matmul_weights(model):
    """(weights of the blocks' matrix products, weights of the output head)."""
    blocks = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    return blocks, model.lm_head.weight.numel()


@pytest.mark.parametrize("num_samples", [1, 3])
def test_head_runs_only_where_a_token_is_sampled(model, monkeypatch, num_samples):
    """The matrix-product FLOPs of a sampling call are exactly: every prompt token through the blocks
    once (not once per sample), the head at each prompt's last position, then per decode step every
    row through the blocks and the head. A head over the whole prompt, or a prompt encoded per sample,
    would add to the count."""
    monkeypatch.setattr(sampling, "_prepacks", lambda weight: False)  # plain GEMMs, which the counter sees
    prompts, length, new = 2, 9, 5
    ids = torch.randint(10, 6000, (prompts, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # a left-padded prompt: its pads are computed like any prompt position
    with FlopCounterMode(display=False) as counter:
        out = sampling.sample(model, ids, mask, new, eos_id=-1, pad_id=0, num_samples=num_samples, greedy=True)
    rows = prompts * num_samples
    assert out.tokens.shape == (rows, new)
    counted = sum(flops for op, flops in counter.get_flop_counts()["Global"].items()
                  if str(op) in ("aten.mm", "aten.addmm", "aten.bmm"))
    blocks, head = matmul_weights(model)
    expected = 2 * (prompts * length * blocks + prompts * head + (new - 1) * rows * (blocks + head))
    assert counted == expected


def test_decode_reorders_weights_from_pack_min_rows_on(model):
    """Fewer rows than PACK_MIN_ROWS multiply by the weights as they are (no per-call reorder); from
    PACK_MIN_ROWS on, by oneDNN-reordered weights."""
    if not sampling._prepacks(model.lm_head.weight):
        pytest.skip("this torch build has no oneDNN")
    assert sampling.PACK_MIN_ROWS > 1
    assert sampling._FusedDecoder(model, sampling.PACK_MIN_ROWS - 1).linear is F.linear
    assert sampling._FusedDecoder(model, sampling.PACK_MIN_ROWS).linear is sampling._onednn_linear


def test_few_row_decode_equals_the_forward(model):
    """A two-row rollout (the plain-GEMM path): each sampled token's log-prob is the full forward's."""
    ids = torch.randint(10, 6000, (2, 7), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    torch.manual_seed(3)
    out = sampling.sample(model, ids, mask, 6, eos_id=-1, pad_id=0, temperature=0.8, top_k=20, return_logps=True)
    full_ids = torch.cat([ids, out.tokens], 1)
    full_mask = torch.cat([mask, out.mask.to(mask.dtype)], 1)
    with torch.no_grad():
        logits = model(full_ids, attention_mask=full_mask, logits_to_keep=7).logits[:, :-1]
    expected = torch.gather(F.log_softmax(logits, -1), 2, out.tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(out.logps, expected * out.mask, atol=1e-5)


def test_every_decode_path_gives_the_same_samples(model, monkeypatch):
    """Each GEMM path a float32 CPU may take (`decode_paths`) decodes the same tokens with the same
    log-probs (up to float rounding), and `sample` takes the one `_fastest_path` measured."""
    ids = torch.randint(10, 6000, (2, 8), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    paths = sampling.decode_paths(model.lm_head.weight)
    assert paths[0] == "plain"
    results = {}
    for path in paths:
        monkeypatch.setattr(sampling, "_fastest_path", lambda model, rows, tokens, path=path: path)
        torch.manual_seed(5)
        results[path] = sampling.sample(model, ids, mask, 10, eos_id=-1, pad_id=0, num_samples=3, greedy=True,
                                        return_logps=True)
    for path in paths[1:]:
        assert torch.equal(results[path].tokens, results["plain"].tokens)
        assert torch.allclose(results[path].logps, results["plain"].logps, atol=1e-5)
    monkeypatch.undo()
    chosen = sampling._fastest_path(model, 6, 10)
    assert chosen in paths and sampling._fastest_path(model, 6, 10) == chosen  # measured once, then kept
    assert sampling._FusedDecoder(model, 6, path=chosen).path == chosen
