"""Pin every training script's defaults to the upstream MiniMind values (DESIGN.md's table)."""
import sys

import pytest

from trainer.rules import args

COMMON = {"dtype": "bfloat16", "num_workers": 1, "grad_clip": 1.0, "use_moe": 0, "from_resume": 0,
          "use_wandb": False, "weight_dir": "../out", "device": args.AUTO_DEVICE,
          "run_dir": "",  # ours: where the structured records go (empty: the default folder)
          # ours: held-out evaluation, off (no file, no rows held out)
          "eval_data": "", "eval_holdout": 0, "eval_interval": 0, "eval_rows": 64,
          "seed": None,  # ours: the run's seed (None: upstream's fixed 42)
          "tokenizer_path": "../model", "keep_checkpoints": 0}  # ours: the bundled tokenizer, no step snapshots
MODEL = {"hidden_size": 512, "num_hidden_layers": 8}
RL_OWN = {"max_gen_len": 1536, "reasoning": 1, "reward_model_path": "../../internlm2-1_8b-reward",
          "rollout_groups": -1, "rollout_max_mb": 2048.0,  # ours: the rollout store
          # ours: sampling, defaulting to upstream's effective values (generate(temperature=0.8) gets
          # transformers' top-k 50 and top-p 1.0)
          "temperature": 0.8, "top_k": 50, "top_p": 1.0}


def row(save_dir, epochs, batch, lr, accum, log, save, seq, data, wandb, **own):
    return {**COMMON, "save_dir": save_dir, "epochs": epochs, "batch_size": batch, "learning_rate": lr,
            "accumulation_steps": accum, "log_interval": log, "save_interval": save, "max_seq_len": seq,
            "data_path": data, "wandb_project": f"MiniMind-{wandb}", **own}


EXPECTED = {
    "pretrain": row("../out", 1, 32, 5e-4, 8, 100, 100, 512, "../dataset/pretrain_hq.jsonl", "Pretrain",
                    save_weight="pretrain", from_weight="none", pack=0, **MODEL),
    "sft": row("../out", 2, 16, 5e-7, 1, 100, 100, 512, "../dataset/sft_mini_512.jsonl", "Full-SFT",
               save_weight="full_sft", from_weight="pretrain", pack=0, **MODEL),
    "lora": row("../out/lora", 50, 32, 1e-4, 1, 10, 1, 512, "../dataset/lora_identity.jsonl", "LoRA",
                lora_name="lora_identity", from_weight="full_sft", pack=0, **MODEL),
    "dpo": row("../out", 1, 4, 4e-8, 1, 100, 100, 1024, "../dataset/dpo.jsonl", "DPO",
               save_weight="dpo", from_weight="full_sft", beta=0.1, pack=0, **MODEL),
    "ppo": row("../out", 1, 2, 8e-8, 1, 1, 10, 66, "../dataset/rlaif-mini.jsonl", "PPO",
               save_weight="ppo_actor", critic_learning_rate=8e-8, clip_epsilon=0.1, vf_coef=0.5, kl_coef=0.02,
               update_old_actor_freq=4, **RL_OWN, **MODEL),
    "grpo": row("../out", 1, 2, 8e-8, 1, 1, 10, 66, "../dataset/rlaif-mini.jsonl", "GRPO",
                save_weight="grpo", beta=0.02, num_generations=8, **RL_OWN, **MODEL),
    "spo": row("../out", 1, 2, 1e-7, 4, 1, 10, 66, "../dataset/rlaif-mini.jsonl", "SPO",
               save_weight="spo", beta=0.02, **RL_OWN, **MODEL),
    "distill_reason": row("../out", 1, 8, 1e-6, 1, 100, 100, 1024, "../dataset/r1_mix_1024.jsonl",
                          "Reasoning-Distill", save_weight="reason", from_weight="dpo", pack=0, **MODEL),
    "distillation": row("../out", 6, 32, 5e-6, 1, 100, 100, 512, "../dataset/sft_mini_512.jsonl", "Distillation",
                        save_weight="full_dist", student_hidden_size=512, student_num_layers=8,
                        teacher_hidden_size=768, teacher_num_layers=16, from_student_weight="full_sft",
                        from_teacher_weight="full_sft", alpha=0.5, temperature=1.5, pack=0),
}


@pytest.mark.parametrize("train_type", args.TRAIN_TYPES)
def test_parser_defaults_match_upstream(train_type):
    parsed = vars(args.build_parser(train_type).parse_args([]))
    assert parsed == EXPECTED[train_type]


def test_rl_types_take_no_from_weight():
    for t in ("ppo", "grpo", "spo"):
        assert "from_weight" not in {a.name for a in args.ARGS[t]}


def test_type_specific_options_follow_the_seed_order():
    names = lambda t: [a.name for a in args.ARGS[t]]
    ours = ["rollout_groups", "rollout_max_mb", "temperature", "top_k", "top_p"]  # after upstream's options
    assert names("grpo")[-9:] == ["beta", "num_generations", "reasoning", "reward_model_path"] + ours
    assert names("spo")[-8:] == ["beta", "reasoning", "reward_model_path"] + ours
    assert names("ppo")[-7:] == ["update_old_actor_freq", "reward_model_path"] + ours


@pytest.mark.parametrize("argv, message", [
    (["--batch_size", "0"], "must be at least 1"),
    (["--learning_rate=-1e-4"], "must be greater than 0"),
    (["--epochs", "two"], "is not a valid int"),
    (["--use_moe", "2"], "invalid choice"),
    (["--temperature", "0"], "must be greater than 0"),
    (["--top_k=-1"], "must be at least 0"),
    (["--top_p", "1.5"], "must be at most 1"),
    (["--top_p", "0"], "must be greater than 0"),
])
def test_cli_rejects_bad_values(argv, message, capsys):
    train_type = "grpo" if argv[0].lstrip("-").split("=")[0] in args.SAMPLING else "pretrain"
    with pytest.raises(SystemExit):
        args.build_parser(train_type).parse_args(argv)
    assert message in capsys.readouterr().err


def test_cli_values_are_typed():
    parsed = args.build_parser("grpo").parse_args(["--beta", "0.5", "--num_generations", "4", "--use_wandb"])
    assert (parsed.beta, parsed.num_generations, parsed.use_wandb) == (0.5, 4, True)


def test_unknown_type_is_a_clear_error():
    with pytest.raises(KeyError, match="unknown training type"):
        args.build_parser("sft2")


def test_args_module_does_not_import_torch():
    import subprocess
    code = "import sys; import trainer.rules.args; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parse_args_resolves_the_auto_device_with_the_trainers_cuda_check(monkeypatch):
    """The rules never import torch: the trainer hands its CUDA check to parse_args."""
    from trainer.rules.parsing import parse_args
    monkeypatch.delenv("MINIMIND_WRITE_ROOTS", raising=False)
    assert parse_args("sft", [], cuda_available=lambda: True).device == "cuda:0"
    assert parse_args("sft", [], cuda_available=lambda: False).device == "cpu"
    assert parse_args("sft", ["--device", "cpu"]).device == "cpu"  # nothing to resolve
    with pytest.raises(TypeError, match="cuda_available"):
        parse_args("sft", [])
