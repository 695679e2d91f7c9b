"""MiniMind DPO (Direct Preference Optimization) on chosen/rejected conversation pairs.

    cd trainer && python train_dpo.py --from_weight full_sft --beta 0.1
    cd trainer && torchrun --nproc_per_node 2 train_dpo.py

Options: `trainer/args.py` (type "dpo"). The sigmoid DPO loss of Rafailov et al. (TRL's default
`loss_type="sigmoid"`) against a frozen copy of the starting policy, with sequence log-probabilities
summed over the assistant tokens, as upstream MiniMind does.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from trainer.args import parse_args  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402


def sequence_log_probs(logits, labels):
    """Sum of log p(label) over the positions whose (next-token) label is not -100, one value per row."""
    logits, labels = logits[:, :-1, :], labels[:, 1:]
    mask = labels != -100
    token_logps = torch.gather(F.log_softmax(logits.float(), dim=-1), 2,
                               labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (token_logps * mask).sum(dim=1)


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    """Sigmoid DPO loss and its implicit rewards.

    loss = -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), averaged over the batch;
    the rewards are beta * (pi - ref) for the chosen and rejected answers.
    """
    chosen_rewards = beta * (policy_chosen - ref_chosen)
    rejected_rewards = beta * (policy_rejected - ref_rejected)
    loss = -F.logsigmoid(chosen_rewards - rejected_rewards).mean()
    return loss, chosen_rewards.detach(), rejected_rewards.detach()


def pad_to(tensor, length, value):
    """Right-pad a [B, L] tensor to [B, length]."""
    return F.pad(tensor, (0, length - tensor.size(1)), value=value)


def make_dpo_loss_fn(ref_model, beta, pad_id):
    """The `loss_fn` for run_supervised_training: one policy pass and one reference pass over
    chosen and rejected stacked into a single batch."""
    def loss_fn(model, batch):
        length = max(batch["chosen_input_ids"].size(1), batch["rejected_input_ids"].size(1))
        ids = torch.cat([pad_to(batch["chosen_input_ids"], length, pad_id),
                         pad_to(batch["rejected_input_ids"], length, pad_id)])
        labels = torch.cat([pad_to(batch["chosen_labels"], length, -100),
                            pad_to(batch["rejected_labels"], length, -100)])
        n = batch["chosen_input_ids"].size(0)
        with torch.no_grad():
            ref_logps = sequence_log_probs(ref_model(ids).logits, labels)
        out = model(ids)
        policy_logps = sequence_log_probs(out.logits, labels)
        loss, chosen_r, rejected_r = dpo_loss(policy_logps[:n], policy_logps[n:], ref_logps[:n], ref_logps[n:], beta)
        metrics = {"chosen_reward": chosen_r.mean(), "rejected_reward": rejected_r.mean(),
                   "accuracy": (chosen_r > rejected_r).float().mean()}
        return loss + out.aux_loss, metrics
    return loss_fn


def main():
    args = parse_args("dpo")
    stop = tu.StopSignal()
    info = tu.init_distributed(args)
    tu.setup_seed(tu.BASE_SEED + info.rank)
    from dataset.lm_dataset import DPODataset, pad_collate

    config = tu.model_config(args.hidden_size, args.num_hidden_layers, args.use_moe)
    model, tokenizer = tu.init_model(config, args.from_weight, args.weight_dir, args.device, tokenizer=args.tokenizer_path)
    tu.log_model_size(model, config, label="Policy")
    ref_model, _ = tu.init_model(config, args.from_weight, args.weight_dir, args.device, tokenizer=False)
    ref_model.eval().requires_grad_(False)
    tu.check_data_file(args.data_path)
    dataset = DPODataset(args.data_path, tokenizer, max_length=args.max_seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    resume, tracker = tu.resume_and_tracker(
        args, info, args.save_weight, config,
        f"MiniMind-DPO-Epoch-{args.epochs}-BatchSize-{args.batch_size}"
        f"-LR-{args.learning_rate}")
    save_path = tu.weight_path(args.save_dir, args.save_weight, config.hidden_size, config.use_moe)
    tu.run_supervised_training(
        args, info, model=model, config=config, dataset=dataset, collate_fn=pad_collate(tokenizer.pad_token_id),
        loss_fn=make_dpo_loss_fn(ref_model, args.beta, tokenizer.pad_token_id), save_name=args.save_weight,
        save_fn=lambda m: tu.save_weights(m, save_path), optimizer=optimizer, stop=stop, resume_state=resume,
        tracker=tracker, find_unused_parameters=bool(args.use_moe))


if __name__ == "__main__":
    tu.script_main(main)
