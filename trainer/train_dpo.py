"""MiniMind DPO (Direct Preference Optimization) on chosen/rejected conversation pairs.

    cd trainer && python train_dpo.py --from_weight full_sft --beta 0.1
    cd trainer && torchrun --nproc_per_node 2 train_dpo.py

Options: `trainer/rules/args.py` (type "dpo"). The loss, upstream's (a reply's log-probability is the mean
of its assistant tokens'), against a frozen copy of the starting policy: `trainer/dpo_loss.py`. `--pack 1`
packs whole pairs (PackedDPODataset: document k of a chosen row and of a rejected row are the two sides of
one pair), each side's mean taken over its own document's reply tokens, so every pair's DPO term and the
batch's mean over its pairs are the unpacked ones.
"""
from dataset.lm_dataset import DPODataset, pad_collate
from trainer import held_out, loop
from trainer import trainer_utils as tu
from trainer.dpo_loss import make_dpo_loss_fn


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
