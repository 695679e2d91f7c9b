"""MiniMind reasoning distillation: SFT on `<think>...</think><answer>...</answer>` replies.

    cd trainer && python train_distill_reason.py --from_weight dpo --data_path ../dataset/r1_mix_1024.jsonl
    cd trainer && torchrun --nproc_per_node 2 train_distill_reason.py

Options: `trainer/rules/args.py` (type "distill_reason"). Like SFT, but the tokens of the four tags weigh
TAG_WEIGHT times more in the loss, as upstream, so the model reliably learns the reply format.
`--pack 1` packs whole conversations into max_seq_len rows (PackedSFTDataset): exact, every token keeps its
logits, label and weight (a tag never spans two conversations: a conversation's first label is -100), so a
batch's loss, the weighted sum over its conversations' reply tokens divided by their number, is the unpacked
one (dense models only).
"""


import torch
import torch.nn.functional as F

from dataset.lm_dataset import SFTDataset
from trainer import held_out, loop
from trainer import trainer_utils as tu
from trainer.rules import specs

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
TAG_WEIGHT = specs.REASON_TAG_WEIGHT


def tag_positions(labels, tag_id_seqs):
    """Boolean [B, L] mask of the positions covered by a complete occurrence of any tag's token ids.

    Matching whole tag sequences (not single ids) keeps a lone `<` or `>` in ordinary text at weight 1
    when the tokenizer splits a tag into several tokens.
    """
    hit = torch.zeros_like(labels, dtype=torch.bool)
    for seq in tag_id_seqs:
        k = len(seq)
        if k == 0 or k > labels.size(1):
            continue
        windows = labels.unfold(1, k, 1)  # [B, L-k+1, k]
        starts = (windows == torch.tensor(seq, device=labels.device)).all(dim=-1)
        for offset in range(k):
            hit[:, offset:offset + starts.size(1)] |= starts
    return hit


def make_reason_loss_fn(tag_id_seqs):
    """Token-weighted next-token loss: weight 1 on the assistant tokens, TAG_WEIGHT on tag tokens,
    normalised by the number of assistant tokens (upstream's formula)."""
    def loss_fn(model, batch):
        out = model(batch["input_ids"], document_ids=batch.get("document_ids"))  # packed rows: per conversation
        logits, labels = out.logits[:, :-1, :], batch["labels"][:, 1:]
        token_loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                                     ignore_index=-100, reduction="none").view(labels.shape)
        mask = (labels != -100).float()
        weights = mask.masked_fill(tag_positions(labels, tag_id_seqs) & (labels != -100), TAG_WEIGHT)
        loss = (token_loss * weights).sum() / mask.sum().clamp(min=1)
        return loss + out.aux_loss, {}
    return loss_fn


def main():
    # 1. Options, processes, seed
    run = loop.start("distill_reason")
    args = run.args
    # 2. Model, the tags' token ids, reasoning conversations
    model, tokenizer = tu.load_model(args, args.from_weight)
    tag_id_seqs = [tokenizer(tag, add_special_tokens=False).input_ids for tag in TAGS]
    dataset = tu.load_dataset(SFTDataset, args, tokenizer, run.train_type)
    # 3. Train the whole model on the tag-weighted next-token loss
    part = run.part("model", model, args.learning_rate)
    loss_fn = make_reason_loss_fn(tag_id_seqs)
    collate_fn = tu.lm_collate(args, tokenizer)
    dataset, evaluation = held_out.losses(run, dataset, lambda path: SFTDataset(path, tokenizer, args.max_seq_len),
                                          collate_fn, loss_fn)  # ours, opt-in
    loop.train(run, [part], dataset, collate_fn, lambda batch: loss_fn(part.model, batch), evaluation=evaluation,
               run_name=f"MiniMind-Reasoning-Epoch-{args.epochs}-BatchSize-{args.batch_size}-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
