"""RL steps: seconds per GRPO, SPO and PPO step of the current trainers, split into their parts, against
the baseline of `bench/rl_baseline.py` (the steps before the lean sampler), interleaved step by step in
one process on the same batches. Run through `bench_train.py --only grpo|spo|ppo [--baseline]`
(`python -m bench.bench_train`: the repository root must be importable).
"""
import argparse
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The demo RL prompts.
RL_DATA = os.path.join(ROOT, "dataset", "demo", "rlaif.jsonl")

#: The RL configuration of the measurement: upstream's prompt length, 64 new tokens, 4 responses per
#: prompt (GRPO), 2 prompts a step, reasoning format rewards; rule rewards unless --reward_model.
RL_CONFIG = dict(max_seq_len=66, max_gen_len=64, num_generations=4, batch_size=2, reasoning=1, beta=0.02,
                 clip_epsilon=0.1, vf_coef=0.5, kl_coef=0.02, update_old_actor_freq=4)
#: Model sizes ("tiny" is the demo preset's 64x2) and timed steps per implementation.
RL_MODELS = {"tiny": dict(hidden_size=64, num_hidden_layers=2, steps=6),
             "512x8": dict(hidden_size=512, num_hidden_layers=8, steps=3)}
#: Seconds per step of the current trainers as a share of the baseline's, at most (the targets).
RL_TARGETS = {"grpo": 0.55, "spo": 0.55, "ppo": 0.7}
#: The parts a step's time is split into, in the order printed.
RL_PARTS = ("encode", "sample", "score", "policy_forward", "critic_forward", "reference", "old_forward", "loss",
            "backward", "optimizer")


class RLParts:
    """What an RL step needs: options, tokenizer, policy, reference, (PPO) old actor and critic, the
    optimised (module, optimizer) pairs (the trainers' optimizer, `trainer.loop.make_optimizer`), and
    the reward model (None = rule rewards).

    The model is `RL_MODELS[model_name]`'s size, or `hidden_size` x `num_hidden_layers` when given;
    every copy starts from `base_state` (a state dict) when given, else from seed 0's random weights."""

    def __init__(self, algo, model_name, device, reward_model_path="none", hidden_size=None, num_hidden_layers=None,
                 base_state=None):
        import torch

        from trainer import trainer_utils as tu
        from trainer.loop import make_optimizer
        from trainer.rl_setup import Critic
        cfg = RL_MODELS.get(model_name, {})
        self.args = argparse.Namespace(**RL_CONFIG, device=device, algo=algo)
        if algo != "grpo":
            self.args.num_generations = 1
        torch.manual_seed(0)
        config = tu.model_config(hidden_size or cfg["hidden_size"], num_hidden_layers or cfg["num_hidden_layers"],
                                 False)
        self.policy, self.tokenizer = tu.init_model(config, "none", ".", device)
        if base_state is not None:
            self.policy.load_state_dict(base_state)
        state = self.policy.state_dict()
        self.reference = self._copy(tu, config, device, state)
        self.old_actor = self._copy(tu, config, device, state) if algo == "ppo" else None
        self.trained = [(self.policy, make_optimizer(self.policy.parameters(), 1e-7))]
        self.critic = None
        if algo == "ppo":
            self.critic = Critic(self._copy(tu, config, device, state, frozen=False)).to(device)
            self.trained.append((self.critic, make_optimizer(self.critic.parameters(), 1e-7)))
        self.reward_model = None
        if reward_model_path != "none":
            from trainer.rl.reward_model import RewardModel
            self.reward_model = RewardModel(reward_model_path, device)

    @staticmethod
    def _copy(tu, config, device, state, frozen=True):
        model, _ = tu.init_model(config, "none", ".", device, tokenizer=False)
        model.load_state_dict(state)
        return model.eval().requires_grad_(False) if frozen else model


def rl_batches(tokenizer, batch_size, max_seq_len):
    """Endless batches of demo RL prompts, in a fixed order."""
    from dataset.lm_dataset import RLAIFDataset
    dataset = RLAIFDataset(RL_DATA, tokenizer, max_length=max_seq_len)
    i = 0
    while True:
        items = [dataset[(i + j) % len(dataset)] for j in range(batch_size)]
        i += batch_size
        yield {"prompt": [x["prompt"] for x in items], "answer": [x["answer"] for x in items]}


def rl_implementations(algo, with_baseline):
    """(name, step function) pairs to time: the trainers' current step, and today's with --baseline."""
    from bench import rl_baseline
    impls = [("baseline", rl_baseline.STEPS[algo])] if with_baseline else []
    current = current_rl_step(algo)
    if current is not None:
        impls.append(("current", current))
    return impls


def current_rl_step(algo):
    """The trainers' step for `algo` (the calls train_grpo/spo/ppo.py make), timed part by part."""
    return {"grpo": _current_grpo, "spo": _current_spo, "ppo": _current_ppo}[algo]


def _current_rollout(timer, parts, batch, n=1):
    from trainer.rl import rewards
    from trainer.rl import rollout as rl_rollout
    a = parts.args
    with timer.part("sample"):  # prompt encoding included: it is a small part of a step
        ro = rl_rollout.rollout(parts.policy, parts.tokenizer, batch["prompt"], batch["answer"], a.max_seq_len,
                        a.max_gen_len, a.device, num_generations=n, temperature=0.8, top_k=50, top_p=1.0)
        timer.sampled_tokens += ro.completion_mask.numel()
        timer.rollout = ro  # the last rollout, for callers that count its tokens
    with timer.part("score"):
        functions = rewards.reward_functions(a.reasoning, parts.reward_model)
        reward = rewards.score(functions, ro.prompts, ro.responses, ro.references)[0].to(a.device)
    return ro, reward


def _current_policy_and_reference(timer, parts, ro):
    import torch

    from trainer.rl import rollout as rl_rollout
    with timer.part("policy_forward"):
        logps, aux = rl_rollout.rollout_logps(parts.policy, ro)
    with timer.part("reference"), torch.no_grad():
        ref_logps, _ = rl_rollout.rollout_logps(parts.reference, ro)
    return logps, aux, ref_logps


def _current_grpo(timer, parts, batch):
    from bench.rl_baseline import optimizer_step
    from trainer.rl import losses
    n = parts.args.num_generations
    ro, rewards = _current_rollout(timer, parts, batch, n)
    advantages, _ = losses.group_advantages(rewards, n)
    logps, aux, ref_logps = _current_policy_and_reference(timer, parts, ro)
    with timer.part("loss"):
        loss, _ = losses.grpo_loss(logps, ref_logps, advantages, ro.completion_mask, parts.args.beta)
    optimizer_step(timer, parts, loss + aux)


def _current_spo(timer, parts, batch):
    from bench.rl_baseline import optimizer_step
    from trainer.rl import losses
    ro, rewards = _current_rollout(timer, parts, batch)
    advantages = losses.spo_advantages(rewards, 0.0)
    logps, aux, ref_logps = _current_policy_and_reference(timer, parts, ro)
    with timer.part("loss"):
        loss, _ = losses.spo_loss(logps, ref_logps, advantages, ro.completion_mask, parts.args.beta)
        losses.masked_mean(logps.detach(), ro.completion_mask).item()
    optimizer_step(timer, parts, loss + aux)


def _current_ppo(timer, parts, batch):
    """As train_ppo.py: the old actor's pass is skipped on the steps right after its refresh (every
    update_old_actor_freq steps), where the rollout's own log-probs are the old actor's."""
    import torch

    from bench.rl_baseline import optimizer_step
    from trainer.rl import losses
    from trainer.rl import rollout as rl_rollout
    a = parts.args
    parts.ppo_steps = getattr(parts, "ppo_steps", -1) + 1
    ro, rewards = _current_rollout(timer, parts, batch)
    with timer.part("critic_forward"):
        values = losses.last_token_values(parts.critic(ro.input_ids, ro.attention_mask), ro.attention_mask)
    with timer.part("policy_forward"):
        logps, aux = rl_rollout.completion_logps(parts.policy, ro.input_ids, ro.attention_mask, ro.num_completion)
    mask = ro.completion_mask.to(logps.dtype)
    with timer.part("old_forward"), torch.no_grad():
        if parts.ppo_steps % a.update_old_actor_freq == 0:
            old_logps = ro.sample_logps
        else:
            old_logps, _ = rl_rollout.completion_logps(parts.old_actor, ro.input_ids, ro.attention_mask, ro.num_completion)
    with timer.part("reference"), torch.no_grad():
        ref_logps, _ = rl_rollout.completion_logps(parts.reference, ro.input_ids, ro.attention_mask, ro.num_completion)
    with timer.part("loss"):
        out = losses.ppo_losses((logps * mask).sum(dim=1), (old_logps * mask).sum(dim=1), (ref_logps * mask).sum(dim=1),
                            values.float(), rewards, a.clip_epsilon, a.vf_coef, a.kl_coef)
    optimizer_step(timer, parts, out["loss"] + aux)


def bench_rl(args, algo):
    """Seconds per step of `algo` and their split, for each model, baseline and current interleaved
    step by step in this process (the same batches for both), plus sampled tokens per second."""
    import torch

    from bench.rl_baseline import StepTimer

    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for model_name in [c for c in args.configs if c in RL_MODELS]:
        impls = rl_implementations(algo, args.baseline or current_rl_step(algo) is None)
        parts = RLParts(algo, model_name, args.device, args.reward_model)
        batches = rl_batches(parts.tokenizer, parts.args.batch_size, parts.args.max_seq_len)
        timers = {name: StepTimer(args.device) for name, _ in impls}
        steps = args.rl_steps or RL_MODELS[model_name]["steps"]
        for i in range(steps + 1):  # step 0 warms up and is not counted
            batch = next(batches)
            for name, step in impls:
                torch.manual_seed(1000 + i)
                timer = timers[name] if i else StepTimer(args.device)
                step(timer, parts, batch)
        for name, _ in impls:
            t = timers[name]
            total, cpu_total = sum(t.seconds.values()), sum(t.cpu_seconds.values())
            results.append({"measurement": algo, "config": model_name, "implementation": name, "steps": steps,
                            "seconds_per_step": total / steps, "cpu_seconds_per_step": cpu_total / steps,
                            "parts": {k: v / steps for k, v in t.seconds.items()},
                            "cpu_parts": {k: v / steps for k, v in t.cpu_seconds.items()},
                            "sampled_tokens_per_s": t.sampled_tokens / max(t.seconds.get("sample", 0), 1e-9),
                            "sampled_tokens_per_cpu_s": t.sampled_tokens / max(t.cpu_seconds.get("sample", 0), 1e-9)})

    print(f"\n{algo}, {args.device}, threads {torch.get_num_threads()}, max_seq_len {RL_CONFIG['max_seq_len']}, "
          f"max_gen_len {RL_CONFIG['max_gen_len']}, batch_size {RL_CONFIG['batch_size']}"
          f"{', num_generations ' + str(RL_CONFIG['num_generations']) if algo == 'grpo' else ''}, reasoning 1, "
          f"reward model {args.reward_model}; seconds per step and its parts (wall, then CPU)")
    shown = [p for p in RL_PARTS if any(p in r["parts"] for r in results)]
    for clock, key, parts_key, tok in (("wall", "seconds_per_step", "parts", "sampled_tokens_per_s"),
                                       ("CPU", "cpu_seconds_per_step", "cpu_parts", "sampled_tokens_per_cpu_s")):
        print(f"{'config':<7} {'impl':<9} {clock + ' s/step':>11} " + " ".join(f"{p[:9]:>9}" for p in shown)
              + f" {'samp tok/s':>10}")
        for r in results:
            print(f"{r['config']:<7} {r['implementation']:<9} {r[key]:>11.3f} "
                  + " ".join(f"{r[parts_key].get(p, 0):>9.3f}" for p in shown) + f" {r[tok]:>10.0f}")
    for model_name in RL_MODELS:
        by = {r["implementation"]: r for r in results if r["config"] == model_name}
        if "baseline" in by and "current" in by:
            wall = by["current"]["seconds_per_step"] / by["baseline"]["seconds_per_step"]
            cpu = by["current"]["cpu_seconds_per_step"] / by["baseline"]["cpu_seconds_per_step"]
            print(f"{algo} {model_name}: current/baseline seconds per step = {wall:.2f}x wall, {cpu:.2f}x CPU "
                  f"(target {RL_TARGETS[algo]}x)")
    return results
