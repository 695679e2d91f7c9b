"""MiniMind GRPO (Group Relative Policy Optimization).

    cd trainer && python train_grpo.py --reward_model_path none
    cd trainer && torchrun --nproc_per_node 2 train_grpo.py

Options: `trainer/rules/args.py` (type "grpo"). Starts from `{weight_dir}/reason_{h}.pth` with --reasoning 1,
else `full_sft_{h}.pth`. For each prompt, `num_generations` responses are sampled (--temperature,
--top_k, --top_p: upstream's effective 0.8, 50, 1.0); each response's reward is normalised within its
group, (r - mean) / (std + 1e-4), clamped to +-10 and normalised again over the batch, as upstream; the
policy is pushed towards the better ones with a per-token loss plus a k3 KL penalty (`beta`) against
the frozen starting model (not built when beta is 0), as in TRL's GRPOTrainer with one update per
batch. The MoE auxiliary loss is not added.
"""


from dataset.lm_dataset import pad_collate
from trainer import loop
from trainer import rl_setup as setup
from trainer import trainer_utils as tu
from trainer.rl import losses
from trainer.rl import step_metrics as rl_metrics
from trainer.rl.rollout import rollout_logps

#: The upstream GRPO progress line (an interface: the dashboard and old tools parse it).
PROGRESS = ("Epoch: {epoch}, Step: {step}/{iters}, Actor Loss: {actor_loss:.6f}, Reward: {reward:.6f}, "
            "Avg Response Len: {avg_response_len:.2f}, LR: {lr:.2e}, Reward Std: {reward_std:.6f}, KL: {kl:.6f}")


def main():
    # 1. Options, processes, seed; data and reward model checked before any model is built
    run = setup.start("grpo")
    args, n = run.args, run.args.num_generations
    # 2. Policy, frozen reference (only with a KL penalty), rewards, prompts
    policy, tokenizer, reference, reward_fns, dataset = setup.load_policy_run(run)
    dataset, evaluation = setup.held_out_answers(run, dataset, tokenizer, reward_fns)  # ours, opt-in
    part = run.part("policy", policy, args.learning_rate)

    # 3. One step: a group of responses per prompt, rewards normalised within each group
    def step_fn(batch):
        ro, reward, parts, kept = setup.sample_and_score(run, policy, tokenizer, reward_fns, batch, n)
        advantages, group_std = losses.group_advantages(reward, n)
        # The MoE auxiliary loss is not added to RL losses, as upstream.
        logps, _ = rollout_logps(part.model, ro)
        ref_logps = setup.reference_logps(reference, ro, logps)
        loss, kl = losses.grpo_loss(logps, ref_logps, advantages, ro.completion_mask, args.beta)
        return loss, {"actor_loss": loss.item(), "reward": reward.mean().item(),
                      "avg_response_len": ro.response_lengths().mean().item(),
                      "reward_std": group_std.mean().item(), "kl": kl.item(),
                      **rl_metrics.record(run, ro, reward_fns=reward_fns, rewards=reward, parts=parts,
                                          advantages=advantages, logps=logps, ref_logps=ref_logps,
                                          eos_id=tokenizer.eos_token_id, group_size=n, extras=kept)}

    # 4. Train
    loop.train(run, [part], dataset, pad_collate(tokenizer.pad_token_id), step_fn,
               progress_line=loop.template_line(PROGRESS), schedule=loop.annealed_lr, evaluation=evaluation,
               run_name=f"MiniMind-GRPO-Epoch-{args.epochs}-BS-{args.batch_size}-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
