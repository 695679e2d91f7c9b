"""The DPO loss (Direct Preference Optimization; `train_dpo.py`): the sigmoid loss of Rafailov et al. (TRL's
default `loss_type="sigmoid"`) against a frozen copy of the starting policy. As upstream MiniMind, a reply's
log-probability is the mean of its assistant tokens' log-probabilities, and the MoE auxiliary loss is not added.
Packed pairs (PackedDPODataset) give each side's mean over its own document's reply tokens: the unpacked terms.
"""
import torch
import torch.nn.functional as F

from model.packing import document_sums


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
