"""MiniMind full supervised fine-tuning (SFT) on chat conversations.

    cd trainer && python train_full_sft.py --from_weight pretrain --data_path ../dataset/sft_mini_512.jsonl
    cd trainer && torchrun --nproc_per_node 2 train_full_sft.py

Options: `trainer/rules/args.py` (type "sft"). The loss counts only the assistant replies (SFTDataset labels).
`--pack 1` packs whole conversations into max_seq_len rows (PackedSFTDataset): exact, the loss of a batch is
the mean over its conversations' reply tokens as unpacked (dense models only; `--use_moe 1` is refused).
"""


from dataset.lm_dataset import SFTDataset
from trainer import trainer_utils as tu
from trainer.train_pretrain import train_next_token


def main():
    # Pretraining's run on conversations: SFTDataset labels only the assistant replies.
    train_next_token("sft", SFTDataset, "Full-SFT")


if __name__ == "__main__":
    tu.script_main(main)
