"""MiniMind knowledge distillation: a student learns from the data and from a frozen teacher's logits.

    cd trainer && python train_distillation.py --student_hidden_size 512 --teacher_hidden_size 768 \
        --from_student_weight full_sft --from_teacher_weight full_sft
    cd trainer && torchrun --nproc_per_node 2 train_distillation.py

Options: `trainer/args.py` (type "distillation"). Loss = (1 - alpha) * CE(student, data)
+ alpha * T^2 * KL(teacher_T || student_T) over the assistant tokens, with both distributions softened by
the temperature T (Hinton et al.). `--use_moe` applies to both models (it selects the `_moe` weight files).
The student is saved as `{save_dir}/{save_weight}_{student_hidden_size}[_moe].pth`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from trainer.args import parse_args  # noqa: E402
from trainer import trainer_utils as tu  # noqa: E402


def distillation_loss(student_logits, teacher_logits, temperature):
    """T^2 * KL(softmax(teacher/T) || softmax(student/T)), averaged over the rows (tokens)."""
    teacher_probs = F.softmax(teacher_logits.float() / temperature, dim=-1)
    student_log_probs = F.log_softmax(student_logits.float() / temperature, dim=-1)
    return temperature ** 2 * F.kl_div(student_log_probs, teacher_probs, reduction="batchmean")


def make_distill_loss_fn(teacher, alpha, temperature):
    """The `loss_fn` for run_supervised_training; logs `ce` and `distill` next to the total loss."""
    def loss_fn(model, batch):
        ids, labels = batch["input_ids"], batch["labels"][:, 1:]
        out = model(ids)
        student_logits = out.logits[:, :-1, :]
        with torch.no_grad():
            teacher_logits = teacher(ids).logits[:, :-1, :student_logits.size(-1)]
        mask = labels != -100
        ce = F.cross_entropy(student_logits.reshape(-1, student_logits.size(-1)).float(), labels.reshape(-1),
                             ignore_index=-100)
        if alpha > 0:
            distill = distillation_loss(student_logits[mask], teacher_logits[mask], temperature)
        else:  # no teacher term: skip the softmax over the vocabulary
            distill = ce.new_zeros(())
        loss = (1 - alpha) * ce + alpha * distill + out.aux_loss
        return loss, {"ce": ce.detach(), "distill": distill.detach()}
    return loss_fn


def main():
    args = parse_args("distillation")
    stop = tu.StopSignal()
    info = tu.init_distributed(args)
    tu.setup_seed(tu.BASE_SEED + info.rank)
    from dataset.lm_dataset import SFTDataset, pad_collate

    student_config = tu.model_config(args.student_hidden_size, args.student_num_layers, args.use_moe)
    teacher_config = tu.model_config(args.teacher_hidden_size, args.teacher_num_layers, args.use_moe)
    model, tokenizer = tu.init_model(student_config, args.from_student_weight, args.weight_dir, args.device, tokenizer=args.tokenizer_path)
    tu.log_model_size(model, student_config, label="Student")
    if args.from_teacher_weight == "none":
        tu.warn("--from_teacher_weight none: the teacher is randomly initialised, its logits carry no knowledge")
    teacher, _ = tu.init_model(teacher_config, args.from_teacher_weight, args.weight_dir, args.device, tokenizer=False)
    teacher.eval().requires_grad_(False)
    tu.log_model_size(teacher, teacher_config, label="Teacher")
    tu.check_data_file(args.data_path)
    dataset = SFTDataset(args.data_path, tokenizer, max_length=args.max_seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    resume, tracker = tu.resume_and_tracker(
        args, info, args.save_weight, student_config,
        f"MiniMind-Distill-S{args.student_hidden_size}T{args.teacher_hidden_size}"
        f"-Epoch-{args.epochs}-BS-{args.batch_size}-LR-{args.learning_rate}")
    save_path = tu.weight_path(args.save_dir, args.save_weight, student_config.hidden_size, student_config.use_moe)
    tu.run_supervised_training(
        args, info, model=model, config=student_config, dataset=dataset,
        collate_fn=pad_collate(tokenizer.pad_token_id),
        loss_fn=make_distill_loss_fn(teacher, args.alpha, args.temperature), save_name=args.save_weight,
        save_fn=lambda m: tu.save_weights(m, save_path), optimizer=optimizer, stop=stop, resume_state=resume,
        tracker=tracker, find_unused_parameters=bool(args.use_moe))


if __name__ == "__main__":
    tu.script_main(main)
