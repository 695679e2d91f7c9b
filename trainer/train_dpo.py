"""MiniMind DPO (Direct Preference Optimization) on chosen/rejected conversation pairs.

    cd trainer && python train_dpo.py --from_weight full_sft --beta 0.1
    cd trainer && torchrun --nproc_per_node 2 train_dpo.py

Options: `trainer/rules/args.py` (type "dpo"). The sigmoid DPO loss of Rafailov et al. (TRL's default
`loss_type="sigmoid"`) against a frozen copy of the starting policy. As upstream MiniMind, a reply's
log-probability is the mean of its assistant tokens' log-probabilities (so long and short replies
weigh alike at the small learning rate tuned for it), and the MoE auxiliary loss is not added.
`--pack 1` packs whole pairs (PackedDPODataset: a chosen row and a rejected row, document k of each the two
sides of one pair): exact, each side's log-probability is the mean over its own document's reply tokens
(`sequence_log_probs` with document ids), so every pair's DPO term and the batch's mean over its pairs are
the unpacked ones.
"""


import torch
import torch.nn.functional as F

from dataset.lm_dataset import DPODataset, pad_collate
from model.packing import document_sums
from trainer import held_out, loop
from trainer import trainer_utils as tu


def sequence_log_probs(logits, labels, document_ids=None):
    """Mean of log p(label) over the positions whose (next-token) label is not -100, one value per row
    (upstream's length-normalised sequence log-probability; a row without labels gives 0). Packed rows
    (`document_ids`): the same mean over each document's own positions, [rows, documents]."""
    logits, labels = logits[:, :-1, :], labels[:, 1:]
    mask = (labels != -100).float()
    token_logps = torch.gather(F.log_softmax(logits.float(), dim=-1), 2,
                               labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    if document_ids is None:
        return (token_logps * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    targets_of, documents = document_ids[:, 1:], int(document_ids.max()) + 1  # a label's document: its token's
    return (document_sums(token_logps * mask, targets_of, documents)
            / document_sums(mask, targets_of, documents).clamp(min=1))


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
    chosen and rejected stacked into a single batch (packed rows: every pair of every item)."""
    def loss_fn(model, batch):
        length = max(batch["chosen_input_ids"].size(1), batch["rejected_input_ids"].size(1))
        ids = torch.cat([pad_to(batch["chosen_input_ids"], length, pad_id),
                         pad_to(batch["rejected_input_ids"], length, pad_id)])
        labels = torch.cat([pad_to(batch["chosen_labels"], length, -100),
                            pad_to(batch["rejected_labels"], length, -100)])
        n = batch["chosen_input_ids"].size(0)
        documents = pairs = None
        if "chosen_document_ids" in batch:  # packed: document k of an item's two rows is one pair
            documents = torch.cat([pad_to(batch["chosen_document_ids"], length, -1),
                                   pad_to(batch["rejected_document_ids"], length, -1)])
            pairs = document_sums(torch.ones_like(documents), documents, int(documents.max()) + 1)[:n] > 0

        def side_log_probs(logits):  # -> (chosen, rejected), one value per pair
            logps = sequence_log_probs(logits, labels, documents)
            return (logps[:n], logps[n:]) if pairs is None else (logps[:n][pairs], logps[n:][pairs])

        with torch.no_grad():
            ref_chosen, ref_rejected = side_log_probs(ref_model(ids, document_ids=documents).logits)
        out = model(ids, document_ids=documents)
        policy_chosen, policy_rejected = side_log_probs(out.logits)
        loss, chosen_r, rejected_r = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)
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
    dataset = tu.load_dataset(DPODataset, args, tokenizer, run.train_type)
    # 3. Train the policy on the DPO loss
    part = run.part("model", model, args.learning_rate)
    loss_fn = make_dpo_loss_fn(ref_model, args.beta, tokenizer.pad_token_id)
    dataset, evaluation = held_out.losses(  # ours, opt-in
        run, dataset, lambda path: DPODataset(path, tokenizer, args.max_seq_len), pad_collate(tokenizer.pad_token_id),
        loss_fn, names=("loss", "reward_accuracy", "reward_margin"), named=lambda loss, m: {
            "loss": loss, "reward_accuracy": m["accuracy"], "reward_margin": m["chosen_reward"] - m["rejected_reward"]})
    loop.train(run, [part], dataset, pad_collate(tokenizer.pad_token_id), lambda batch: loss_fn(part.model, batch),
               evaluation=evaluation,
               run_name=f"MiniMind-DPO-Epoch-{args.epochs}-BatchSize-{args.batch_size}-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
