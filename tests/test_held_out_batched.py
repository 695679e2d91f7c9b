"""The RL types' held-out answers (trainer/held_out.answers) come from one batched call of the lean sampler,
greedy and sampled rows together: the greedy answers are those of answering each prompt on its own, the
sampled ones the same at every evaluation of the same weights, and the recorded means are the answers'.
On a tiny random MiniMind, the demo's held-out prompts, the GRPO options and reward functions."""
import pytest
import torch
from _trainer_helpers import DEMO
from transformers import AutoTokenizer

from dataset.lm_dataset import RLAIFDataset
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from model.sampling import sample
from trainer import held_out, loop
from trainer import trainer_utils as tu
from trainer.rl import rewards
from trainer.rl.rollout import decode, encode_prompts
from trainer.rules.args import build_parser

ROWS = 6  # held-out prompts: more than --batch_size, of different lengths (left padding in the batch)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(DEMO.parent.parent / "model"))


@pytest.fixture(scope="module")
def model(tokenizer):
    """A random MiniMind whose greedy answers to the held-out prompts end early (EOS) for some and run
    to --max_gen_len for others, so the loop's early stop and the padding after EOS are both compared."""
    torch.manual_seed(5)
    model = MiniMindForCausalLM(MiniMindConfig(hidden_size=64, num_hidden_layers=2)).eval()
    prompts = [row["prompt"] for row in evaluation(tokenizer)[0].held_out]
    ids, mask = encode_prompts(tokenizer, prompts[:ROWS], 64, "cpu")

    def greedy(eos_id):
        return sample(model, ids, mask, 24, eos_id=eos_id, pad_id=tokenizer.pad_token_id, greedy=True).tokens
    # The end token takes the place of a token the answers pick, wherever that one would be picked:
    # the first (most used first) that ends some answers and not others.
    used, counts = greedy(-1).flatten().unique(return_counts=True)
    for token in used[counts.argsort(descending=True)].tolist():
        with torch.no_grad():
            model.lm_head.weight[tokenizer.eos_token_id] = 1.5 * model.lm_head.weight[token]
        ended = (greedy(tokenizer.eos_token_id) == tokenizer.eos_token_id).any(dim=1)
        if 0 < int(ended.sum()) < ROWS:
            return model
    raise AssertionError("no token of the greedy answers ends some of them and not all")


def evaluation(tokenizer, **options):
    """(the GRPO run's Evaluation on the demo's RLAIF file, its parsed options)."""
    values = {"device": "cpu", "dtype": "float32", "hidden_size": 64, "num_hidden_layers": 2, "max_seq_len": 64,
              "max_gen_len": 24, "batch_size": 2, "reasoning": 1, "reward_model_path": "none",
              "eval_data": str(DEMO / "rlaif.jsonl"), "eval_rows": ROWS, **options}
    args = build_parser("grpo").parse_args([f"--{k}={v}" for k, v in values.items()])
    run = loop.Run("grpo", args, tu.DistInfo(False, 0, 0, 1, "cpu"), stop=None)
    open_file = lambda path: RLAIFDataset(path, tokenizer, max_length=args.max_seq_len)  # noqa: E731
    _, ev = held_out.answers(run, [], open_file, tokenizer, rewards.reward_functions(args.reasoning, None))
    return ev, args


def measured(ev, model):
    with torch.no_grad():
        return ev.measure(model, ev.share())


def test_batched_greedy_answers_are_each_prompts_own_greedy_answer(model, tokenizer):
    ev, args = evaluation(tokenizer)
    _, count, probes = measured(ev, model)
    greedy = [p for p in probes if p["mode"] == "greedy"]
    assert count == ROWS and [p["row"] for p in greedy] == list(range(ROWS))
    lengths = set()
    for p in greedy:
        ids, mask = encode_prompts(tokenizer, [ev.held_out[p["row"]]["prompt"]], args.max_seq_len, "cpu")
        lengths.add(ids.size(1))
        alone = sample(model, ids, mask, args.max_gen_len, eos_id=tokenizer.eos_token_id,
                       pad_id=tokenizer.pad_token_id, greedy=True)
        assert p["response"] == decode(tokenizer, alone.tokens, alone.mask)[0]
        assert p["length"] == int(alone.mask.sum())
    assert len(lengths) > 1  # the batch held prompts of different lengths
    # Some answers end early and some run to --max_gen_len: both kinds are compared.
    assert {p["truncated"] for p in probes} == {True, False}


def test_sampled_answers_are_the_same_at_every_evaluation_and_sampled(model, tokenizer):
    ev, _ = evaluation(tokenizer)
    first, second = measured(ev, model), measured(ev, model)
    assert first[2] == second[2] and first[0] == second[0]
    by_mode = {mode: [p["response"] for p in first[2] if p["mode"] == mode] for mode in held_out.MODES}
    assert len(by_mode["sampled"]) == ROWS and by_mode["sampled"] != by_mode["greedy"]
    # The fixed seed, not the training's random state, decides them: drawing elsewhere changes nothing.
    torch.manual_seed(123)
    torch.rand(1000)
    assert measured(ev, model)[2] == first[2]


def test_recorded_means_are_the_answers_means(model, tokenizer):
    ev, _ = evaluation(tokenizer)
    sums, count, probes = measured(ev, model)
    assert set(sums) <= set(ev.names) and {"reward/mean", "sampled/truncated_frac"} <= set(sums)
    for mode in held_out.MODES:
        prefix = "" if mode == "greedy" else "sampled/"
        answers = [p for p in probes if p["mode"] == mode]
        assert len(answers) == count
        assert sums[prefix + "reward/mean"] == pytest.approx(sum(p["reward"] for p in answers), abs=1e-5)
        assert sums[prefix + "length/mean"] == sum(p["length"] for p in answers)
        assert sums[prefix + "truncated_frac"] == sum(p["truncated"] for p in answers)
        assert sums[prefix + "accuracy"] == sum(p["accuracy"] for p in answers)
        for name in ("format", "rule"):
            assert sums[f"{prefix}reward/{name}/mean"] == pytest.approx(
                sum(p["parts"][name] for p in answers), abs=1e-5)


def test_more_prompts_than_one_call_takes_give_the_same_answers(model, tokenizer, monkeypatch):
    """Split over several calls (`PROMPTS_PER_CALL`), the greedy answers and the means' layout stay."""
    ev, _ = evaluation(tokenizer)
    whole = measured(ev, model)
    monkeypatch.setattr(held_out, "PROMPTS_PER_CALL", 4)
    split = measured(ev, model)
    assert [p for p in split[2] if p["mode"] == "greedy"] == [p for p in whole[2] if p["mode"] == "greedy"]
    assert split[1] == whole[1] and set(split[0]) == set(whole[0])


def test_a_greedy_mask_of_the_wrong_size_is_refused(model, tokenizer):
    ids, mask = encode_prompts(tokenizer, ["hello", "a longer prompt"], 32, "cpu")
    with pytest.raises(ValueError, match="greedy has shape"):
        sample(model, ids, mask, 4, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, num_samples=2,
               greedy=torch.tensor([True, False]))
