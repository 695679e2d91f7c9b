"""MiniMind LoRA fine-tuning: the base model is frozen, only the low-rank adapters train.

    cd trainer && python train_lora.py --from_weight full_sft --lora_name lora_identity
    cd trainer && torchrun --nproc_per_node 2 train_lora.py

Options: `trainer/args.py` (type "lora"). Saves only the LoRA weights (model_lora.save_lora, atomic) to
`{save_dir}/{lora_name}_{hidden_size}.pth`; the resume state is `../checkpoints/{lora_name}_{hidden_size}[_moe]_resume.pth`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from trainer.args import parse_args  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402
from trainer.train_pretrain import lm_loss  # noqa: E402


def main():
    args = parse_args("lora")
    stop = tu.StopSignal()
    info = tu.init_distributed(args)
    tu.setup_seed(tu.BASE_SEED + info.rank)
    from dataset.lm_dataset import SFTDataset, pad_collate
    from model.model_lora import apply_lora, save_lora

    config = tu.model_config(args.hidden_size, args.num_hidden_layers, args.use_moe)
    model, tokenizer = tu.init_model(config, args.from_weight, args.weight_dir, args.device, tokenizer=args.tokenizer_path)
    apply_lora(model)
    for name, param in model.named_parameters():
        param.requires_grad = ".lora." in name
    lora_params = [p for p in model.parameters() if p.requires_grad]
    tu.log_model_size(model, config)
    tu.log(f"LoRA Params: {sum(p.numel() for p in lora_params) / 1e6:.4f}M")
    tu.check_data_file(args.data_path)
    dataset = SFTDataset(args.data_path, tokenizer, max_length=args.max_seq_len)
    optimizer = torch.optim.AdamW(lora_params, lr=args.learning_rate)
    resume, tracker = tu.resume_and_tracker(
        args, info, args.lora_name, config,
        f"MiniMind-LoRA-{args.lora_name}-Epoch-{args.epochs}-BatchSize-{args.batch_size}"
        f"-LR-{args.learning_rate}")
    save_path = os.path.join(args.save_dir, f"{args.lora_name}_{config.hidden_size}.pth")
    tu.run_supervised_training(
        args, info, model=model, config=config, dataset=dataset, collate_fn=pad_collate(tokenizer.pad_token_id),
        loss_fn=lm_loss, save_name=args.lora_name, save_fn=lambda m: save_lora(m, save_path),
        optimizer=optimizer, stop=stop, resume_state=resume, tracker=tracker,
        find_unused_parameters=bool(args.use_moe))


if __name__ == "__main__":
    tu.script_main(main)
