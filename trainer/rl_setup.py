"""What the PPO, GRPO and SPO scripts build around `trainer.loop` from the pieces of `trainer.rl`:
checked inputs, the policy and its frozen reference (from `{weight_dir}/reason_...` with --reasoning 1,
else `full_sft_...`), PPO's critic, the prompts, the rollout and rewards every step starts with, and the
statistics every process must agree on. (`trainer.rl` itself never imports the trainer: only the rules.)"""
import torch
import torch.distributed as dist
from torch import nn

from trainer import held_out, loop
from trainer import trainer_utils as tu
from trainer.rl import rewards
from trainer.rl.reward_model import check_reward_model_path, load_reward_model
from trainer.rl.rollout import rollout, rollout_logps, sampling_options
from trainer.rules.specs import rl_base_weight


def start(rl_type):
    """`loop.start(rl_type)`, then fail fast, before any model is built: the data file and the
    reward-model folder must exist. Returns the `loop.Run`."""
    run = loop.start(rl_type)
    tu.check_data_file(run.args.data_path)
    path = run.spec.reward_model_path(vars(run.args))
    if path is not None:
        try:
            check_reward_model_path(path)
        except (FileNotFoundError, ValueError) as e:
            raise tu.SetupError(str(e)) from None
    return run


def load_rewards(run):
    """The reward functions of the run: format (with --reasoning), and the reward model's score or the rule."""
    path = run.spec.reward_model_path(vars(run.args))
    return rewards.reward_functions(run.args.reasoning, load_reward_model(path, run.args.device))


def load_policy_run(run):
    """What GRPO and SPO build, in this order: the policy (logged as "Policy") and tokenizer, the
    frozen reference (None when beta is 0: no KL penalty), the reward functions, the prompts.
    Returns (policy, tokenizer, reference, reward_fns, dataset)."""
    args = run.args
    policy, tokenizer = load_policy(args)
    reference = load_frozen(args) if args.beta > 0 else None
    return policy, tokenizer, reference, load_rewards(run), load_prompts(args, tokenizer)


def load_policy(args, label="Policy"):
    """The policy (logged under `label`) and the tokenizer, from the base weight of --reasoning."""
    return tu.load_model(args, rl_base_weight(args.reasoning), label=label, option="reasoning")


def load_base(args):
    """Another copy of the base weight (PPO's critic body), without a tokenizer, not logged."""
    return tu.load_model(args, rl_base_weight(args.reasoning), label=None, tokenizer=False, option="reasoning")[0]


def load_frozen(args):
    """A frozen copy of the base weight: the reference of the KL penalty, PPO's old actor."""
    return load_base(args).eval().requires_grad_(False)


def load_prompts(args, tokenizer):
    """The RLAIF prompts of --data_path (prompts longer than --max_seq_len tokens keep their end)."""
    from dataset.lm_dataset import RLAIFDataset
    return tu.load_dataset(RLAIFDataset, args, tokenizer)


def held_out_answers(run, dataset, tokenizer, reward_fns):
    """(training prompts, `held_out.Evaluation` or None): greedy and sampled answers to the held-out
    prompts (--eval_data, or --eval_holdout rows of --data_path), scored by the run's rewards."""
    from dataset.lm_dataset import RLAIFDataset
    return held_out.answers(run, dataset, lambda path: RLAIFDataset(path, tokenizer, max_length=run.args.max_seq_len),
                            tokenizer, reward_fns)


def sample_and_score(run, model, tokenizer, reward_fns, batch, num_generations=1):
    """The first half of every RL step: `num_generations` responses to each of the batch's prompts
    (timed as "generate"), then their rewards (timed as "score"). Returns (rollout, rewards [B] on the
    device, the reward parts by name, the per-response values the reward functions keep, e.g. a reward
    model's raw score)."""
    args = run.args
    with run.records.timer("generate"):
        ro = rollout(model, tokenizer, batch["prompt"], batch["answer"], args.max_seq_len, args.max_gen_len,
                     args.device, num_generations=num_generations, **sampling_options(args))
    with run.records.timer("score"):
        kept = {}
        reward, parts = rewards.score(reward_fns, ro.prompts, ro.responses, ro.references, extras=kept)
    return ro, reward.to(args.device), parts, kept


def reference_logps(reference, ro, logps):
    """A frozen model's (the reference's, PPO's old actor's) per-token log-probs of the rollout's
    completions; without a reference (no KL penalty), the policy's own detached ones: a KL term of 0."""
    if reference is None:
        return logps.detach()
    with torch.no_grad():
        return rollout_logps(reference, ro)[0]


class Critic(nn.Module):
    """PPO value model: the MiniMind body (`causal_lm.model`) with a Linear(hidden, 1) value head."""

    def __init__(self, causal_lm):
        super().__init__()
        self.model = causal_lm.model
        self.value_head = nn.Linear(causal_lm.config.hidden_size, 1)

    def forward(self, input_ids, attention_mask=None):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        hidden = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)
        return self.value_head(hidden).squeeze(-1)  # [B, T]


def global_mean(value, info):
    """The mean of a float over all processes (itself in a plain run), e.g. to keep SPO's tracker in step."""
    if not info.distributed:
        return float(value)
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([float(value)], device=device, dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / info.world_size
