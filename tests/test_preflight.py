"""Preflight: the file-system and device checks before a launch, one function per concern."""
import pytest
from test_command import form

from mmcore.base.paths import ROOT
from mmcore.train import commandline, preflight, train_types

# A temporary repository layout: <tmp>/trainer is the jobs' working directory.


GOOD = {
    "pretrain": '{"text": "hello"}\n',
    "sft": '{"conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n',
    "dpo": '{"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "good"}], '
           '"rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "bad"}]}\n',
    "rlaif": '{"conversations": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}\n',
}
KIND = {"pretrain": "pretrain", "sft": "sft", "lora": "sft", "distillation": "sft", "distill_reason": "sft",
        "dpo": "dpo", "ppo": "rlaif", "grpo": "rlaif", "spo": "rlaif"}


@pytest.fixture
def repo(tmp_path):
    """A repository layout with trainer/, dataset/, out/ and model/ (the tokenizer)."""
    for folder in ("trainer", "dataset", "out"):
        (tmp_path / folder).mkdir()
    (tmp_path / "model").symlink_to(ROOT / "model")
    return tmp_path


def ready(repo, train_type, **changes):
    """Form values for `train_type` whose data, base weights and reward model all exist under `repo`."""
    data = repo / "dataset" / "data.jsonl"
    data.write_text(GOOD[KIND[train_type]] * 3)
    values = form(train_type, **{"data_path": "../dataset/data.jsonl", "hidden_size": "64", **changes})
    for prefix in ("pretrain", "full_sft", "dpo", "reason"):
        for hidden in (64, 512, 768):
            (repo / "out" / f"{prefix}_{hidden}.pth").write_bytes(b"weights")
    if "reward_model_path" in values and "reward_model_path" not in changes:
        reward = repo / "reward"
        reward.mkdir(exist_ok=True)
        (reward / "config.json").write_text("{}")
        values["reward_model_path"] = "../reward"
    return values


@pytest.mark.parametrize("train_type", list(train_types.TYPES))
def test_preflight_passes_when_everything_is_there(repo, train_type):
    assert preflight.run(train_type, ready(repo, train_type), 0, trainer_dir=repo / "trainer") == []
    assert not (repo / "checkpoints").exists()  # preflight checks, it does not create


def test_preflight_reports_invalid_values(repo):
    problems = preflight.run("grpo", ready(repo, "grpo", epochs="x", num_generations="1", data_path=""),
                                 0, trainer_dir=repo / "trainer")
    assert problems == ["Epochs (epochs) must be a whole number, got 'x'.",
                        "Data file (data_path) is required.",
                        "Generations per prompt (num_generations) must be at least 2."]


def test_preflight_data_missing_or_in_the_wrong_format(repo):
    trainer = repo / "trainer"
    problems = preflight.run("sft", ready(repo, "sft", data_path="../dataset/nope.jsonl"), 0, trainer_dir=trainer)
    assert problems == [f"Data file not found: {repo / 'dataset' / 'nope.jsonl'} (data_path "
                        f"'../dataset/nope.jsonl'; relative paths start in {trainer})."]
    values = ready(repo, "dpo")
    (repo / "dataset" / "data.jsonl").write_text(GOOD["sft"])  # SFT data given to DPO
    [problem] = preflight.run("dpo", values, 0, trainer_dir=trainer)
    assert problem.startswith("Data file is not usable for RL - DPO: ")
    assert "line 1" in problem and 'missing key "chosen"' in problem
    values = ready(repo, "grpo")
    (repo / "dataset" / "data.jsonl").write_text(GOOD["rlaif"] + "{not json\n")
    [problem] = preflight.run("grpo", values, 0, trainer_dir=trainer)
    assert "data.jsonl line 2: invalid JSON" in problem
    (repo / "dataset" / "data.jsonl").write_text("\n\n")
    [problem] = preflight.run("grpo", values, 0, trainer_dir=trainer)
    assert "has no data" in problem


def test_preflight_checks_only_the_first_lines(repo):
    values = ready(repo, "pretrain")
    bad_late = GOOD["pretrain"] * preflight.DATA_LINES + "not json\n"
    (repo / "dataset" / "data.jsonl").write_text(bad_late)
    assert preflight.run("pretrain", values, 0, trainer_dir=repo / "trainer") == []


@pytest.mark.parametrize("train_type, changes, missing", [
    ("sft", {}, "pretrain_64.pth"),
    ("sft", {"use_moe": "1"}, "pretrain_64_moe.pth"),
    ("lora", {}, "full_sft_64.pth"),
    ("dpo", {"from_weight": "my_sft"}, "my_sft_64.pth"),
    ("distill_reason", {}, "dpo_64.pth"),
    ("ppo", {}, "reason_64.pth"),
    ("grpo", {"reasoning": "0"}, "full_sft_64.pth"),
    ("spo", {}, "reason_64.pth"),
])
def test_preflight_base_weight_missing(repo, train_type, changes, missing):
    values = ready(repo, train_type, **changes)
    path = repo / "out" / missing
    path.unlink(missing_ok=True)
    problems = preflight.run(train_type, values, 0, trainer_dir=repo / "trainer")
    assert len(problems) == 1 and problems[0].startswith(f"Base weight not found: {path} (")


def test_preflight_no_base_weight_needed(repo):
    values = ready(repo, "sft", from_weight="none")
    (repo / "out" / "pretrain_64.pth").unlink()
    assert preflight.run("sft", values, 0, trainer_dir=repo / "trainer") == []
    # Pretraining starts from random weights by default.
    for path in (repo / "out").iterdir():
        path.unlink()
    assert preflight.run("pretrain", ready(repo, "pretrain") | {"from_weight": ""}, 0,
                             trainer_dir=repo / "trainer") == []


def test_preflight_weight_dir_is_where_weights_are_read(repo):
    values = ready(repo, "sft", weight_dir="../elsewhere")
    [problem] = preflight.run("sft", values, 0, trainer_dir=repo / "trainer")
    assert problem.startswith(f"Base weight not found: {repo / 'elsewhere' / 'pretrain_64.pth'}")


def test_preflight_lora_needs_a_base(repo):
    problems = preflight.run("lora", ready(repo, "lora", from_weight="none"), 0, trainer_dir=repo / "trainer")
    assert problems == ["LoRA trains on top of a base model: from_weight cannot be none (e.g. full_sft)."]


def test_preflight_distillation_student_and_teacher(repo):
    trainer = repo / "trainer"
    values = ready(repo, "distillation", student_hidden_size="64", teacher_hidden_size="768",
                   from_teacher_weight="big")
    [problem] = preflight.run("distillation", values, 0, trainer_dir=trainer)
    assert problem.startswith(f"Base weight not found: {repo / 'out' / 'big_768.pth'} (teacher:")
    # Student and teacher from the same missing file: one message.
    values = ready(repo, "distillation", student_hidden_size="32", teacher_hidden_size="32")
    assert preflight.run("distillation", values, 0, trainer_dir=trainer) == [
        f"Base weight not found: {repo / 'out' / 'full_sft_32.pth'} (student: from_student_weight=full_sft). "
        "Train that stage first, or point weight_dir at the folder that holds it."]
    # No student weight is needed with from_student_weight none (there is no full_sft_32.pth).
    values = ready(repo, "distillation", student_hidden_size="32", from_student_weight="none")
    assert preflight.run("distillation", values, 0, trainer_dir=trainer) == []
    values = ready(repo, "distillation", student_hidden_size="32", from_teacher_weight="none")
    assert preflight.run("distillation", values, 0, trainer_dir=trainer) == [
        "Distillation needs a teacher: from_teacher_weight cannot be none.",
        f"Base weight not found: {repo / 'out' / 'full_sft_32.pth'} (student: from_student_weight=full_sft). "
        "Train that stage first, or point weight_dir at the folder that holds it."]


def test_preflight_reward_model(repo):
    trainer = repo / "trainer"
    values = ready(repo, "grpo")
    (repo / "reward" / "config.json").unlink()
    [problem] = preflight.run("grpo", values, 0, trainer_dir=trainer)
    assert problem.startswith(f"Reward model folder {repo / 'reward'} has no config.json")
    values["reward_model_path"] = "../../internlm2-1_8b-reward"
    [problem] = preflight.run("grpo", values, 0, trainer_dir=trainer)
    assert problem.startswith(f"Reward model not found: {repo.parent / 'internlm2-1_8b-reward'} ")
    assert "set reward_model_path to none" in problem
    for none in ("none", "None"):
        assert preflight.run("spo", ready(repo, "spo") | {"reward_model_path": none}, 0, trainer_dir=trainer) == []


def test_preflight_save_dir_must_be_writable(repo):
    trainer = repo / "trainer"
    (repo / "blocker").write_text("a file where a folder should be")
    values = ready(repo, "sft", save_dir="../blocker/run1")
    assert preflight.run("sft", values, 0, trainer_dir=trainer) == [
        f"Cannot save to {repo / 'blocker' / 'run1'}: {repo / 'blocker'} is a file, not a folder."]
    # A folder that does not exist yet is fine when it can be created.
    assert preflight.run("sft", ready(repo, "sft", save_dir="../out/new/deeper"), 0, trainer_dir=trainer) == []
    (repo / "checkpoints").write_text("not a folder")
    assert preflight.run("sft", ready(repo, "sft"), 0, trainer_dir=trainer) == [
        f"Cannot write resume state to {repo / 'checkpoints'}: {repo / 'checkpoints'} is a file, not a folder."]


def test_preflight_gpus(repo):
    trainer = repo / "trainer"
    assert preflight.run("sft", ready(repo, "sft", device="cuda:1"), 2, trainer_dir=trainer) == []
    assert preflight.run("sft", ready(repo, "sft", device="cuda:2"), 2, trainer_dir=trainer) == [
        "GPU 2 does not exist: this machine has 2 GPUs (ids 0 to 1)."]
    assert preflight.run("sft", ready(repo, "sft", device="cuda:0"), 0, trainer_dir=trainer) == [
        "GPU 0 selected, but this machine has no NVIDIA GPU: train on the CPU."]
    assert preflight.run("sft", ready(repo, "sft", gpus=[0, 1, 2]), 2, trainer_dir=trainer) == [
        "3 GPUs selected, but this machine has 2 GPUs."]
    assert preflight.run("sft", ready(repo, "sft", gpus=[0, 3]), 4, trainer_dir=trainer) == []
    assert preflight.run("sft", ready(repo, "sft", gpus=[0, 5]), 4, trainer_dir=trainer) == [
        "GPU 5 does not exist: this machine has 4 GPUs (ids 0 to 3)."]
    assert preflight.run("sft", ready(repo, "sft", device="cpu"), 0, trainer_dir=trainer) == []
    assert preflight.run("sft", ready(repo, "sft", device="auto"), 0, trainer_dir=trainer) == []


def test_data_kinds_match_the_data_module():
    from dataset import formats
    assert formats.KIND_OF_TYPE == KIND


def test_values_are_parsed_once_per_check(monkeypatch):
    """The Train page checks a form on every rerun: one parse serves the command and the preflight."""
    from mmcore.widgets import train_form
    calls = []
    real = commandline.check
    monkeypatch.setattr(commandline, "check", lambda *a: calls.append(a) or real(*a))
    train_form.check_form("pretrain", train_form.initial_form("pretrain"), 0)
    assert len(calls) == 1


def test_invalid_rule_options_skip_only_that_check(repo):
    """A base-weight rule that reads an invalid option is not applied: the field error says it all."""
    values = ready(repo, "grpo", reasoning="2")
    (repo / "out" / "reason_64.pth").unlink()
    assert preflight.run("grpo", values, 0, trainer_dir=repo / "trainer") == [
        "Reasoning (reasoning) must be one of 0, 1."]
