"""MiniMind knowledge distillation: a student learns from the data and from a frozen teacher's logits.

    cd trainer && python train_distillation.py --student_hidden_size 512 --teacher_hidden_size 768 \
        --from_student_weight full_sft --from_teacher_weight full_sft
    cd trainer && torchrun --nproc_per_node 2 train_distillation.py

Options: `trainer/rules/args.py` (type "distillation"). As upstream, loss = alpha * (CE(student, data) + MoE aux)
+ (1 - alpha) * T^2 * KL(teacher_T || student_T) over the assistant tokens, with both distributions softened
by the temperature T (Hinton et al.): `--alpha` weighs the cross-entropy. `--use_moe` applies to both
models (it selects the `_moe` weight files).
The student is saved as `{save_dir}/{save_weight}_{student_hidden_size}[_moe].pth`.
`--pack 1` packs whole conversations into max_seq_len rows (PackedSFTDataset): exact, student and teacher
both read the packed rows with attention within each conversation, so every reply token keeps its student
and teacher logits and the batch's CE and KL are its conversations' means as unpacked (dense models only).
"""


import torch
import torch.nn.functional as F

from dataset.lm_dataset import SFTDataset
from trainer import held_out, loop
from trainer import trainer_utils as tu


def distillation_loss(student_logits, teacher_logits, temperature):
    """T^2 * KL(softmax(teacher/T) || softmax(student/T)), averaged over the rows (tokens)."""
    teacher_probs = F.softmax(teacher_logits.float() / temperature, dim=-1)
    student_log_probs = F.log_softmax(student_logits.float() / temperature, dim=-1)
    return temperature ** 2 * F.kl_div(student_log_probs, teacher_probs, reduction="batchmean")


def make_distill_loss_fn(teacher, alpha, temperature):
    """The loss of one batch, alpha * (CE + MoE aux) + (1 - alpha) * distill; logs `ce` (without the aux
    loss) and `distill` next to the total loss."""
    def loss_fn(model, batch):
        ids, labels, documents = batch["input_ids"], batch["labels"][:, 1:], batch.get("document_ids")
        out = model(ids, document_ids=documents)
        student_logits = out.logits[:, :-1, :]
        with torch.no_grad():
            teacher_logits = teacher(ids, document_ids=documents).logits[:, :-1, :student_logits.size(-1)]
        mask = labels != -100
        ce = F.cross_entropy(student_logits.reshape(-1, student_logits.size(-1)).float(), labels.reshape(-1),
                             ignore_index=-100)
        if alpha < 1:
            distill = distillation_loss(student_logits[mask], teacher_logits[mask], temperature)
        else:  # no teacher term: skip the softmax over the vocabulary
            distill = ce.new_zeros(())
        loss = alpha * (ce + out.aux_loss) + (1 - alpha) * distill
        return loss, {"ce": ce.detach(), "distill": distill.detach()}
    return loss_fn


def main():
    # 1. Options, processes, seed
    run = loop.start("distillation")
    args = run.args
    # 2. Student, frozen teacher, conversations
    model, tokenizer = tu.load_model(args, args.from_student_weight, label="Student", option="from_student_weight",
                                     hidden_size=args.student_hidden_size, num_hidden_layers=args.student_num_layers)
    if args.from_teacher_weight == "none":
        tu.warn("--from_teacher_weight none: the teacher is randomly initialised, its logits carry no knowledge")
    teacher, _ = tu.load_model(args, args.from_teacher_weight, label=None, tokenizer=False,
                               option="from_teacher_weight", hidden_size=args.teacher_hidden_size,
                               num_hidden_layers=args.teacher_num_layers)
    tu.log_model_size(teacher.eval().requires_grad_(False), teacher.config, label="Teacher")
    dataset = tu.load_dataset(SFTDataset, args, tokenizer, run.train_type)
    # 3. Train the student on the data and on the teacher's softened logits
    part = run.part("model", model, args.learning_rate)
    loss_fn = make_distill_loss_fn(teacher, args.alpha, args.temperature)
    collate_fn = tu.lm_collate(args, tokenizer)
    dataset, evaluation = held_out.losses(run, dataset, lambda path: SFTDataset(path, tokenizer, args.max_seq_len),
                                          collate_fn, loss_fn)  # ours, opt-in
    loop.train(run, [part], dataset, collate_fn, lambda batch: loss_fn(part.model, batch), evaluation=evaluation,
               run_name=f"MiniMind-Distill-S{args.student_hidden_size}T{args.teacher_hidden_size}"
                        f"-Epoch-{args.epochs}-BS-{args.batch_size}-LR-{args.learning_rate}")


if __name__ == "__main__":
    tu.script_main(main)
