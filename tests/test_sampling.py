"""The lean sampler (model/sampling.py) and the shared-prefix forward (model/shared_prefix.py) against
transformers' generate() and the plain forward, on a tiny random MiniMind."""
import pytest
import torch
import torch.nn.functional as F
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from model.sampling import TIE_SLACK, probabilities, sample, sampling_step

PAD, EOS = 0, 2


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2)).eval()


def prompts():
    """Three left-padded prompts of different lengths."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(10, 6000, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    for row, pad in ((0, 5), (2, 2)):
        ids[row, :pad], mask[row, :pad] = PAD, 0
    return ids, mask


def generate(model, ids, mask, new, eos=EOS, **kw):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, pad_token_id=PAD,
                              eos_token_id=eos, **kw)[:, ids.size(1):]


def test_greedy_tokens_identical_to_generate(model):
    ids, mask = prompts()
    expected = generate(model, ids, mask, 24, do_sample=False)
    got = sample(model, ids, mask, 24, eos_id=EOS, pad_id=PAD, greedy=True)
    assert torch.equal(got.tokens, expected)
    assert got.mask.all()  # a random model does not stop within 24 tokens


def test_greedy_stops_at_eos_like_generate(model):
    """Rows that produce EOS are padded after it; the loop ends when every row has ended."""
    ids, mask = prompts()
    free = generate(model, ids, mask, 20, eos=-1, do_sample=False)
    row0 = free[0].tolist()
    end = next(j for j in range(1, 20) if row0[j] not in row0[:j])  # a token row 0 makes first at step j
    eos = row0[end]  # pretend it is the end of text
    expected = generate(model, ids, mask, 20, eos=eos, do_sample=False)
    got = sample(model, ids, mask, 20, eos_id=eos, pad_id=PAD, greedy=True)
    width = got.tokens.size(1)
    assert torch.equal(got.tokens, expected[:, :width]) and (expected[:, width:] == PAD).all()
    first = (got.tokens == eos).int().argmax(dim=1)
    for row in range(3):
        if (got.tokens[row] == eos).any():
            assert got.mask[row, :first[row] + 1].all() and not got.mask[row, first[row] + 1:].any()
            assert (got.tokens[row, first[row] + 1:] == PAD).all()
    # Every row ending early stops the loop early: the shortest run that ends them all.
    last = sample(model, ids[:1], mask[:1], 20, eos_id=eos, pad_id=PAD, greedy=True)
    assert last.tokens.size(1) == end + 1 and int(last.mask.sum()) == end + 1


def warpers(temperature, top_k, top_p):
    chain = [TemperatureLogitsWarper(temperature)]
    if top_k:
        chain.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p))
    return LogitsProcessorList(chain)


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.8, 50, 1.0), (1.0, 0, 1.0), (0.7, 0, 0.9), (1.3, 20, 0.8)])
def test_filtered_distribution_is_transformers(temperature, top_k, top_p):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 6400, generator=g) * 3
    logits[1, :30] = 5.0  # 30 ties straddling the 20th/50th place
    expected = warpers(temperature, top_k, top_p)(None, logits.clone()).softmax(dim=-1)
    got = probabilities(logits, temperature, top_k, top_p)
    if top_k and top_k < 30 <= top_k + TIE_SLACK or top_k >= 30:
        assert torch.allclose(got, expected, atol=1e-6)
    else:  # more ties than the slack: only row 1 may differ
        assert torch.allclose(got[[0, 2, 3]], expected[[0, 2, 3]], atol=1e-6)


def test_draw_frequencies_match_probabilities():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -30.0, 1.5, 0.2]]).repeat(40000, 1)
    g = torch.Generator().manual_seed(3)
    tokens = sampling_step(logits, temperature=0.8, top_k=5, top_p=0.95, generator=g)
    freq = torch.bincount(tokens, minlength=8).float() / len(tokens)
    p = probabilities(logits[:1], 0.8, 5, 0.95)[0]
    assert (freq[p == 0] == 0).all()
    assert (freq - p).abs().max() < 0.01  # about 4 standard errors at 40000 draws


def test_sampled_token_frequencies_match_generate(model):
    """Two tokens per row from many rows: the pair distribution of the sampler and of generate()."""
    ids, mask = prompts()
    ids, mask = ids[1:2], mask[1:2]
    kw = dict(temperature=0.8, top_k=4, top_p=1.0)
    torch.manual_seed(4)
    ours = sample(model, ids, mask, 2, eos_id=-1, pad_id=PAD, num_samples=6000, **kw).tokens
    torch.manual_seed(5)
    theirs = generate(model, ids, mask, 2, eos=-1, do_sample=True, num_return_sequences=6000, **kw)

    def pair_freq(t):
        pairs = {}
        for a, b in t.tolist():
            pairs[(a, b)] = pairs.get((a, b), 0) + 1 / len(t)
        return pairs
    a, b = pair_freq(ours), pair_freq(theirs)
    total_variation = 0.5 * sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b))
    assert len(a) <= 16 and total_variation < 0.06
    # The first token against its exact distribution.
    with torch.no_grad():
        exact = probabilities(model(ids, attention_mask=mask).logits[:, -1], **kw)[0]
    freq = torch.bincount(ours[:, 0], minlength=exact.numel()).float() / len(ours)
    assert (freq - exact).abs().max() < 0.03


def test_logps_are_the_plain_softmax_log_probs(model):
    ids, mask = prompts()
    out = sample(model, ids, mask, 6, eos_id=EOS, pad_id=PAD, num_samples=2, temperature=0.8, top_k=50,
                 return_logps=True)
    full_ids = torch.cat([ids.repeat_interleave(2, 0), out.tokens], dim=1)
    full_mask = torch.cat([mask.repeat_interleave(2, 0), out.mask], dim=1)
    with torch.no_grad():
        logits = model(full_ids, attention_mask=full_mask, logits_to_keep=7).logits[:, :-1]
    expected = torch.gather(F.log_softmax(logits, -1), 2, out.tokens.unsqueeze(-1)).squeeze(-1) * out.mask
    assert torch.allclose(out.logps, expected, atol=1e-5)


def test_sampler_keeps_training_mode_and_rejects_nothing_to_do(model):
    ids, mask = prompts()
    model.train()
    try:
        sample(model, ids, mask, 2, eos_id=EOS, pad_id=PAD)
        assert model.training
    finally:
        model.eval()
    with pytest.raises(ValueError):
        sample(model, ids, mask, 0, eos_id=EOS, pad_id=PAD)


def test_shared_prefix_forward_equals_plain_forward():
    torch.manual_seed(6)
    model = MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2))
    n, p, r = 3, 10, 7
    prompt = torch.randint(10, 6000, (2, p))
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[0, :4] = 0
    completion = torch.randint(10, 6000, (2 * n, r))
    completion_mask = torch.ones_like(completion)
    completion_mask[1, 3:] = 0
    ids = torch.cat([prompt.repeat_interleave(n, 0), completion], 1)
    mask = torch.cat([prompt_mask.repeat_interleave(n, 0), completion_mask], 1)

    def run(**kw):
        logits = model(ids, attention_mask=mask, **kw).logits[:, :-1]
        logps = torch.gather(F.log_softmax(logits, -1), 2, completion.unsqueeze(-1)).squeeze(-1)
        (logps * completion_mask).sum().backward()
        grads = [q.grad.clone() for q in model.parameters()]
        model.zero_grad()
        return logps.detach(), grads
    plain, plain_grads = run(logits_to_keep=r + 1)
    shared, shared_grads = run(shared_prefix=(p, n))
    assert torch.allclose(plain, shared, atol=1e-5)
    for a, b in zip(plain_grads, shared_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError):
        model(ids[:5], attention_mask=mask[:5], shared_prefix=(p, n))  # not whole groups


def test_compiled_decode_step_and_autocast_run_on_cpu(model):
    """The GPU options on their CPU equivalents: the decode step through torch.compile (dynamo with
    the eager backend) gives the greedy tokens of the plain loop; under bf16 autocast the loop runs
    and every sampled token gets a finite, non-positive log-probability."""
    ids, mask = prompts()
    plain = sample(model, ids, mask, 6, eos_id=EOS, pad_id=PAD, greedy=True)
    compiled = sample(model, ids, mask, 6, eos_id=EOS, pad_id=PAD, greedy=True, compile="eager")
    assert torch.equal(plain.tokens, compiled.tokens)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sample(model, ids, mask, 6, eos_id=EOS, pad_id=PAD, num_samples=2, temperature=0.8, top_k=5,
                     return_logps=True, check_every=4)
    assert out.tokens.shape == (6, 6) and torch.isfinite(out.logps).all() and (out.logps <= 0).all()


def test_reordered_weight_decode_matches_plain_linear(model, monkeypatch):
    """On a float32 CPU the decode step multiplies by oneDNN-reordered weights; its tokens and
    log-probs equal those of the plain F.linear step (up to float rounding)."""
    import model.sampling as sampling
    if not sampling._prepacks(model.lm_head.weight):
        pytest.skip("this torch build has no oneDNN")
    decoder = sampling._FusedDecoder(model, 6)
    assert decoder.linear is sampling._onednn_linear
    assert sampling._FusedDecoder(model, 6, reorder=False).linear is F.linear  # what torch.compile traces
    ids, mask = prompts()
    packed = sample(model, ids, mask, 12, eos_id=EOS, pad_id=PAD, num_samples=2, greedy=True, return_logps=True)
    monkeypatch.setattr(sampling, "_prepacks", lambda weight: False)
    assert sampling._FusedDecoder(model, 6).linear is F.linear
    plain = sample(model, ids, mask, 12, eos_id=EOS, pad_id=PAD, num_samples=2, greedy=True, return_logps=True)
    assert torch.equal(packed.tokens, plain.tokens)
    assert torch.allclose(packed.logps, plain.logps, atol=1e-5)
