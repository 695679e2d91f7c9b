"""Form values -> training command: argv, cwd, env and validation messages."""
import shlex
import sys
from pathlib import Path

import pytest

from mmcore.base.paths import TRAINER_DIR
from mmcore.train import commandline, train_types
from mmcore.train.commandline import ValidationError, build_argv, build_command, validate
from trainer.rules import args as trainer_args

SEED_GRPO = "--beta 0.02 --num_generations 8 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward"
SEED_SPO = "--beta 0.02 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward"
# ours, after upstream's options: the rollout store, then sampling (upstream's effective values)
ROLLOUT_STORE = "--rollout_groups -1 --rollout_max_mb 2048.0 --temperature 0.8 --top_k 50 --top_p 1.0"


def form(train_type, **changes):
    """What the train page submits: the defaults, then the user's edits."""
    return {**train_types.defaults(train_type), "device": "cpu", **changes}


def flags(argv):
    """--name -> value (True for a bare flag) of a python-launched argv."""
    out, i = {}, 2
    while i < len(argv):
        name = argv[i][2:]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[name] = argv[i + 1]
            i += 2
        else:
            out[name] = True
            i += 1
    return out


def test_seed_grpo_command_line():
    argv = build_argv("grpo", form("grpo"))
    assert argv[:2] == [sys.executable, "../trainer/train_grpo.py"]
    assert SEED_GRPO in shlex.join(argv)
    assert argv == [sys.executable, "../trainer/train_grpo.py",
                    "--save_dir", "../out", "--save_weight", "grpo", "--epochs", "1", "--batch_size", "2",
                    "--learning_rate", "8e-8", "--device", "cpu", "--dtype", "bfloat16", "--num_workers", "1",
                    "--accumulation_steps", "1", "--grad_clip", "1.0", "--log_interval", "1", "--save_interval", "10",
                    "--hidden_size", "512", "--num_hidden_layers", "8", "--max_seq_len", "66", "--use_moe", "0",
                    "--data_path", "../dataset/rlaif-mini.jsonl", "--weight_dir", "../out", "--tokenizer_path", "../model", "--keep_checkpoints", "0", "--from_resume", "0",
                    "--max_gen_len", "1536", *SEED_GRPO.split(), *ROLLOUT_STORE.split()]


def test_seed_spo_command_line():
    argv = build_argv("spo", form("spo"))
    assert argv[1] == "../trainer/train_spo.py"
    assert shlex.join(argv).endswith("--max_gen_len 1536 " + SEED_SPO + " " + ROLLOUT_STORE)
    assert "--num_generations" not in argv and "--from_weight" not in argv
    assert flags(argv)["learning_rate"] == "1e-7" and flags(argv)["accumulation_steps"] == "4"


@pytest.mark.parametrize("train_type", list(train_types.TYPES))
def test_default_command_parses_back_to_the_scripts_defaults(train_type):
    """What the dashboard passes is exactly what the script would have used anyway."""
    argv = build_argv(train_type, form(train_type))
    parsed = trainer_args.build_parser(train_type).parse_args(argv[2:])
    expected = trainer_args.build_parser(train_type).parse_args([])
    expected.device = "cpu"
    assert parsed == expected


def test_dpo_regression():
    argv = build_argv("dpo", form("dpo"))
    assert "--beta 0.1" in shlex.join(argv) and "--from_weight full_sft" in shlex.join(argv)
    assert argv[1] == "../trainer/train_dpo.py"


def test_ppo_regression():
    values = form("ppo", from_weight="full_sft")  # left over from another type: must not be passed
    f = flags(build_argv("ppo", values))
    assert "from_weight" not in f
    assert {k: f[k] for k in ("clip_epsilon", "vf_coef", "kl_coef", "reasoning", "update_old_actor_freq",
                              "reward_model_path", "critic_learning_rate")} == {
        "clip_epsilon": "0.1", "vf_coef": "0.5", "kl_coef": "0.02", "reasoning": "1", "update_old_actor_freq": "4",
        "reward_model_path": "../../internlm2-1_8b-reward", "critic_learning_rate": "8e-8"}


@pytest.mark.parametrize("train_type", ["ppo", "grpo", "spo"])
def test_from_weight_never_for_rl(train_type):
    assert "--from_weight" not in build_argv(train_type, form(train_type, from_weight="dpo"))


def test_lora_and_distillation_flags():
    f = flags(build_argv("lora", form("lora")))
    assert f["lora_name"] == "lora_identity" and f["from_weight"] == "full_sft" and "save_weight" not in f
    argv = build_argv("distillation", form("distillation"))
    assert shlex.join(argv).endswith(
        "--student_hidden_size 512 --student_num_layers 8 --teacher_hidden_size 768 --teacher_num_layers 16 "
        "--from_student_weight full_sft --from_teacher_weight full_sft --alpha 0.5 --temperature 1.5 --pack 0")


def test_empty_means_the_scripts_default():
    argv = build_argv("grpo", form("grpo", beta="", num_generations=" ", epochs="", device=""))
    assert "--beta" not in argv and "--num_generations" not in argv and "--epochs" not in argv
    assert "--device" not in argv  # the script picks cuda:0 or cpu itself
    assert "--reasoning" in argv
    assert "--device" not in build_argv("grpo", form("grpo", device="auto"))


def test_user_values_are_passed_in_canonical_form():
    f = flags(build_argv("grpo", form("grpo", beta="0.05", learning_rate="1E-06", num_generations="04",
                                      data_path="../dataset/my rl set.jsonl")))
    assert (f["beta"], f["learning_rate"], f["num_generations"]) == ("0.05", "1e-6", "4")
    assert f["data_path"] == "../dataset/my rl set.jsonl"  # one argv item, spaces and all


def test_widget_values_that_are_not_strings():
    f = flags(build_argv("grpo", form("grpo", epochs=3, beta=0.04, reasoning=0)))
    assert (f["epochs"], f["beta"], f["reasoning"]) == ("3", "0.04", "0")


def test_single_gpu_keeps_its_index():
    cmd = build_command("grpo", form("grpo", device="cuda:3"))
    assert cmd.argv[0] == sys.executable
    assert flags(cmd.argv)["device"] == "cuda:3"
    assert cmd.env == {}
    assert cmd.cwd == str(TRAINER_DIR)
    # One id in `gpus` without a device means that GPU.
    assert flags(build_argv("grpo", form("grpo", device="", gpus=[2])))["device"] == "cuda:2"
    assert flags(build_argv("grpo", form("grpo", device="", gpus=2)))["device"] == "cuda:2"
    assert flags(build_argv("grpo", form("grpo", device="cuda:01")))["device"] == "cuda:1"


def test_several_gpus_use_torchrun():
    cmd = build_command("sft", form("sft", device="cuda:0", gpus=[1, 3]))
    launcher = commandline.torchrun_argv()
    assert cmd.argv[:len(launcher)] == launcher
    assert Path(launcher[0]).name == "torchrun" or launcher[1:] == ["-m", "torch.distributed.run"]
    assert cmd.argv[len(launcher):len(launcher) + 3] == ["--nproc_per_node", "2", "../trainer/train_full_sft.py"]
    assert "--device" not in cmd.argv
    assert cmd.env == {"CUDA_VISIBLE_DEVICES": "1,3", "PET_STANDALONE": "1"}
    assert cmd.display.startswith("CUDA_VISIBLE_DEVICES=1,3 PET_STANDALONE=1 ")
    assert build_command("sft", form("sft", gpus="0, 1,2")).env["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    assert "--nproc_per_node 3" in build_command("sft", form("sft", gpus="0, 1,2")).display


def test_torchrun_is_the_one_beside_this_python():
    beside = Path(sys.executable).with_name("torchrun")
    if beside.is_file():
        assert commandline.torchrun_argv() == [str(beside)]


@pytest.mark.parametrize("monitor, expected", [
    ("none", []), ("", []), ("wandb", ["--use_wandb", "--wandb_project", "MiniMind-GRPO"]),
    ("swanlab", ["--use_wandb"])])
def test_monitor_mapping(monitor, expected):
    argv = build_argv("grpo", form("grpo", train_monitor=monitor))
    got = [a for a in argv if a in ("--use_wandb", "--wandb_project", "MiniMind-GRPO")]
    assert got == expected


def test_wandb_with_own_or_empty_project():
    f = flags(build_argv("dpo", form("dpo", train_monitor="wandb", wandb_project="team-dpo")))
    assert f["use_wandb"] is True and f["wandb_project"] == "team-dpo"
    f = flags(build_argv("dpo", form("dpo", train_monitor="wandb", wandb_project="")))
    assert f["use_wandb"] is True and "wandb_project" not in f


def test_command_is_an_argv_list_and_display_quotes_it():
    cmd = build_command("sft", form("sft", save_dir="../out/my run; rm -rf ~"))
    assert isinstance(cmd.argv, list) and all(isinstance(a, str) for a in cmd.argv)
    assert "../out/my run; rm -rf ~" in cmd.argv
    assert shlex.split(cmd.display) == cmd.argv


def test_validate_returns_typed_values():
    typed = validate("grpo", form("grpo", beta="", device="cuda:1"))
    assert typed["epochs"] == 1 and typed["learning_rate"] == 8e-8 and typed["beta"] is None
    assert typed["reward_model_path"] == "../../internlm2-1_8b-reward"
    assert (typed["device"], typed["gpus"], typed["train_monitor"]) == ("cuda:1", [], "none")


def test_every_problem_at_once():
    values = form("grpo", epochs="two", learning_rate="fast", batch_size="0", num_generations="1",
                  beta="-0.1", reasoning="2", dtype="fp8", data_path="", save_dir="  ", grad_clip="0",
                  max_gen_len="1.5", reward_model_path="--evil", device="gpu0", gpus="0,x", train_monitor="tb")
    with pytest.raises(ValidationError) as caught:
        build_argv("grpo", values)
    errors = caught.value.errors
    assert errors == {
        "epochs": "must be a whole number, got 'two'",
        "learning_rate": "must be a number, got 'fast'",
        "batch_size": "must be at least 1",
        "num_generations": "must be at least 2",
        "beta": "must be at least 0",
        "reasoning": "must be one of 0, 1",
        "dtype": "must be one of bfloat16, float16, float32",
        "data_path": "is required",
        "save_dir": "is required",
        "grad_clip": "must be greater than 0",
        "max_gen_len": "must be a whole number, got '1.5'",
        "reward_model_path": "must not start with '-'",
        "device": "must be cpu or cuda:N (N = GPU index), got 'gpu0'",
        "gpus": "must be GPU ids 0, 1, ..., got 'x'",
        "train_monitor": "must be one of none, wandb, swanlab",
    }
    assert isinstance(caught.value, ValueError)
    assert "epochs: must be a whole number" in str(caught.value)


def test_more_validation_kinds():
    with pytest.raises(ValidationError) as caught:
        validate("distillation", form("distillation", alpha="1.5", temperature="nan", gpus=[0, 0],
                                      wandb_project="a\nb"))
    with pytest.raises(ValidationError) as unicode_digit:
        validate("sft", form("sft", gpus="0,\u00b2"))
    assert unicode_digit.value.errors == {"gpus": "must be GPU ids 0, 1, ..., got '\u00b2'"}
    assert caught.value.errors == {"alpha": "must be at most 1", "temperature": "must be a finite number, got 'nan'",
                                   "gpus": "must not list a GPU twice", "wandb_project": "must be a single line"}


def test_missing_keys_behave_like_empty_fields():
    with pytest.raises(ValidationError) as caught:
        validate("pretrain", {})
    assert caught.value.errors == {"save_dir": "is required", "data_path": "is required"}
    argv = build_argv("pretrain", {"save_dir": "../out", "data_path": "../dataset/pretrain_hq.jsonl"})
    assert argv == [sys.executable, "../trainer/train_pretrain.py", "--save_dir", "../out",
                    "--data_path", "../dataset/pretrain_hq.jsonl"]


def test_unknown_type():
    with pytest.raises(KeyError, match="unknown training type"):
        build_argv("rlhf", {})


def test_held_out_options_go_on_the_command_line_only_when_evaluating():
    plain = build_argv("sft", form("sft"))
    assert not any(a.startswith("--eval_") for a in plain)
    held = build_argv("sft", form("sft", eval_holdout="8", eval_interval="5"))
    assert held[held.index("--eval_holdout") + 1] == "8" and held[held.index("--eval_interval") + 1] == "5"
    assert held[held.index("--eval_rows") + 1] == "64" and "--eval_data" not in held
