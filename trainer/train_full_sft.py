"""MiniMind full supervised fine-tuning (SFT) on chat conversations.

    cd trainer && python train_full_sft.py --from_weight pretrain --data_path ../dataset/sft_mini_512.jsonl
    cd trainer && torchrun --nproc_per_node 2 train_full_sft.py

Options: `trainer/args.py` (type "sft"). The loss counts only the assistant replies (SFTDataset labels).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from trainer.args import parse_args  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402
from trainer.train_pretrain import lm_loss  # noqa: E402


def main():
    args = parse_args("sft")
    stop = tu.StopSignal()
    info = tu.init_distributed(args)
    tu.setup_seed(tu.BASE_SEED + info.rank)
    from dataset.lm_dataset import SFTDataset, pad_collate

    config = tu.model_config(args.hidden_size, args.num_hidden_layers, args.use_moe)
    model, tokenizer = tu.init_model(config, args.from_weight, args.weight_dir, args.device, tokenizer=args.tokenizer_path)
    tu.log_model_size(model, config)
    tu.check_data_file(args.data_path)
    dataset = SFTDataset(args.data_path, tokenizer, max_length=args.max_seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    resume, tracker = tu.resume_and_tracker(
        args, info, args.save_weight, config,
        f"MiniMind-Full-SFT-Epoch-{args.epochs}-BatchSize-{args.batch_size}"
        f"-LR-{args.learning_rate}")
    save_path = tu.weight_path(args.save_dir, args.save_weight, config.hidden_size, config.use_moe)
    tu.run_supervised_training(
        args, info, model=model, config=config, dataset=dataset, collate_fn=pad_collate(tokenizer.pad_token_id),
        loss_fn=lm_loss, save_name=args.save_weight, save_fn=lambda m: tu.save_weights(m, save_path),
        optimizer=optimizer, stop=stop, resume_state=resume, tracker=tracker,
        find_unused_parameters=bool(args.use_moe))


if __name__ == "__main__":
    tu.script_main(main)
