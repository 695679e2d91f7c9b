"""MiniMind GRPO (Group Relative Policy Optimization).

    cd trainer && python train_grpo.py --reward_model_path none
    cd trainer && torchrun --nproc_per_node 2 train_grpo.py

Options: `trainer/args.py` (type "grpo"). Starts from `{weight_dir}/reason_{h}.pth` with --reasoning 1,
else `full_sft_{h}.pth`. For each prompt, `num_generations` responses are sampled (temperature 0.8, top-k 50: --temperature, --top_k, --top_p);
each response's reward is normalised within its group, (r - mean) / (std + 1e-4), and the policy is
pushed towards the better ones with a per-token loss plus a k3 KL penalty (`beta`) against the frozen
starting model, as in TRL's GRPOTrainer with one update per batch.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from trainer import rl_utils as rl  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402


def progress_line(epoch, step, iters, m, lrs):
    return (f"Epoch: {epoch + 1}, Step: {step}/{iters}, Actor Loss: {m['actor_loss']:.6f}, "
            f"Reward: {m['reward']:.6f}, Avg Response Len: {m['avg_response_len']:.2f}, LR: {lrs[0]:.2e}, "
            f"Reward Std: {m['reward_std']:.6f}, KL: {m['kl']:.6f}")


def main():
    run = rl.setup_rl("grpo")
    args = run.args
    n = args.num_generations

    def step_fn(batch):
        ro = rl.rollout(run.policy, run.tokenizer, batch["prompt"], batch["answer"], args.max_seq_len,
                        args.max_gen_len, args.device, num_generations=n, **rl.sampling_options(args))
        rewards = rl.compute_rewards(ro.prompts, ro.responses, ro.references, args.reasoning,
                                     run.reward_model).to(args.device)
        advantages, group_std = rl.group_advantages(rewards, n)
        logps, aux_loss = rl.rollout_logps(run.model, ro)
        if args.beta > 0:
            with torch.no_grad():
                ref_logps, _ = rl.rollout_logps(run.reference, ro)
        else:  # no KL penalty: there is no reference model
            ref_logps = logps.detach()
        loss, kl = rl.grpo_loss(logps, ref_logps, advantages, ro.completion_mask, args.beta)
        loss = loss + aux_loss
        metrics = {"actor_loss": loss.item(), "reward": rewards.mean().item(),
                   "avg_response_len": ro.response_lengths().mean().item(),
                   "reward_std": group_std.mean().item(), "kl": kl.item()}
        return loss, metrics

    rl.run_rl_training(
        args, run.info, trained=[rl.Trained(run.model, run.optimizer, args.learning_rate)], config=run.config,
        dataset=run.dataset, collate_fn=run.collate_fn, step_fn=step_fn, progress_line=progress_line,
        save_fn=lambda: tu.save_weights(run.model, run.save_path), stop=run.stop, resume_state=run.resume,
        tracker=run.tracker)

if __name__ == "__main__":
    tu.script_main(main)
