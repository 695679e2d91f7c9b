"""MiniMind PPO (Proximal Policy Optimization) with an actor and a critic.

    cd trainer && python train_ppo.py --reward_model_path none
    cd trainer && torchrun --nproc_per_node 2 train_ppo.py

Options: `trainer/rules/args.py` (type "ppo"). The actor starts from `{weight_dir}/reason_{h}.pth` with
--reasoning 1, else `full_sft_{h}.pth`; the critic is the same body with a Linear(hidden, 1) value head
and its own optimizer (--critic_learning_rate). As upstream MiniMind, each response is one action:
advantage = reward - the critic's value at the response end; clipped surrogate (--clip_epsilon)
on the summed log-prob ratio against an old actor refreshed after steps f-1, 2f-1, ... (as upstream;
f = --update_old_actor_freq); value loss (MSE) by --vf_coef; KL penalty to the start model by --kl_coef.
The actor is saved as `{save_weight}_{h}.pth`, the critic beside it (`ppo_actor` -> `ppo_critic_{h}.pth`).
"""


from dataset.lm_dataset import pad_collate
from trainer import loop
from trainer import rl_setup as setup
from trainer import trainer_utils as tu
from trainer.rl import losses
from trainer.rl import step_metrics as rl_metrics
from trainer.rl.rollout import completion_logps

#: The upstream PPO progress line (an interface: the dashboard and old tools parse it).
PROGRESS = ("Epoch: {epoch}, Step: {step}/{iters}, Actor Loss: {actor_loss:.6f}, Critic Loss: {critic_loss:.6f}, "
            "Reward: {reward:.6f}, KL: {kl:.6f}, KL_ref: {kl_ref:.6f}, Avg Response Len: {avg_response_len:.2f}, "
            "Actor LR: {lr:.2e}, Critic LR: {lr_1:.2e}")


def main():
    # 1. Options, processes, seed; data and reward model checked before any model is built
    run = setup.start("ppo")
    args = run.args
    # 2. Actor, frozen reference and old actor, critic (the base body + a value head), rewards, prompts
    actor, tokenizer = setup.load_policy(args, label="Actor")
    reference = setup.load_frozen(args) if args.kl_coef > 0 else None  # no KL penalty: never built
    old_actor = setup.load_frozen(args)
    critic = setup.Critic(setup.load_base(args)).to(args.device)
    reward_fns = setup.load_rewards(run)
    dataset = setup.load_prompts(args, tokenizer)
    dataset, evaluation = setup.held_out_answers(run, dataset, tokenizer, reward_fns)  # ours, opt-in
    actor_part = run.part("actor", actor, args.learning_rate)
    critic_part = run.part("critic", critic, args.critic_learning_rate)

    # Whether the old actor holds the actor's current weights: then the rollout's own log-probs (the
    # sampling policy's, under the plain softmax) are the old actor's, and its forward pass is skipped.
    old_is_current = [True]

    def refresh_old_actor():
        old_actor.load_state_dict(actor.state_dict())
        old_is_current[0] = True

    def after_update(step):  # the actor moved: the old actor no longer holds its weights
        old_is_current[0] = False

    def after_step(step):  # as upstream, after steps freq-1, 2freq-1, ... (and their update, if any)
        if loop.is_update_step(step, args.update_old_actor_freq):
            refresh_old_actor()

    # 3. One step: one response per prompt, scored whole against the critic's value
    def step_fn(batch):
        ro, reward, parts, kept = setup.sample_and_score(run, actor, tokenizer, reward_fns, batch)
        values = losses.last_token_values(critic_part.model(ro.input_ids, ro.attention_mask), ro.attention_mask)
        # The MoE auxiliary loss is not added to RL losses, as upstream.
        logps, _ = completion_logps(actor_part.model, ro.input_ids, ro.attention_mask, ro.num_completion)
        old_logps = ro.sample_logps if old_is_current[0] else setup.reference_logps(old_actor, ro, logps)
        ref_logps = setup.reference_logps(reference, ro, logps)
        mask = ro.completion_mask.to(logps.dtype)  # each response is one action: its summed log-prob
        logp, old_logp, ref_logp = ((x * mask).sum(dim=1) for x in (logps, old_logps, ref_logps))
        out = losses.ppo_losses(logp, old_logp, ref_logp, values.float(), reward, args.clip_epsilon, args.vf_coef,
                                args.kl_coef)
        values = values.detach().float()
        return out["loss"], {
            "actor_loss": out["policy_loss"].item(), "critic_loss": out["value_loss"].item(),
            "reward": reward.mean().item(), "kl": out["kl"].item(), "kl_ref": out["kl_ref"].item(),
            "avg_response_len": ro.response_lengths().mean().item(),
            "clip_frac": rl_metrics.ppo_clip_frac(logp, old_logp, args.clip_epsilon),
            **rl_metrics.record(run, ro, reward_fns=reward_fns, rewards=reward, parts=parts,
                                advantages=reward - values, logps=logps, ref_logps=ref_logps,
                                eos_id=tokenizer.eos_token_id, extras={**kept, "value": values})}

    # 4. Train
    loop.train(run, [actor_part, critic_part], dataset, pad_collate(tokenizer.pad_token_id), step_fn,
               progress_line=loop.template_line(PROGRESS), schedule=loop.annealed_lr,
               after_resume=refresh_old_actor, after_update=after_update, after_step=after_step, evaluation=evaluation,
               run_name=f"MiniMind-PPO-Epoch-{args.epochs}-BS-{args.batch_size}-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
