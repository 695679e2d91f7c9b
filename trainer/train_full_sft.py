"""MiniMind full supervised fine-tuning (SFT) on chat conversations.

    cd trainer && python train_full_sft.py --from_weight pretrain --data_path ../dataset/sft_mini_512.jsonl
    cd trainer && torchrun --nproc_per_node 2 train_full_sft.py

Options: `trainer/rules/args.py` (type "sft"). The loss counts only the assistant replies (SFTDataset labels).
`--pack 1` packs whole conversations into max_seq_len rows (PackedSFTDataset): exact, the loss of a batch is
the mean over its conversations' reply tokens as unpacked (dense models only; `--use_moe 1` is refused).
"""


from dataset.lm_dataset import SFTDataset
from trainer import loop
from trainer import trainer_utils as tu
from trainer.train_pretrain import lm_loss


def main():
    # 1. Options, processes, seed
    run = loop.start("sft")
    args = run.args
    # 2. Model and conversations (SFTDataset labels only the assistant replies)
    model, tokenizer = tu.load_model(args, args.from_weight)
    dataset = tu.load_dataset(SFTDataset, args, tokenizer, run.train_type)
    # 3. Train the whole model on the next-token loss of the replies
    part = run.part("model", model, args.learning_rate)
    loop.train(run, [part], dataset, tu.lm_collate(args, tokenizer), lambda batch: lm_loss(part.model, batch),
               run_name=f"MiniMind-Full-SFT-Epoch-{args.epochs}-BatchSize-{args.batch_size}-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
