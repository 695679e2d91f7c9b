"""MiniMind SPO (Single-stream Policy Optimization).

    cd trainer && python train_spo.py --reward_model_path none
    cd trainer && torchrun --nproc_per_node 2 train_spo.py

Options: `trainer/rules/args.py` (type "spo"). Starts from `{weight_dir}/reason_{h}.pth` with --reasoning 1,
else `full_sft_{h}.pth`. One response per prompt; instead of a group, an adaptive value tracker gives
the baseline: a Beta-distribution estimate of the normalised reward whose memory (rho) shrinks when
the policy moves fast. Rewards are normalised over the range the configuration's rewards can take
(upstream maps them with (r + 3) / 6, which format rewards push past 1; see docs/UPSTREAM.md).
advantage = reward - baseline (on the reward scale), clamped to +-5;
loss = -logp * A + beta * KL (k3, against the frozen starting model, not built when beta is 0).
"""


from dataset.lm_dataset import pad_collate
from trainer import loop
from trainer import rl_setup as setup
from trainer import trainer_utils as tu
from trainer.rl import losses, rewards
from trainer.rl import step_metrics as rl_metrics
from trainer.rl.rollout import rollout_logps

#: The upstream SPO progress line (an interface: the dashboard and old tools parse it).
PROGRESS = ("Epoch: {epoch}, Step: {step}/{iters}, Actor Loss: {actor_loss:.6f}, Reward: {reward:.6f}, "
            "Baseline: {baseline:.4f}, KL: {kl:.4f}, Rho: {rho:.4f}, Avg Response Len: {avg_response_len:.2f}, "
            "LR: {lr:.2e}")


def main():
    # 1. Options, processes, seed; data and reward model checked before any model is built
    run = setup.start("spo")
    args = run.args
    # 2. Policy, frozen reference (only with a KL penalty), rewards, prompts, the adaptive baseline
    policy, tokenizer, reference, reward_fns, dataset = setup.load_policy_run(run)
    dataset, evaluation = setup.held_out_answers(run, dataset, tokenizer, reward_fns)  # ours, opt-in
    part = run.part("policy", policy, args.learning_rate)
    value_tracker = losses.ValueTracker(*rewards.reward_range(reward_fns))

    # 3. One step: one response per prompt, advantage against the tracked baseline
    def step_fn(batch):
        ro, reward, parts, kept = setup.sample_and_score(run, policy, tokenizer, reward_fns, batch)
        baseline, baseline_reward = value_tracker.baseline(), value_tracker.baseline_reward()
        advantages = losses.spo_advantages(reward, baseline_reward)
        # The MoE auxiliary loss is not added to RL losses, as upstream.
        logps, _ = rollout_logps(part.model, ro)
        ref_logps = setup.reference_logps(reference, ro, logps)
        loss, kl = losses.spo_loss(logps, ref_logps, advantages, ro.completion_mask, args.beta)
        # Every process folds in the same (global) batch statistics, so the trackers stay identical.
        mean_normalised = setup.global_mean(value_tracker.normalise(reward).mean().item(), run.info)
        mean_logp = setup.global_mean(losses.masked_mean(logps.detach(), ro.completion_mask).item(), run.info)
        rho = value_tracker.update(mean_normalised, mean_logp)
        return loss, {"actor_loss": loss.item(), "reward": reward.mean().item(), "baseline": baseline,
                      "kl": kl.item(), "rho": rho, "avg_response_len": ro.response_lengths().mean().item(),
                      **rl_metrics.record(run, ro, reward_fns=reward_fns, rewards=reward, parts=parts,
                                          advantages=advantages, logps=logps, ref_logps=ref_logps,
                                          eos_id=tokenizer.eos_token_id,
                                          extras={**kept, "baseline_reward": baseline_reward, "rho": rho})}

    # 4. Train
    loop.train(run, [part], dataset, pad_collate(tokenizer.pad_token_id), step_fn,
               progress_line=loop.template_line(PROGRESS), schedule=loop.annealed_lr, evaluation=evaluation,
               extras={"value_tracker": value_tracker},
               run_name=f"MiniMind-SPO-Epoch-{args.epochs}-BS-{args.batch_size}-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
