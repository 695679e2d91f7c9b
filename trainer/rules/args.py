"""Command-line arguments of every MiniMind training script.

This module is the one place where a training parameter's name, type, default, bounds, choices and
English help text are written, and where the training types are listed (`TRAIN_TYPES`: their order
everywhere). Each trainer parses its command line with `trainer.rules.parsing.parse_args(TYPE)`; the
dashboard's registry (`mmcore.train.train_types`) reads the same `Arg` definitions to build its forms,
and its English language table takes the help texts from here (`help_texts`). It must stay importable
without torch, because the dashboard never imports torch.
"""
import argparse
import os
from dataclasses import dataclass, replace

from trainer.rules import roots
from trainer.rules.messages import message

#: Every training type, in the order the trainers' rules, the specs and the dashboard list them.
TRAIN_TYPES = ("pretrain", "sft", "lora", "dpo", "ppo", "grpo", "spo", "distill_reason", "distillation")

# The training device's default depends on the machine (cuda:0 when CUDA is available, else cpu), so
# the parser keeps this marker and `trainer.rules.parsing.parse_args` resolves it once torch is imported.
AUTO_DEVICE = "auto"
#: What a CPU trains in whatever --dtype says (trainer_utils: mixed precision applies on CUDA only).
CPU_DTYPE = "float32"


@dataclass(frozen=True)
class Arg:
    """One command-line option of a training script."""
    name: str
    type: type  # int, float, str or bool (bool = an on/off flag, `store_true`)
    default: object
    help: str
    choices: tuple | None = None
    min: float | None = None  # inclusive bounds, checked by the parser and by the dashboard
    max: float | None = None
    gt_zero: bool = False  # strictly positive (learning rates, temperatures)
    # "name": a plain file-name prefix (no folders); "read"/"write": a path inside the allowed roots
    # (see trainer/rules/roots.py; checked by trainer/rules/job_paths.py, not here: it depends on the machine).
    kind: str | None = None

    def check(self, value):
        """Return an error message for `value` (already of `self.type`), or None when it is valid
        (a `Message`: reads as English, keeps its key and values; see trainer/rules/messages.py)."""
        if self.kind == "name":
            return roots.name_problem(value)
        if self.choices is not None and value not in self.choices:
            return message("field.one_of", choices=", ".join(str(c) for c in self.choices))
        if self.gt_zero and not value > 0:
            return message("field.positive")
        if self.min is not None and value < self.min:
            return message("field.at_least", n=f"{self.min:g}")
        if self.max is not None and value > self.max:
            return message("field.at_most", n=f"{self.max:g}")
        return None


def _common(type_key, wandb_name, *, save_dir="../out", save_weight, epochs, batch_size, learning_rate,
            accumulation_steps, log_interval, save_interval, max_seq_len, data_path, from_weight):
    """The options every MiniMind trainer shares, in the upstream scripts' order.

    `save_weight=None` leaves the option out (LoRA names its output with --lora_name instead);
    `from_weight=None` leaves it out (PPO/GRPO/SPO pick their base weight from --reasoning).
    """
    args = [
        Arg("save_dir", str, save_dir, "Folder where trained weights are saved"),
        Arg("save_weight", str, save_weight, "File-name prefix of the saved weights"),
        Arg("epochs", int, epochs, "Number of passes over the data", min=1),
        Arg("batch_size", int, batch_size, "Samples per step and process", min=1),
        Arg("learning_rate", float, learning_rate, "Peak learning rate (cosine schedule)", gt_zero=True),
        Arg("device", str, AUTO_DEVICE, "Training device, e.g. cuda:0 or cpu (default: cuda:0 when CUDA is available, else cpu)"),
        Arg("dtype", str, "bfloat16", f"Mixed-precision type on CUDA (CPU always trains in {CPU_DTYPE})",
            choices=("bfloat16", "float16", "float32")),
        Arg("num_workers", int, 1, "Data-loading worker processes", min=0),
        Arg("accumulation_steps", int, accumulation_steps, "Gradient accumulation steps", min=1),
        Arg("grad_clip", float, 1.0, "Gradient clipping threshold (max global norm)", gt_zero=True),
        Arg("log_interval", int, log_interval, "Print a progress line every N steps", min=1),
        Arg("save_interval", int, save_interval, "Save weights and resume state every N steps", min=1),
        Arg("hidden_size", int, 512, "Model hidden size", min=8),
        Arg("num_hidden_layers", int, 8, "Number of transformer layers", min=1),
        Arg("max_seq_len", int, max_seq_len, "Maximum tokens per training sample (prompt length for RL)", min=8),
        Arg("use_moe", int, 0, "Use the Mixture-of-Experts model (0 = no, 1 = yes)", choices=(0, 1)),
        Arg("data_path", str, data_path, "Training data (jsonl)"),
        Arg("from_weight", str, from_weight, "Base weight to start from (prefix in weight_dir); none = random init"),
        Arg("weight_dir", str, "../out", "Folder where base weights are read"),
        Arg("tokenizer_path", str, "../model", "Tokenizer folder (tokenizer.json, tokenizer_config.json); for weights "
            "trained upstream, an upstream MiniMind checkout's model/ folder"),
        Arg("keep_checkpoints", int, 0, "Keep the last N step snapshots of the weights beside the weight file, "
            "named {weight}_step{N}.pth (0 = none)", min=0),
        Arg("from_resume", int, 0, "Resume from the last checkpoint in ../checkpoints (0 = no, 1 = yes)", choices=(0, 1)),
        Arg("use_wandb", bool, False, "Report metrics to wandb (or swanlab, when that is what is installed)"),
        Arg("wandb_project", str, f"MiniMind-{wandb_name}", "wandb / swanlab project name"),
        Arg("run_dir", str, "", "Folder for the run's structured records (metrics stream, rollouts); empty: "
            "the job's own folder from the dashboard, runs/records/<type>-<weight> from the command line"),
        # Held-out evaluation (ours, off by default): see trainer/evaluation.py.
        Arg("eval_data", str, "", "Held-out file in the training data's format, evaluated before the first step, "
            "every --eval_interval optimizer steps and at the end (empty: no evaluation unless --eval_holdout)"),
        Arg("eval_holdout", int, 0, "Hold out the last N rows of the training file as the evaluation set instead "
            "of --eval_data (0 = none); the split is written to the run's records", min=0),
        Arg("eval_interval", int, 0, "Evaluate every N optimizer steps (0 = every --save_interval steps)", min=0),
        Arg("eval_rows", int, 64, "Held-out rows evaluated each time (the file's first N)", min=1),
        Arg("seed", int, None, "Random seed of the run (weights' initialisation, data order, sampling); empty: "
            "upstream's 42", min=0, max=2**32 - 1),
    ]
    drop = {name for name, value in (("save_weight", save_weight), ("from_weight", from_weight)) if value is None}
    return [a for a in args if a.name not in drop]


#: The types `--pack` applies to: pretraining, and the supervised types, where packing is exact.
PACK_TYPES = ("pretrain", "sft", "lora", "dpo", "distill_reason", "distillation")
#: Ours, off by default (upstream has no packing); the last option of each type in PACK_TYPES.
PACK = Arg("pack", int, 0, "Pack the data into full max_seq_len rows, attention and positions within each "
           "document (pretrain: documents, a long one continuing into the next row; sft, lora, distill_reason, "
           "distillation: whole conversations; dpo: whole pairs, chosen and rejected rows side by side) "
           "(0 = no: one sample per row, as upstream; 1 = yes)", choices=(0, 1))

#: The RL trainers' sampling options (ours, after upstream's options).
SAMPLING = ("temperature", "top_k", "top_p")


def _rl_own(*, reasoning_help="Train the reasoning model (1: starts from reason, format rewards) or not (0: starts from full_sft)"):
    """Options shared by PPO, GRPO and SPO, in upstream order."""
    return {
        "max_gen_len": Arg("max_gen_len", int, 1536, "Maximum number of generated tokens per response", min=1),
        "reasoning": Arg("reasoning", int, 1, reasoning_help, choices=(0, 1)),
        "reward_model_path": Arg("reward_model_path", str, "../../internlm2-1_8b-reward",
                                 "Reward model folder (transformers format); none = rule rewards only"),
        "rollout_groups": Arg("rollout_groups", int, -1, "Prompt groups per step whose responses go to the "
                              "rollout store (-1 = all, 0 = none)", min=-1),
        "rollout_max_mb": Arg("rollout_max_mb", float, 2048.0, "Size bound of the rollout store in MB; past it, "
                              "responses are no longer stored (metrics still are)", gt_zero=True),
        # Upstream samples with generate(do_sample=True, temperature=0.8) and so gets transformers'
        # default top-k of 50 and top-p of 1.0: these defaults are upstream's effective values.
        "temperature": Arg("temperature", float, 0.8, "Sampling temperature of the rollouts", gt_zero=True),
        "top_k": Arg("top_k", int, 50, "Sample only from the k most likely tokens (0 = whole vocabulary)", min=0),
        "top_p": Arg("top_p", float, 1.0, "Sample only from the most likely tokens whose probabilities add up "
                     "to top_p (1.0 = no limit)", gt_zero=True, max=1),
    }


def _insert_after(args, after, new):
    """Return `args` with the `new` options placed right after the option named `after`."""
    i = next(i for i, a in enumerate(args) if a.name == after) + 1
    return args[:i] + list(new) + args[i:]


def _override(args, **changes):
    """Return `args` with some options' fields replaced: name=dict(field=value)."""
    return [replace(a, **changes[a.name]) if a.name in changes else a for a in args]


def _definitions():
    defs = {}
    defs["pretrain"] = _common(
        "pretrain", "Pretrain", save_weight="pretrain", epochs=1, batch_size=32, learning_rate=5e-4,
        accumulation_steps=8, log_interval=100, save_interval=100, max_seq_len=512,
        data_path="../dataset/pretrain_hq.jsonl", from_weight="none") + [PACK]
    defs["sft"] = _common(
        "sft", "Full-SFT", save_weight="full_sft", epochs=2, batch_size=16, learning_rate=5e-7,
        accumulation_steps=1, log_interval=100, save_interval=100, max_seq_len=512,
        data_path="../dataset/sft_mini_512.jsonl", from_weight="pretrain") + [PACK]
    defs["lora"] = _insert_after(
        _common("lora", "LoRA", save_dir="../out/lora", save_weight=None, epochs=50, batch_size=32,
                learning_rate=1e-4, accumulation_steps=1, log_interval=10, save_interval=1, max_seq_len=512,
                data_path="../dataset/lora_identity.jsonl", from_weight="full_sft"),
        "save_dir", [Arg("lora_name", str, "lora_identity", "Name of the LoRA weights (saved as {lora_name}_{hidden_size}.pth)")]
    ) + [PACK]
    defs["dpo"] = _common(
        "dpo", "DPO", save_weight="dpo", epochs=1, batch_size=4, learning_rate=4e-8,
        accumulation_steps=1, log_interval=100, save_interval=100, max_seq_len=1024,
        data_path="../dataset/dpo.jsonl", from_weight="full_sft") + [
        Arg("beta", float, 0.1, "DPO temperature: how strongly the policy may move away from the reference", gt_zero=True),
        PACK]

    rl_common = dict(epochs=1, batch_size=2, accumulation_steps=1, log_interval=1, save_interval=10,
                     max_seq_len=66, data_path="../dataset/rlaif-mini.jsonl", from_weight=None)
    rl = _rl_own()
    defs["ppo"] = _override(
        _common("ppo", "PPO", save_weight="ppo_actor", learning_rate=8e-8, **rl_common),
        learning_rate=dict(help="Actor learning rate (cosine schedule)")) + [
        Arg("critic_learning_rate", float, 8e-8, "Critic learning rate (cosine schedule)", gt_zero=True),
        rl["max_gen_len"],
        Arg("clip_epsilon", float, 0.1, "PPO clipping range of the probability ratio", gt_zero=True),
        Arg("vf_coef", float, 0.5, "Weight of the value (critic) loss", min=0),
        Arg("kl_coef", float, 0.02, "Weight of the KL penalty against the reference model", min=0),
        rl["reasoning"],
        Arg("update_old_actor_freq", int, 4, "Refresh the old actor every N steps", min=1),
        rl["reward_model_path"], rl["rollout_groups"], rl["rollout_max_mb"],
        *(rl[name] for name in SAMPLING)]
    defs["grpo"] = _common("grpo", "GRPO", save_weight="grpo", learning_rate=8e-8, **rl_common) + [
        rl["max_gen_len"],
        Arg("beta", float, 0.02, "Weight of the KL penalty against the reference model", min=0),
        Arg("num_generations", int, 8, "Responses sampled per prompt (the group size)", min=2),
        rl["reasoning"], rl["reward_model_path"], rl["rollout_groups"], rl["rollout_max_mb"],
        *(rl[name] for name in SAMPLING)]
    defs["spo"] = _common("spo", "SPO", save_weight="spo", learning_rate=1e-7,
                          **{**rl_common, "accumulation_steps": 4}) + [
        rl["max_gen_len"],
        Arg("beta", float, 0.02, "Weight of the KL penalty against the reference model", min=0),
        rl["reasoning"], rl["reward_model_path"], rl["rollout_groups"], rl["rollout_max_mb"],
        *(rl[name] for name in SAMPLING)]

    defs["distill_reason"] = _common(
        "distill_reason", "Reasoning-Distill", save_weight="reason", epochs=1, batch_size=8, learning_rate=1e-6,
        accumulation_steps=1, log_interval=100, save_interval=100, max_seq_len=1024,
        data_path="../dataset/r1_mix_1024.jsonl", from_weight="dpo") + [PACK]
    # Distillation sizes the student and the teacher separately instead of hidden_size/num_hidden_layers.
    distillation = [a for a in _common(
        "distillation", "Distillation", save_weight="full_dist", epochs=6, batch_size=32, learning_rate=5e-6,
        accumulation_steps=1, log_interval=100, save_interval=100, max_seq_len=512,
        data_path="../dataset/sft_mini_512.jsonl", from_weight=None)
        if a.name not in ("hidden_size", "num_hidden_layers")]
    defs["distillation"] = _insert_after(distillation, "save_interval", [
        Arg("student_hidden_size", int, 512, "Student model hidden size", min=8),
        Arg("student_num_layers", int, 8, "Student model layers", min=1),
        Arg("teacher_hidden_size", int, 768, "Teacher model hidden size", min=8),
        Arg("teacher_num_layers", int, 16, "Teacher model layers", min=1),
    ]) + [
        Arg("from_student_weight", str, "full_sft", "Student base weight (prefix in weight_dir); none = random init"),
        Arg("from_teacher_weight", str, "full_sft", "Teacher weight (prefix in weight_dir)"),
        Arg("alpha", float, 0.5, "Weight of the CE loss; 1 - alpha weighs the distillation (KL) loss", min=0, max=1),
        Arg("temperature", float, 1.5, "Softmax temperature of the distillation loss", gt_zero=True),
        PACK,
    ]
    return defs


#: Upper bounds of every numeric option: generous for real runs, small enough that a typo cannot ask
#: for a model or a process count the machine cannot hold. Data workers are bounded by the CPUs.
UPPER = {
    "epochs": 10_000, "batch_size": 4096, "learning_rate": 1.0, "critic_learning_rate": 1.0,
    "num_workers": os.cpu_count() or 1, "accumulation_steps": 1024, "grad_clip": 1e4,
    "log_interval": 1_000_000, "save_interval": 1_000_000,
    "hidden_size": 8192, "num_hidden_layers": 128, "student_hidden_size": 8192, "student_num_layers": 128,
    "teacher_hidden_size": 8192, "teacher_num_layers": 128,
    "max_seq_len": 32768, "max_gen_len": 32768,  # the model's max_position_embeddings
    "beta": 1e3, "clip_epsilon": 10.0, "vf_coef": 1e3, "kl_coef": 1e3, "update_old_actor_freq": 1_000_000,
    "eval_holdout": 10_000_000, "eval_interval": 1_000_000, "eval_rows": 1_000_000,
    "num_generations": 256, "keep_checkpoints": 10_000, "rollout_groups": 1_000_000, "rollout_max_mb": 1e7, "temperature": 100.0,
    "top_k": 6400,  # the vocabulary size
}
#: What each non-numeric option holds, for the checks of names and paths.
KINDS = {
    "save_weight": "name", "lora_name": "name", "from_weight": "name", "from_student_weight": "name",
    "from_teacher_weight": "name",
    "data_path": "read", "weight_dir": "read", "reward_model_path": "read", "tokenizer_path": "read",
    "save_dir": "write", "run_dir": "write", "eval_data": "read",
}
#: MiniMind's attention heads: the hidden size splits into this many heads of an even size (RoPE).
ATTENTION_HEADS = 8


def _bounded(args):
    changes = {}
    for a in args:
        change = {}
        if a.type in (int, float) and a.choices is None and a.max is None and a.name in UPPER:
            change["max"] = UPPER[a.name]
        if a.name in KINDS:
            change["kind"] = KINDS[a.name]
        if change:
            changes[a.name] = change
    return _override(args, **changes)


_DEFINED = _definitions()
assert set(_DEFINED) == set(TRAIN_TYPES), "every training type, and only those, has options"
assert [k for k in TRAIN_TYPES if PACK in _DEFINED[k]] == list(PACK_TYPES), "--pack belongs to PACK_TYPES"
#: Every training type's options, in command-line order (the types in TRAIN_TYPES order).
ARGS: dict[str, list[Arg]] = {key: _bounded(_DEFINED[key]) for key in TRAIN_TYPES}
_unbounded = [(k, a.name) for k, args in ARGS.items() for a in args
              if a.type in (int, float) and a.choices is None and a.max is None]
assert not _unbounded, f"numeric options without an upper bound: {_unbounded}"


def cross_errors(train_type, values):
    """{option: message} for combinations the model cannot build, over typed `values` (missing or None
    options are skipped): every hidden size must split into the attention heads with an even head size."""
    errors = {}
    for name in ("hidden_size", "student_hidden_size", "teacher_hidden_size"):
        value = values.get(name)
        if isinstance(value, int) and value % (2 * ATTENTION_HEADS):
            errors[name] = message("field.head_multiple", multiple=2 * ATTENTION_HEADS, heads=ATTENTION_HEADS,
                                   got=value)
    if values.get("eval_data") and values.get("eval_holdout"):  # one held-out set: a file or the file's last rows
        errors["eval_holdout"] = message("field.eval_one_source")
    return errors


def help_key(train_type, name):
    """The language-table key of an option's help text: `help.<name>`, the text most types give the
    option, or `help.<type>.<name>` where this type's option means something else (PPO's learning rate)."""
    helps = [a.help for key in TRAIN_TYPES for a in ARGS[key] if a.name == name]
    common = max(helps, key=helps.count)  # the most frequent text; on a tie, the first type's
    own = next(a.help for a in ARGS[train_type] if a.name == name)
    return f"help.{name}" if own == common else f"help.{train_type}.{name}"


def help_texts():
    """Every option's English help text by its language-table key (see `help_key`): the dashboard's
    English table takes them from here, its other languages translate them under the same keys."""
    return {help_key(key, a.name): a.help for key in TRAIN_TYPES for a in ARGS[key]}


def _argparse_type(arg):
    """An argparse `type` that converts and checks bounds, so the CLI rejects what the dashboard rejects."""
    def convert(text):
        try:
            value = arg.type(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {arg.type.__name__}") from None
        problem = arg.check(value) if arg.choices is None else None  # argparse reports bad choices itself
        if problem:
            raise argparse.ArgumentTypeError(f"{text!r} {problem}")
        return value
    convert.__name__ = arg.type.__name__
    return convert


def build_parser(train_type):
    """The argparse parser of one training type."""
    if train_type not in ARGS:
        raise KeyError(f"unknown training type {train_type!r}; known: {', '.join(TRAIN_TYPES)}")
    parser = argparse.ArgumentParser(description=f"MiniMind {train_type} training")
    for arg in ARGS[train_type]:
        if arg.type is bool:
            parser.add_argument(f"--{arg.name}", action="store_true", help=arg.help)
        else:
            parser.add_argument(f"--{arg.name}", type=_argparse_type(arg), default=arg.default,
                                choices=arg.choices, help=arg.help)
    return parser
