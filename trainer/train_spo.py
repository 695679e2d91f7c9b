"""MiniMind SPO (Single-stream Policy Optimization).

    cd trainer && python train_spo.py --reward_model_path none
    cd trainer && torchrun --nproc_per_node 2 train_spo.py

Options: `trainer/args.py` (type "spo"). Starts from `{weight_dir}/reason_{h}.pth` with --reasoning 1,
else `full_sft_{h}.pth`. One response per prompt; instead of a group, an adaptive value tracker gives
the baseline: a Beta-distribution estimate of the normalised reward whose memory (rho) shrinks when
the policy moves fast. advantage = reward - baseline (on the reward scale), clamped to +-5;
loss = -logp * A + beta * KL (k3, against the frozen starting model).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from trainer import rl_utils as rl  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402


def progress_line(epoch, step, iters, m, lrs):
    return (f"Epoch: {epoch + 1}, Step: {step}/{iters}, Actor Loss: {m['actor_loss']:.6f}, "
            f"Reward: {m['reward']:.6f}, Baseline: {m['baseline']:.4f}, KL: {m['kl']:.4f}, Rho: {m['rho']:.4f}, "
            f"Avg Response Len: {m['avg_response_len']:.2f}, LR: {lrs[0]:.2e}")


def main():
    run = rl.setup_rl("spo")
    args = run.args
    value_tracker = rl.ValueTracker()

    def step_fn(batch):
        ro = rl.rollout(run.policy, run.tokenizer, batch["prompt"], batch["answer"], args.max_seq_len,
                        args.max_gen_len, args.device, **rl.sampling_options(args))
        rewards = rl.compute_rewards(ro.prompts, ro.responses, ro.references, args.reasoning,
                                     run.reward_model).to(args.device)
        baseline = value_tracker.baseline()
        advantages = rl.spo_advantages(rewards, value_tracker.baseline_reward())
        logps, aux_loss = rl.rollout_logps(run.model, ro)
        if args.beta > 0:
            with torch.no_grad():
                ref_logps, _ = rl.rollout_logps(run.reference, ro)
        else:  # no KL penalty: there is no reference model
            ref_logps = logps.detach()
        loss, kl = rl.spo_loss(logps, ref_logps, advantages, ro.completion_mask, args.beta)
        loss = loss + aux_loss
        # Every process folds in the same (global) batch statistics, so the trackers stay identical.
        mean_normalised = rl.global_mean(value_tracker.normalise(rewards).mean().item(), run.info)
        mean_logp = rl.global_mean(rl.masked_mean(logps.detach(), ro.completion_mask).item(), run.info)
        rho = value_tracker.update(mean_normalised, mean_logp)
        metrics = {"actor_loss": loss.item(), "reward": rewards.mean().item(), "baseline": baseline,
                   "kl": kl.item(), "rho": rho, "avg_response_len": ro.response_lengths().mean().item()}
        return loss, metrics

    rl.run_rl_training(
        args, run.info, trained=[rl.Trained(run.model, run.optimizer, args.learning_rate)], config=run.config,
        dataset=run.dataset, collate_fn=run.collate_fn, step_fn=step_fn, progress_line=progress_line,
        save_fn=lambda: tu.save_weights(run.model, run.save_path), stop=run.stop, resume_state=run.resume,
        tracker=run.tracker, extras={"value_tracker": value_tracker})

if __name__ == "__main__":
    tu.script_main(main)
