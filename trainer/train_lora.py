"""MiniMind LoRA fine-tuning: the base model is frozen, only the low-rank adapters train.

    cd trainer && python train_lora.py --from_weight full_sft --lora_name lora_identity
    cd trainer && torchrun --nproc_per_node 2 train_lora.py

Options: `trainer/rules/args.py` (type "lora"). Saves only the LoRA weights (model_lora.save_lora, atomic) to
`{save_dir}/{lora_name}_{hidden_size}.pth`; the resume state is `../checkpoints/{lora_name}_{hidden_size}[_moe]_resume.pth`.
`--pack 1` packs whole conversations into max_seq_len rows, exact as for SFT (see `train_full_sft.py`).
"""


from dataset.lm_dataset import SFTDataset
from model.model_lora import apply_lora, save_lora
from trainer import held_out, loop
from trainer import trainer_utils as tu
from trainer.train_pretrain import lm_loss


def main():
    # 1. Options, processes, seed
    run = loop.start("lora")
    args = run.args
    # 2. Base model with adapters on its square linear layers; only the adapters train
    model, tokenizer = tu.load_model(args, args.from_weight, label=None)
    apply_lora(model)
    for name, param in model.named_parameters():
        param.requires_grad = ".lora." in name
    lora_params = [p for p in model.parameters() if p.requires_grad]
    tu.log_model_size(model, model.config)
    tu.log(f"LoRA Params: {sum(p.numel() for p in lora_params) / 1e6:.4f}M")
    dataset = tu.load_dataset(SFTDataset, args, tokenizer, run.train_type)
    collate_fn = tu.lm_collate(args, tokenizer)
    dataset, evaluation = held_out.losses(run, dataset, lambda path: SFTDataset(path, tokenizer, args.max_seq_len),
                                          collate_fn, lm_loss)  # ours, opt-in
    # 3. Train the adapters on the next-token loss of the replies; save only them
    part = run.part("model", model, args.learning_rate, params=lora_params)
    save_path = run.weight_paths()[0]
    loop.train(run, [part], dataset, collate_fn, lambda batch: lm_loss(part.model, batch), evaluation=evaluation,
               save_fn=lambda: save_lora(part.model, save_path),
               run_name=f"MiniMind-LoRA-{args.lora_name}-Epoch-{args.epochs}-BatchSize-{args.batch_size}"
                        f"-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
