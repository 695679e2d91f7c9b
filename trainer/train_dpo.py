"""MiniMind DPO (Direct Preference Optimization) on chosen/rejected conversation pairs.

    cd trainer && python train_dpo.py --from_weight full_sft --beta 0.1
    cd trainer && torchrun --nproc_per_node 2 train_dpo.py

Options: `trainer/rules/args.py` (type "dpo"). The sigmoid DPO loss of Rafailov et al. (TRL's default
`loss_type="sigmoid"`) against a frozen copy of the starting policy. As upstream MiniMind, a reply's
log-probability is the mean of its assistant tokens' log-probabilities (so long and short replies
weigh alike at the small learning rate tuned for it), and the MoE auxiliary loss is not added.
"""


import torch
import torch.nn.functional as F

from dataset.lm_dataset import DPODataset, pad_collate
from trainer import loop
from trainer import trainer_utils as tu


def sequence_log_probs(logits, labels):
    """Mean of log p(label) over the positions whose (next-token) label is not -100, one value per row
    (upstream's length-normalised sequence log-probability; a row without labels gives 0)."""
    logits, labels = logits[:, :-1, :], labels[:, 1:]
    mask = (labels != -100).float()
    token_logps = torch.gather(F.log_softmax(logits.float(), dim=-1), 2,
                               labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (token_logps * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)


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
    """The loss of one batch: one policy pass and one reference pass over
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
        return loss, metrics  # no MoE auxiliary loss, as upstream
    return loss_fn


def main():
    # 1. Options, processes, seed
    run = loop.start("dpo")
    args = run.args
    # 2. Policy, its frozen copy as the reference, preference pairs
    model, tokenizer = tu.load_model(args, args.from_weight, label="Policy")
    ref_model, _ = tu.load_model(args, args.from_weight, label=None, tokenizer=False)
    ref_model.eval().requires_grad_(False)
    dataset = tu.load_dataset(DPODataset, args, tokenizer)
    # 3. Train the policy on the DPO loss
    part = run.part("model", model, args.learning_rate)
    loss_fn = make_dpo_loss_fn(ref_model, args.beta, tokenizer.pad_token_id)
    loop.train(run, [part], dataset, pad_collate(tokenizer.pad_token_id), lambda batch: loss_fn(part.model, batch),
               run_name=f"MiniMind-DPO-Epoch-{args.epochs}-BatchSize-{args.batch_size}-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
