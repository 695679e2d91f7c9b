"""MiniMind pretraining: next-token prediction on plain text.

    cd trainer && python train_pretrain.py --hidden_size 512 --data_path ../dataset/pretrain_hq.jsonl
    cd trainer && torchrun --nproc_per_node 2 train_pretrain.py

Options: `trainer/args.py` (type "pretrain"). Weights go to `{save_dir}/{save_weight}_{hidden_size}[_moe].pth`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from trainer.args import parse_args  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402


def lm_loss(model, batch):
    """Next-token cross entropy over the tokens whose label counts, plus the MoE auxiliary loss (0
    when dense).

    Batches are right-padded and attention is causal, so real tokens never see the padding: no
    attention mask is needed, and the model keeps its fast causal attention path. The head and the
    loss run only where a label counts (`loss_only`), not over padding. Packed rows (`--pack 1`)
    carry `document_ids`: attention stays within each document.
    """
    out = model(batch["input_ids"], labels=batch["labels"], document_ids=batch.get("document_ids"), loss_only=True)
    return out.loss + out.aux_loss, {}


def main():
    args = parse_args("pretrain")
    stop = tu.StopSignal()
    info = tu.init_distributed(args)
    tu.setup_seed(tu.BASE_SEED + info.rank)
    from dataset.lm_dataset import PackedPretrainDataset, PretrainDataset, pad_collate

    config = tu.model_config(args.hidden_size, args.num_hidden_layers, args.use_moe)
    model, tokenizer = tu.init_model(config, args.from_weight, args.weight_dir, args.device)
    tu.log_model_size(model, config)
    tu.check_data_file(args.data_path)
    # --pack 1: documents concatenated into full max_seq_len rows, attention within each document
    dataset = (PackedPretrainDataset if args.pack else PretrainDataset)(args.data_path, tokenizer,
                                                                        max_length=args.max_seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    resume, tracker = tu.resume_and_tracker(
        args, info, args.save_weight, config,
        f"MiniMind-Pretrain-Epoch-{args.epochs}-BatchSize-{args.batch_size}"
        f"-LR-{args.learning_rate}")
    save_path = tu.weight_path(args.save_dir, args.save_weight, config.hidden_size, config.use_moe)
    tu.run_supervised_training(
        args, info, model=model, config=config, dataset=dataset, collate_fn=pad_collate(tokenizer.pad_token_id),
        loss_fn=lm_loss, save_name=args.save_weight, save_fn=lambda m: tu.save_weights(m, save_path),
        optimizer=optimizer, stop=stop, resume_state=resume, tracker=tracker, find_unused_parameters=bool(args.use_moe))


if __name__ == "__main__":
    tu.script_main(main)
