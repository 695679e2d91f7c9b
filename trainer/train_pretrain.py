"""MiniMind pretraining: next-token prediction on plain text.

    cd trainer && python train_pretrain.py --hidden_size 512 --data_path ../dataset/pretrain_hq.jsonl
    cd trainer && torchrun --nproc_per_node 2 train_pretrain.py

Options: `trainer/rules/args.py` (type "pretrain"). Weights go to `{save_dir}/{save_weight}_{hidden_size}[_moe].pth`.
"""


from dataset.lm_dataset import PretrainDataset
from trainer import held_out, loop
from trainer import trainer_utils as tu


def lm_loss(model, batch):
    """Next-token cross entropy over the tokens whose label counts, plus the MoE auxiliary loss (0
    when dense).

    Batches are right-padded and attention is causal, so real tokens never see the padding: no
    attention mask is needed, and the model keeps its fast causal attention path. The head and the
    loss run only where a label counts (`loss_only`), not over padding or masked-out prompts. Packed
    rows (`--pack 1`) carry `document_ids`: attention stays within each document.
    """
    out = model(batch["input_ids"], labels=batch["labels"], document_ids=batch.get("document_ids"), loss_only=True)
    return out.loss + out.aux_loss, {}


def train_next_token(train_type, dataset_class, run_label):
    """The pretrain and full-SFT run: the whole model trained on `lm_loss` over `dataset_class`."""
    # 1. Options, processes, seed
    run = loop.start(train_type)
    args = run.args
    # 2. Model and data
    model, tokenizer = tu.load_model(args, args.from_weight)
    dataset = tu.load_dataset(dataset_class, args, tokenizer, train_type)  # --pack 1: its packed form
    collate_fn = tu.lm_collate(args, tokenizer)
    dataset, evaluation = held_out.losses(run, dataset, lambda path: dataset_class(path, tokenizer, args.max_seq_len),
                                          collate_fn, lm_loss)  # ours, opt-in
    # 3. Train the whole model on the next-token loss
    part = run.part("model", model, args.learning_rate)
    loop.train(run, [part], dataset, collate_fn, lambda batch: lm_loss(part.model, batch), evaluation=evaluation,
               run_name=f"MiniMind-{run_label}-Epoch-{args.epochs}-BatchSize-{args.batch_size}-LR-{args.learning_rate}")


def main():
    train_next_token("pretrain", PretrainDataset, "Pretrain")


if __name__ == "__main__":
    tu.script_main(main)
