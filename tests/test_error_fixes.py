"""Setup errors name the fix a user or an admin can apply: the missing-weight message of every trainer
suggests only options that trainer has (parsed here with its own parser), and a reward-model folder that
brings its own code is refused with the switch an admin sets (MINIMIND_TRUSTED_REWARD_MODELS), not
transformers' "pass trust_remote_code=True".

The trainers run in-process through their own `script_main` (the `ERROR: ...` line and exit status 1 of a
real run), before any training: no weight file exists in the weight folder.
"""
import importlib
import re
import signal
import sys

import pytest
from _reward_models import get_score_reward_model  # noqa: F401  (fixture)
from _trainer_helpers import DEMO, REPO

from trainer import trainer_utils as tu
from trainer.rl import reward_model
from trainer.rules import args as rule_args
from trainer.rules import roots, specs

SMALL = ["--device", "cpu", "--dtype", "float32", "--num_workers", "0"]
DATA = {"pretrain": "pretrain.jsonl", "sft": "sft.jsonl", "dpo": "dpo.jsonl", "rlaif": "rlaif.jsonl"}

# (training type, extra options, the weight file it looks for, the option its fix must name)
CASES = [
    ("pretrain", ["--from_weight", "pretrain"], "pretrain_64.pth", "from_weight"),
    ("sft", [], "pretrain_64.pth", "from_weight"),
    ("lora", [], "full_sft_64.pth", "from_weight"),
    ("dpo", [], "full_sft_64.pth", "from_weight"),
    ("ppo", ["--reward_model_path", "none"], "reason_64.pth", "reasoning"),
    ("grpo", ["--reward_model_path", "none"], "reason_64.pth", "reasoning"),
    ("spo", ["--reward_model_path", "none", "--reasoning", "0"], "full_sft_64.pth", "reasoning"),
    ("distill_reason", [], "dpo_64.pth", "from_weight"),
    ("distillation", ["--student_hidden_size", "64", "--student_num_layers", "2"], "full_sft_64.pth",
     "from_student_weight"),
    ("distillation", ["--from_student_weight", "none", "--student_hidden_size", "64", "--student_num_layers", "2",
                      "--teacher_hidden_size", "128", "--teacher_num_layers", "2"], "full_sft_128.pth",
     "from_teacher_weight"),
]


def run_script(train_type, argv, monkeypatch, capsys):
    """Run a training script's `main` as its command line would (in trainer/, through `script_main`):
    returns (exit status, stdout, stderr)."""
    module = importlib.import_module(f"trainer.{specs.spec(train_type).script[:-3]}")
    monkeypatch.chdir(REPO / "trainer")
    monkeypatch.setattr(sys, "argv", [specs.spec(train_type).script, *argv])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exit_info:
            tu.script_main(module.main)
    finally:
        signal.signal(signal.SIGTERM, previous)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def suggested_options(text):
    """The `--option VALUE` pairs a message suggests, as an argv list."""
    return [part for name, value in re.findall(r"--(\w+) ([^\s,;)]+)", text) for part in (f"--{name}", value)]


@pytest.mark.parametrize("train_type, extra, missing, option", CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_missing_weight_suggests_only_the_trainers_own_options(train_type, extra, missing, option, tmp_path,
                                                              monkeypatch, capsys):
    data = DEMO / DATA[specs.spec(train_type).data_kind]
    sizes = [] if train_type == "distillation" else ["--hidden_size", "64", "--num_hidden_layers", "2"]
    argv = [*SMALL, *sizes, "--data_path", str(data), "--weight_dir", str(tmp_path / "empty"),
            "--save_dir", str(tmp_path / "out"), *extra]
    status, out, err = run_script(train_type, argv, monkeypatch, capsys)
    errors = [line for line in err.splitlines() if line.strip()]
    assert status == 1 and len(errors) == 1 and errors[0].startswith("ERROR: weight file not found"), err
    assert str(tmp_path / "empty" / missing) in errors[0]
    suggestion = errors[0].split(");", 1)[1]
    flags = suggested_options(suggestion)
    assert f"--{option}" in flags and "--weight_dir" in flags, suggestion
    own = {a.name for a in rule_args.ARGS[train_type]}
    assert set(flags[0::2]) <= {f"--{name}" for name in own}, suggestion
    rule_args.build_parser(train_type).parse_args(flags)  # exits (status 2) on an option this trainer lacks
    assert "Epoch" not in out and not (tmp_path / "out").exists()


def test_an_untrusted_reward_model_with_its_own_code_names_the_admins_switch(get_score_reward_model,  # noqa: F811
                                                                            tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(roots.TRUSTED_CODE_ENV, raising=False)
    with pytest.raises(tu.SetupError) as refused:
        reward_model.load_reward_model(str(get_score_reward_model), "cpu")
    text = str(refused.value)
    assert roots.TRUSTED_CODE_ENV in text and "admin" in text and "trust_remote_code" not in text, text
    assert "auto_map in config.json" in text and "--reward_model_path none" in text
    # A GRPO run stops on it before any model is built, with the same words.
    argv = [*SMALL, "--hidden_size", "64", "--num_hidden_layers", "2", "--data_path", str(DEMO / "rlaif.jsonl"),
            "--weight_dir", str(tmp_path), "--save_dir", str(tmp_path / "out"),
            "--reward_model_path", str(get_score_reward_model)]
    status, out, err = run_script("grpo", argv, monkeypatch, capsys)
    assert status == 1 and err.startswith("ERROR: ") and roots.TRUSTED_CODE_ENV in err, err
    assert "Params" not in out
    # Allowed by the admin's switch, the folder loads.
    monkeypatch.setenv(roots.TRUSTED_CODE_ENV, str(get_score_reward_model))
    assert reward_model.load_reward_model(str(get_score_reward_model), "cpu").kind == "get_score"
