"""MiniMind PPO (Proximal Policy Optimization) with an actor and a critic.

    cd trainer && python train_ppo.py --reward_model_path none
    cd trainer && torchrun --nproc_per_node 2 train_ppo.py

Options: `trainer/args.py` (type "ppo"). The actor starts from `{weight_dir}/reason_{h}.pth` with
--reasoning 1, else `full_sft_{h}.pth`; the critic is the same body with a Linear(hidden, 1) value head
and its own optimizer (--critic_learning_rate). As upstream MiniMind, each response is one action:
advantage = reward - the critic's value at the response end; clipped surrogate (--clip_epsilon)
on the summed log-prob ratio against an old actor refreshed every --update_old_actor_freq steps;
value loss (MSE) weighted by --vf_coef; KL penalty to the frozen starting model weighted by --kl_coef.
The actor is saved as `{save_weight}_{h}.pth`, the critic beside it (`ppo_actor` -> `ppo_critic_{h}.pth`).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from trainer import rl_utils as rl  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402


def progress_line(epoch, step, iters, m, lrs):
    return (f"Epoch: {epoch + 1}, Step: {step}/{iters}, Actor Loss: {m['actor_loss']:.6f}, "
            f"Critic Loss: {m['critic_loss']:.6f}, Reward: {m['reward']:.6f}, KL: {m['kl']:.6f}, "
            f"KL_ref: {m['kl_ref']:.6f}, Avg Response Len: {m['avg_response_len']:.2f}, "
            f"Actor LR: {lrs[0]:.2e}, Critic LR: {lrs[1]:.2e}")


def main():
    args, stop, info = rl.start_rl("ppo")
    from dataset.lm_dataset import pad_collate

    config = tu.model_config(args.hidden_size, args.num_hidden_layers, args.use_moe)
    actor, reference, tokenizer = rl.load_policy_and_reference(args, config)
    tu.log_model_size(actor, config, label="Actor")
    old_actor, _ = tu.init_model(config, rl.base_weight_name(args.reasoning), args.weight_dir, args.device,
                                 tokenizer=False)
    old_actor.eval().requires_grad_(False)
    critic_body, _ = tu.init_model(config, rl.base_weight_name(args.reasoning), args.weight_dir, args.device,
                                   tokenizer=False)
    critic = rl.Critic(critic_body).to(args.device)
    del critic_body  # only its transformer body lives on, inside the critic
    reward_model = rl.load_reward_model(args.reward_model_path, args.device)
    dataset = rl.load_rlaif_dataset(args, tokenizer)
    actor_optimizer = torch.optim.AdamW(actor.parameters(), lr=args.learning_rate)
    critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=args.critic_learning_rate)
    resume, tracker = rl.load_resume_and_tracker(args, info, config, "ppo")
    actor_model = tu.wrap_ddp(actor, info, find_unused_parameters=bool(args.use_moe))
    critic_model = tu.wrap_ddp(critic, info, find_unused_parameters=bool(args.use_moe))
    actor_path = tu.weight_path(args.save_dir, args.save_weight, config.hidden_size, config.use_moe)
    critic_path = tu.weight_path(args.save_dir, rl.critic_weight_name(args.save_weight), config.hidden_size,
                                 config.use_moe)

    # Whether the old actor holds the actor's current weights: then the rollout's own log-probs (the
    # sampling policy's) are the old actor's, and its forward pass is skipped.
    old_is_current = [True]

    def refresh_old_actor():
        old_actor.load_state_dict(actor.state_dict())
        old_is_current[0] = True

    def after_update(step):
        old_is_current[0] = False
        if step % args.update_old_actor_freq == 0:
            refresh_old_actor()

    def step_fn(batch):
        ro = rl.rollout(actor, tokenizer, batch["prompt"], batch["answer"], args.max_seq_len, args.max_gen_len,
                        args.device, **rl.sampling_options(args))
        rewards = rl.compute_rewards(ro.prompts, ro.responses, ro.references, args.reasoning,
                                     reward_model).to(args.device)
        values = rl.last_token_values(critic_model(ro.input_ids, ro.attention_mask), ro.attention_mask)
        logps, aux_loss = rl.completion_logps(actor_model, ro.input_ids, ro.attention_mask, ro.num_completion)
        mask = ro.completion_mask.to(logps.dtype)
        with torch.no_grad():
            if old_is_current[0]:
                old_logps = ro.sample_logps
            else:
                old_logps, _ = rl.completion_logps(old_actor, ro.input_ids, ro.attention_mask, ro.num_completion)
            if reference is not None:
                ref_logps, _ = rl.completion_logps(reference, ro.input_ids, ro.attention_mask, ro.num_completion)
            else:  # kl_coef 0: no reference model
                ref_logps = logps.detach()
        out = rl.ppo_losses((logps * mask).sum(dim=1), (old_logps * mask).sum(dim=1), (ref_logps * mask).sum(dim=1),
                            values.float(), rewards, args.clip_epsilon, args.vf_coef, args.kl_coef)
        metrics = {"actor_loss": out["policy_loss"].item(), "critic_loss": out["value_loss"].item(),
                   "reward": rewards.mean().item(), "kl": out["kl"].item(), "kl_ref": out["kl_ref"].item(),
                   "avg_response_len": ro.response_lengths().mean().item()}
        return out["loss"] + aux_loss, metrics

    def save_fn():
        tu.save_weights(actor_model, actor_path)
        tu.save_weights(critic_model, critic_path)

    if resume is not None:  # the old actor starts from the resumed actor, not from the base weights
        actor.load_state_dict(resume["model"])
        refresh_old_actor()
    rl.run_rl_training(
        args, info, trained=[rl.Trained(actor_model, actor_optimizer, args.learning_rate),
                             rl.Trained(critic_model, critic_optimizer, args.critic_learning_rate)],
        config=config, dataset=dataset, collate_fn=pad_collate(tokenizer.pad_token_id), step_fn=step_fn,
        progress_line=progress_line, save_fn=save_fn, stop=stop, resume_state=resume, tracker=tracker,
        extras={"critic": critic_model, "critic_optimizer": critic_optimizer}, after_update=after_update)


if __name__ == "__main__":
    tu.script_main(main)
