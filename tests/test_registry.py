"""The registry: every training type, its parameters, and defaults equal to the scripts' own."""

import pytest

from mmcore.base import i18n
from mmcore.train import train_types
from trainer.rules import args as trainer_args
from trainer.rules import specs

KEYS = ["pretrain", "sft", "lora", "dpo", "ppo", "grpo", "spo", "distill_reason", "distillation"]
LABELS = ["Pretrain", "SFT - Full", "SFT - LoRA", "RL - DPO", "RL - PPO", "RL - GRPO", "RL - SPO",
          "Reasoning distill", "Distillation"]
SHORT = ["Pretrain", "SFT", "LoRA", "DPO", "PPO", "GRPO", "SPO", "Reason", "Distill"]
RL_OWN = {"max_gen_len": "1536", "reasoning": "1", "reward_model_path": "../../internlm2-1_8b-reward"}

# DESIGN.md's table, as form strings: save_dir, save weight (or lora_name), epochs, batch_size,
# learning_rate, accumulation_steps, log_interval, save_interval, max_seq_len, data_path, from_weight
# (None = the type has no from_weight) and the type's own parameters.
def row(script, save_dir, weight, epochs, batch, lr, accum, log, save, seq, data, from_weight, **own):
    weight_name, weight_value = weight
    values = {"save_dir": save_dir, weight_name: weight_value, "epochs": epochs, "batch_size": batch,
              "learning_rate": lr, "accumulation_steps": accum, "log_interval": log, "save_interval": save,
              "max_seq_len": seq, "data_path": data}
    if from_weight is not None:
        values["from_weight"] = from_weight
    return script, values, own


ROLLOUT_STORE = {"rollout_groups": "-1", "rollout_max_mb": "2048.0",  # ours, after upstream's options
                 "temperature": "0.8", "top_k": "50", "top_p": "1.0"}  # sampling: upstream's effective values

DESIGN_TABLE = {
    "pretrain": row("train_pretrain.py", "../out", ("save_weight", "pretrain"), "1", "32", "0.0005", "8", "100",
                    "100", "512", "../dataset/pretrain_hq.jsonl", "none", pack="0"),
    "sft": row("train_full_sft.py", "../out", ("save_weight", "full_sft"), "2", "16", "5e-7", "1", "100", "100",
               "512", "../dataset/sft_mini_512.jsonl", "pretrain", pack="0"),
    "lora": row("train_lora.py", "../out/lora", ("lora_name", "lora_identity"), "50", "32", "0.0001", "1", "10",
                "1", "512", "../dataset/lora_identity.jsonl", "full_sft", pack="0"),
    "dpo": row("train_dpo.py", "../out", ("save_weight", "dpo"), "1", "4", "4e-8", "1", "100", "100", "1024",
               "../dataset/dpo.jsonl", "full_sft", beta="0.1", pack="0"),
    "ppo": row("train_ppo.py", "../out", ("save_weight", "ppo_actor"), "1", "2", "8e-8", "1", "1", "10", "66",
               "../dataset/rlaif-mini.jsonl", None, critic_learning_rate="8e-8", max_gen_len="1536",
               clip_epsilon="0.1", vf_coef="0.5", kl_coef="0.02", reasoning="1", update_old_actor_freq="4",
               reward_model_path="../../internlm2-1_8b-reward", **ROLLOUT_STORE),
    "grpo": row("train_grpo.py", "../out", ("save_weight", "grpo"), "1", "2", "8e-8", "1", "1", "10", "66",
                "../dataset/rlaif-mini.jsonl", None, max_gen_len="1536", beta="0.02", num_generations="8",
                reasoning="1", reward_model_path="../../internlm2-1_8b-reward", **ROLLOUT_STORE),
    "spo": row("train_spo.py", "../out", ("save_weight", "spo"), "1", "2", "1e-7", "4", "1", "10", "66",
               "../dataset/rlaif-mini.jsonl", None, max_gen_len="1536", beta="0.02", reasoning="1",
               reward_model_path="../../internlm2-1_8b-reward", **ROLLOUT_STORE),
    "distill_reason": row("train_distill_reason.py", "../out", ("save_weight", "reason"), "1", "8", "1e-6", "1",
                          "100", "100", "1024", "../dataset/r1_mix_1024.jsonl", "dpo", pack="0"),
    "distillation": row("train_distillation.py", "../out", ("save_weight", "full_dist"), "6", "32", "5e-6", "1",
                        "100", "100", "512", "../dataset/sft_mini_512.jsonl", None,
                        student_hidden_size="512", student_num_layers="8", teacher_hidden_size="768",
                        teacher_num_layers="16", from_student_weight="full_sft", from_teacher_weight="full_sft",
                        alpha="0.5", temperature="1.5", pack="0"),
}
WANDB = {"pretrain": "Pretrain", "sft": "Full-SFT", "lora": "LoRA", "dpo": "DPO", "ppo": "PPO", "grpo": "GRPO",
         "spo": "SPO", "distill_reason": "Reasoning-Distill", "distillation": "Distillation"}


def test_types_in_order_with_labels_short_names_and_scripts():
    assert list(train_types.TYPES) == KEYS
    assert [t.label for t in train_types.TYPES.values()] == LABELS
    assert [t.short for t in train_types.TYPES.values()] == SHORT
    for key, t in train_types.TYPES.items():
        assert t.key == key
        assert t.script == DESIGN_TABLE[key][0] == specs.SPECS[key].script


@pytest.mark.parametrize("key", KEYS)
def test_registry_defaults_equal_the_scripts_parsed_defaults(key):
    """For every parameter: the form default, parsed back, is what the script's parser yields with no argv."""
    parsed = vars(trainer_args.build_parser(key).parse_args([]))
    t = train_types.TYPES[key]
    shown = set(t.names) - {"train_monitor"}
    # The form covers the script's options exactly; --use_wandb is behind the monitor choice.
    assert shown | {"use_wandb"} == set(parsed)
    for p in t.params:
        if p.name == "train_monitor":
            assert p.default == "none" and parsed["use_wandb"] is False
            continue
        assert p.default == parsed[p.name], p.name
        assert type(p.default) is type(parsed[p.name]), p.name
        text = train_types.defaults(key)[p.name]
        assert text == p.default_text
        if p.default is None:  # an option of ours left out of the command unless given (--seed)
            assert text == "", (p.name, text)
            continue
        assert p.type(text) == parsed[p.name], (p.name, text)


@pytest.mark.parametrize("key", KEYS)
def test_design_table(key):
    script, common, own = DESIGN_TABLE[key]
    d = train_types.defaults(key)
    for name, value in {**common, **own}.items():
        assert d[name] == value, name
    assert d["dtype"] == "bfloat16" and d["num_workers"] == "1" and d["grad_clip"] == "1.0"
    assert d["use_moe"] == "0" and d["from_resume"] == "0" and d["weight_dir"] == "../out"
    assert d["device"] == "auto" and d["train_monitor"] == "none"
    assert d["wandb_project"] == f"MiniMind-{WANDB[key]}"
    if key == "distillation":
        assert "hidden_size" not in d and "num_hidden_layers" not in d
    else:
        assert d["hidden_size"] == "512" and d["num_hidden_layers"] == "8"
    # Own parameters are exactly the type_specific group, in args.py order, after the common ones.
    groups = train_types.params_by_group(key)
    assert [p.name for p in groups["type_specific"]] == list(own)
    if own:
        assert list(d)[-len(own):] == list(own)


def test_grpo_seed_values():
    d = train_types.defaults("grpo")
    seed = {"save_dir": "../out", "save_weight": "grpo", "epochs": "1", "batch_size": "2", "learning_rate": "8e-8",
            "data_path": "../dataset/rlaif-mini.jsonl", "log_interval": "1", "save_interval": "10",
            "hidden_size": "512", "num_hidden_layers": "8", "max_seq_len": "66", "use_moe": "0",
            "beta": "0.02", "num_generations": "8", "reasoning": "1",
            "reward_model_path": "../../internlm2-1_8b-reward"}
    assert {k: d[k] for k in seed} == seed
    assert [p.name for p in train_types.params_by_group("grpo")["type_specific"]] == [
        "max_gen_len", "beta", "num_generations", "reasoning", "reward_model_path", *ROLLOUT_STORE]


def test_spo_seed_values():
    d = train_types.defaults("spo")
    seed = {"save_dir": "../out", "save_weight": "spo", "epochs": "1", "batch_size": "2", "learning_rate": "1e-7",
            "data_path": "../dataset/rlaif-mini.jsonl", "log_interval": "1", "save_interval": "10",
            "hidden_size": "512", "num_hidden_layers": "8", "max_seq_len": "66", "use_moe": "0",
            "beta": "0.02", "reasoning": "1", "reward_model_path": "../../internlm2-1_8b-reward"}
    assert {k: d[k] for k in seed} == seed
    assert "num_generations" not in d


def test_what_each_type_shows():
    for key in KEYS:
        names = train_types.TYPES[key].names
        assert ("lora_name" in names) == (key == "lora")
        assert ("save_weight" in names) == (key != "lora")
        assert ("from_weight" in names) == (key in ("pretrain", "sft", "lora", "dpo", "distill_reason"))
        assert "use_wandb" not in names
        assert "train_monitor" in names and "wandb_project" in names and "device" in names
    own = {key: {p.name for p in train_types.params_by_group(key)["type_specific"]} for key in KEYS}
    # ours: packing, off by default, for the types where it is exact (pretrain: by design not quite)
    assert own["sft"] == own["lora"] == own["distill_reason"] == own["pretrain"] == {"pack"}
    assert own["dpo"] == {"beta", "pack"}
    assert "clip_epsilon" in own["ppo"] and "beta" not in own["ppo"]
    assert "num_generations" in own["grpo"] and "num_generations" not in own["spo"]


def test_param_metadata():
    lr = train_types.param("grpo", "learning_rate")
    assert (lr.type, lr.group, lr.widget, lr.gt_zero) == (float, "training", "number", True)
    assert lr.help and lr.label == "Learning rate"
    epochs = train_types.param("sft", "epochs")
    assert (epochs.type, epochs.min, epochs.max, epochs.widget) == (int, 1, 10_000, "number")
    dtype = train_types.param("sft", "dtype")
    assert dtype.widget == "select" and dtype.choices == ("bfloat16", "float16", "float32")
    assert train_types.param("grpo", "reasoning").choices == (0, 1)
    assert train_types.param("grpo", "reasoning").widget == "select"
    assert train_types.param("grpo", "num_generations").min == 2
    assert train_types.param("distillation", "alpha").max == 1
    assert (train_types.param("sft", "data_path").widget, train_types.param("sft", "data_path").required) == ("text", True)
    assert train_types.param("sft", "save_dir").required and not train_types.param("sft", "from_weight").required
    monitor = train_types.param("ppo", "train_monitor")
    assert (monitor.group, monitor.widget, monitor.choices, monitor.default) == (
        "monitoring", "select", ("none", "wandb", "swanlab"), "none")
    assert (train_types.param("ppo", "wandb_project").group, train_types.param("ppo", "wandb_project").widget) == (
        "monitoring", "text")
    assert train_types.param("ppo", "device").group == "devices"
    assert train_types.param("sft", "hidden_size").group == "model"
    assert train_types.param("sft", "from_weight").group == "save_load"
    for t in train_types.TYPES.values():
        for p in t.params:
            assert p.group in train_types.GROUPS and p.widget in train_types.WIDGETS and p.label and p.help


def test_check_reuses_the_scripts_rules():
    assert train_types.param("grpo", "num_generations").check(1) == "must be at least 2"
    assert train_types.param("grpo", "learning_rate").check(0.0) == "must be greater than 0"
    assert train_types.param("grpo", "reasoning").check(2) == "must be one of 0, 1"
    assert train_types.param("grpo", "num_generations").check(8) is None


def test_params_by_group_lists_every_group_in_order():
    groups = train_types.params_by_group("pretrain")
    assert list(groups) == list(train_types.GROUPS)
    assert [p.name for p in groups["type_specific"]] == ["pack"]
    assert [p.name for p in groups["monitoring"]] == ["train_monitor", "wandb_project", "run_dir", "eval_data",
                                                      "eval_holdout", "eval_interval", "eval_rows"]
    assert sum(len(v) for v in groups.values()) == len(train_types.TYPES["pretrain"].params)


@pytest.mark.parametrize("value, text", [
    (0.02, "0.02"), (8e-8, "8e-8"), (1e-7, "1e-7"), (5e-4, "0.0005"), (1.0, "1.0"), (1.5, "1.5"),
    (1e20, "1e+20"), (8, "8"), (0, "0"), (True, "1"), (False, "0"), (None, ""), ("../out", "../out")])
def test_format_value(value, text):
    assert train_types.format_value(value) == text
    if isinstance(value, float):
        assert float(text) == value


def test_unknown_names_are_clear_errors():
    with pytest.raises(KeyError, match="unknown training type 'rlhf'"):
        train_types.defaults("rlhf")
    with pytest.raises(KeyError, match="has no parameter 'from_weight'"):
        train_types.param("grpo", "from_weight")


def test_field_labels_have_one_table():
    """The labels are the language tables' (param.*, group.*, the Train page's train.*), nowhere else."""
    assert not hasattr(train_types, "FIELD_LABELS") and not hasattr(train_types, "GROUP_LABELS")
    assert train_types.field_label("learning_rate") == "Learning rate"
    assert train_types.field_label("gpus") == i18n.table("en")["train.gpus"] == "GPUs"
    assert train_types.field_label("job_name") == "Job name"
    assert train_types.field_label("beta", "grpo") == train_types.param("grpo", "beta").label == "Beta"
    assert train_types.field_label("no_such_field") == "no_such_field"
    assert train_types.group_label("model", "sft") == "Model"
    assert train_types.group_label("type_specific", "grpo") == "GRPO parameters"
    with i18n.language("zh"):
        assert train_types.param("sft", "learning_rate").label == i18n.table("zh")["param.learning_rate"] == "学习率"
        assert train_types.group_label("type_specific", "grpo") == i18n.t("group.type_specific", type="GRPO")
    for key, t in train_types.TYPES.items():  # type labels are the specs' own
        assert (t.label, t.short, t.script) == (specs.SPECS[key].label, specs.SPECS[key].short, specs.SPECS[key].script)


def argparse_helps(train_type):
    """{option: help} as the script's own parser shows it (`--help`)."""
    return {a.dest: a.help for a in trainer_args.build_parser(train_type)._actions if a.dest != "help"}


@pytest.mark.parametrize("key", KEYS)
def test_every_parameter_has_a_label_and_help_in_each_language_and_the_english_help_is_the_scripts(key):
    helps = argparse_helps(key)
    for p in train_types.TYPES[key].params:
        for lang in i18n.LANGUAGES:
            with i18n.language(lang):
                label, help_text = train_types.field_label(p.name, key), train_types.param_help(key, p.name)
            assert label.strip() and label != p.name, (lang, key, p.name)
            assert help_text.strip() and not help_text.startswith("help."), (lang, key, p.name)
        with i18n.language("en"):
            assert train_types.param_help(key, p.name) == p.help == helps.get(p.name, p.help), (key, p.name)
    for name, text in helps.items():  # every option of the script, shown as a field or not (--use_wandb)
        help_key = trainer_args.help_key(key, name)
        with i18n.language("en"):
            assert i18n.t(help_key) == text, (key, name)
        assert i18n.file_table("zh")[help_key].strip(), (key, name)
    assert not i18n.missing


def test_the_english_help_texts_and_check_messages_are_not_copied_into_en_json():
    """Their one place is trainer/rules (args.py's options, messages.py's templates); en.json keeps
    only the dashboard's own texts, and zh.json translates every one of them."""
    rules = i18n.rules_english()
    assert not set(rules) & set(i18n.file_table("en"))
    assert set(rules) <= set(i18n.file_table("zh"))
    assert {k for k in i18n.table("en") if k.startswith("help.")} == {
        trainer_args.help_key(key, a.name) for key in KEYS for a in trainer_args.ARGS[key]} | {"help.train_monitor"}


def test_one_list_of_training_types():
    """args.TRAIN_TYPES gives the order; the options, the specs and the forms follow it."""
    assert trainer_args.TRAIN_TYPES == tuple(KEYS)
    assert tuple(trainer_args.ARGS) == tuple(specs.SPECS) == tuple(train_types.TYPES) == trainer_args.TRAIN_TYPES
