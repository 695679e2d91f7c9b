"""MiniMind reasoning distillation: SFT on `<think>...</think><answer>...</answer>` replies.

    cd trainer && python train_distill_reason.py --from_weight dpo --data_path ../dataset/r1_mix_1024.jsonl
    cd trainer && torchrun --nproc_per_node 2 train_distill_reason.py

Options: `trainer/args.py` (type "distill_reason"). Like SFT, but the tokens of the four tags weigh
TAG_WEIGHT times more in the loss, as upstream, so the model reliably learns the reply format.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from trainer.args import parse_args  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
TAG_WEIGHT = 10.0


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
        out = model(batch["input_ids"])
        logits, labels = out.logits[:, :-1, :], batch["labels"][:, 1:]
        token_loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                                     ignore_index=-100, reduction="none").view(labels.shape)
        mask = (labels != -100).float()
        weights = mask.masked_fill(tag_positions(labels, tag_id_seqs) & (labels != -100), TAG_WEIGHT)
        loss = (token_loss * weights).sum() / mask.sum().clamp(min=1)
        return loss + out.aux_loss, {}
    return loss_fn


def main():
    args = parse_args("distill_reason")
    stop = tu.StopSignal()
    info = tu.init_distributed(args)
    tu.setup_seed(tu.BASE_SEED + info.rank)
    from dataset.lm_dataset import SFTDataset, pad_collate

    config = tu.model_config(args.hidden_size, args.num_hidden_layers, args.use_moe)
    model, tokenizer = tu.init_model(config, args.from_weight, args.weight_dir, args.device, tokenizer=args.tokenizer_path)
    tu.log_model_size(model, config)
    tag_id_seqs = [tokenizer(tag, add_special_tokens=False).input_ids for tag in TAGS]
    tu.check_data_file(args.data_path)
    dataset = SFTDataset(args.data_path, tokenizer, max_length=args.max_seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    resume, tracker = tu.resume_and_tracker(
        args, info, args.save_weight, config,
        f"MiniMind-Reasoning-Epoch-{args.epochs}-BatchSize-{args.batch_size}"
        f"-LR-{args.learning_rate}")
    save_path = tu.weight_path(args.save_dir, args.save_weight, config.hidden_size, config.use_moe)
    tu.run_supervised_training(
        args, info, model=model, config=config, dataset=dataset, collate_fn=pad_collate(tokenizer.pad_token_id),
        loss_fn=make_reason_loss_fn(tag_id_seqs), save_name=args.save_weight,
        save_fn=lambda m: tu.save_weights(m, save_path), optimizer=optimizer, stop=stop, resume_state=resume,
        tracker=tracker, find_unused_parameters=bool(args.use_moe))


if __name__ == "__main__":
    tu.script_main(main)
