"""What each training type is, beside its options in `args.py`: torch-free, read by the trainers and the dashboard.

A `TypeSpec` holds the facts of one training type that are not command-line options: its script, its
data format, whether it is RL, its label, and the rules that name the files it reads and writes
(MiniMind's conventions: `{name}_{hidden}[_moe].pth` weights, `{name}_{hidden}[_moe]_resume.pth`
resume state). The trainers name their files with these functions and the dashboard's preflight
checks the same names, so the two can never disagree.

`values` below is a mapping of option name -> typed value with every option of the type present
(the script's default where the user gave none), e.g. `vars(args)` in a trainer.
"""
from dataclasses import dataclass

from trainer.rules.args import ARGS, TRAIN_TYPES

#: Training types that sample responses and score them with rewards.
RL_TYPES = ("ppo", "grpo", "spo")

#: Where resume state lives, relative to the trainers' working directory (trainer/).
CHECKPOINT_DIR = "../checkpoints"

#: The file a reward model folder must hold (a transformers model folder).
REWARD_MODEL_CONFIG = "config.json"
#: Reasoning distillation weighs the tokens of its four tags this many times more in the loss (as upstream):
#: its loss reads far above SFT's (the dashboard says so beside its charts).
REASON_TAG_WEIGHT = 10.0


def weight_file(name, hidden_size, use_moe=False):
    """`{name}_{hidden_size}[_moe].pth`, the MiniMind weight-file convention."""
    return f"{name}_{hidden_size}{'_moe' if use_moe else ''}.pth"


def resume_file(name, hidden_size, use_moe=False):
    """`{name}_{hidden_size}[_moe]_resume.pth`, the resume state's file in ../checkpoints."""
    return f"{name}_{hidden_size}{'_moe' if use_moe else ''}_resume.pth"


def rl_base_weight(reasoning):
    """PPO/GRPO/SPO start from the reasoning model (reasoning=1) or from the full SFT model."""
    return "reason" if reasoning else "full_sft"


def critic_weight_name(save_weight):
    """The critic's file prefix beside the actor's: `ppo_actor` -> `ppo_critic`, else `{save_weight}_critic`."""
    return save_weight.replace("actor", "critic") if "actor" in save_weight else f"{save_weight}_critic"


@dataclass(frozen=True)
class BaseWeight:
    """A weight file a type loads before training: `{weight_dir}/{weight_file(prefix, hidden_size, moe)}`."""
    prefix: str
    hidden_size: int
    why: str  # e.g. "from_weight=pretrain", "reasoning=1 starts from reason", "teacher: ..."


@dataclass(frozen=True)
class TypeSpec:
    key: str
    label: str  # the seed's label, e.g. "RL - GRPO"
    short: str  # for lists and tables, e.g. "GRPO"
    script: str  # file name in trainer/
    data_kind: str  # "pretrain", "sft", "dpo" or "rlaif" (dataset.formats)

    @property
    def rl(self):
        return self.key in RL_TYPES

    @property
    def uses_reward_model(self):
        return self.key in RL_TYPES

    def reward_model_path(self, values):
        """The reward model folder a run loads, or None: rule rewards only, or a type without rewards.

        `reward_model_path` "none" (in any case) means no reward model, as the trainers read it.
        """
        if not self.uses_reward_model:
            return None
        path = str(values["reward_model_path"]).strip()
        return None if path.lower() == "none" else path

    @property
    def lora(self):
        return self.key == "lora"

    def output_name(self, values):
        """The prefix of the files this type writes: `lora_name` for LoRA, else `save_weight`."""
        return values["lora_name"] if self.lora else values["save_weight"]

    def model_size(self, values):
        """(hidden_size, num_hidden_layers) of the model that is trained and saved (the student for distillation)."""
        if self.key == "distillation":
            return values["student_hidden_size"], values["student_num_layers"]
        return values["hidden_size"], values["num_hidden_layers"]

    def weight_files(self, values):
        """File names (inside save_dir) that a run writes: the weights, plus PPO's critic."""
        hidden, _ = self.model_size(values)
        moe = bool(values["use_moe"])
        name = self.output_name(values)
        if self.lora:
            return [f"{name}_{hidden}.pth"]  # adapters only; upstream names them without the MoE suffix
        files = [weight_file(name, hidden, moe)]
        if self.key == "ppo":
            files.append(weight_file(critic_weight_name(name), hidden, moe))
        return files

    def resume_file(self, values):
        """File name (inside ../checkpoints) of this run's resume state."""
        hidden, _ = self.model_size(values)
        return resume_file(self.output_name(values), hidden, bool(values["use_moe"]))

    def base_weights(self, values):
        """(list of BaseWeight the run loads, list of problems with the choice itself).

        The problems are rule violations found without touching the disk, e.g. LoRA from `none`.
        """
        needed, problems = [], []
        if self.rl:
            prefix = rl_base_weight(values["reasoning"])
            needed.append(BaseWeight(prefix, values["hidden_size"], f"reasoning={values['reasoning']} starts from {prefix}"))
        elif self.key == "distillation":
            student, teacher = values["from_student_weight"], values["from_teacher_weight"]
            if student != "none":
                needed.append(BaseWeight(student, values["student_hidden_size"], f"student: from_student_weight={student}"))
            if teacher == "none":
                problems.append("Distillation needs a teacher: from_teacher_weight cannot be none.")
            else:
                needed.append(BaseWeight(teacher, values["teacher_hidden_size"], f"teacher: from_teacher_weight={teacher}"))
        else:
            start = values["from_weight"]
            if self.lora and start == "none":
                problems.append("LoRA trains on top of a base model: from_weight cannot be none (e.g. full_sft).")
            elif start != "none":
                needed.append(BaseWeight(start, values["hidden_size"], f"from_weight={start}"))
        return needed, problems

    def defaults(self):
        """Every option's default: {name: typed value}."""
        return {a.name: a.default for a in ARGS[self.key]}


# Each type's facts beside its options: label, short name, script, data kind. The order of the types
# is args.TRAIN_TYPES's, not this table's.
_FACTS = {
    "pretrain": ("Pretrain", "Pretrain", "train_pretrain.py", "pretrain"),
    "sft": ("SFT - Full", "SFT", "train_full_sft.py", "sft"),
    "lora": ("SFT - LoRA", "LoRA", "train_lora.py", "sft"),
    "dpo": ("RL - DPO", "DPO", "train_dpo.py", "dpo"),
    "ppo": ("RL - PPO", "PPO", "train_ppo.py", "rlaif"),
    "grpo": ("RL - GRPO", "GRPO", "train_grpo.py", "rlaif"),
    "spo": ("RL - SPO", "SPO", "train_spo.py", "rlaif"),
    "distill_reason": ("Reasoning distill", "Reason", "train_distill_reason.py", "sft"),
    "distillation": ("Distillation", "Distill", "train_distillation.py", "sft"),
}
assert set(_FACTS) == set(TRAIN_TYPES), "specs.py and args.py must describe the same training types"

#: key -> TypeSpec, in args.TRAIN_TYPES order.
SPECS = {key: TypeSpec(key, *_FACTS[key]) for key in TRAIN_TYPES}


def spec(train_type):
    """The TypeSpec of a key, with a clear error for an unknown one."""
    try:
        return SPECS[train_type]
    except KeyError:
        raise KeyError(f"unknown training type {train_type!r}; known: {', '.join(SPECS)}") from None
