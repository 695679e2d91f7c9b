"""Preflight: the file-system and device checks before a launch, one function per concern."""
import pytest
from test_command import form

from mmcore.base import i18n
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
    # float32: what these CPU jobs train in (another dtype on a CPU is a warning of its own)
    values = form(train_type, **{"data_path": "../dataset/data.jsonl", "hidden_size": "64", "dtype": "float32",
                                 **changes})
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
        "Train that stage first (Train → A pipeline queues a chain of stages in one click), or point weight_dir at the folder that holds it."]
    # No student weight is needed with from_student_weight none (there is no full_sft_32.pth).
    values = ready(repo, "distillation", student_hidden_size="32", from_student_weight="none")
    assert preflight.run("distillation", values, 0, trainer_dir=trainer) == []
    values = ready(repo, "distillation", student_hidden_size="32", from_teacher_weight="none")
    assert preflight.run("distillation", values, 0, trainer_dir=trainer) == [
        "Distillation needs a teacher: from_teacher_weight cannot be none.",
        f"Base weight not found: {repo / 'out' / 'full_sft_32.pth'} (student: from_student_weight=full_sft). "
        "Train that stage first (Train → A pipeline queues a chain of stages in one click), or point weight_dir at the folder that holds it."]


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


# ---------------------------------------------------------------------------------------------------
# Packing: refused where it cannot be exact, suggested where rows are short

def chat(*turns, **extra):
    roles = ("user", "assistant")
    return {"conversations": [{"role": roles[i % 2], "content": text} for i, text in enumerate(turns)], **extra}


def write_rows(path, rows):
    import json
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_row_lengths_are_the_trainers_datasets_lengths(tmp_path):
    """The torch-free token counts equal the datasets' untruncated lengths: plain and marked text, system
    turns, tools, tool calls and results, both sides of DPO pairs."""
    from dataset.lm_dataset import DPODataset, PretrainDataset, SFTDataset
    from trainer.trainer_utils import load_tokenizer
    tokenizer, model_dir = load_tokenizer(), ROOT / "model"
    texts = [{"text": "plain text"}, {"text": "<|im_start|>marked text<|im_end|>"}, {"text": "中文 and\nlines  "}]
    tool_call = {"role": "assistant", "content": None,
                 "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}
    conversations = [
        chat("hi", "hello"),
        {"conversations": [{"role": "system", "content": "be brief"},
                           *chat("2+2?", "4", "and 3+3?", "6")["conversations"]]},
        {"conversations": [{"role": "system", "content": "tools",
                            "functions": [{"name": "add", "parameters": {}}]},
                           {"role": "user", "content": "1+2"}, tool_call, {"role": "tool", "content": "3"},
                           {"role": "assistant", "content": "3"}]},
    ]
    pairs = [{"chosen": chat("q", "a long good answer")["conversations"],
              "rejected": chat("q", "bad")["conversations"]},
             {"chosen": chat("q", "ok")["conversations"],
              "rejected": chat("q", "a much longer bad one")["conversations"]}]
    for kind, rows, dataset_class in (("pretrain", texts, PretrainDataset), ("sft", conversations, SFTDataset),
                                      ("dpo", pairs, DPODataset)):
        path = tmp_path / f"{kind}.jsonl"
        write_rows(path, rows)
        dataset = dataset_class(str(path), tokenizer, max_length=1 << 20)
        expected = [max(len(v) for k, v in dataset[i].items() if k.endswith("input_ids")) for i in range(len(rows))]
        assert list(preflight.row_lengths(path, kind, model_dir)) == expected, kind
    assert preflight.row_lengths(tmp_path / "missing.jsonl", "sft", model_dir) == ()


def test_pack_gain():
    # batches of 2 rows padded to their longest: (10, 100) and (10, 100) in some order, 220 real tokens
    fill, gain = preflight.pack_gain([10, 100, 10, 100], 200, 1)
    assert (fill, gain) == (220 / 800, 1.0)  # one row per batch: no padding to skip
    fill, gain = preflight.pack_gain([100, 100, 100, 100], 200, 2)
    assert (fill, gain) == (0.5, 1.0)  # equal rows: nothing to skip either
    fill, gain = preflight.pack_gain([10, 300], 200, 2)  # cut at max_seq_len: 10 + 200 real, 400 computed
    assert fill == pytest.approx(210 / 400) and gain == pytest.approx(400 / 210)
    assert preflight.pack_gain([5, 5], 100, 2, pad_to_max=True)[1] == pytest.approx(20)
    assert preflight.pack_gain([], 100, 2) == (0.0, 1.0)


def short_and_long(repo):
    """SFT data whose rows are mostly short, with a long one in every batch: packing computes far less."""
    rows = [chat("word " * 300, "x" * 100) if i % 4 == 0 else chat("hi", "hello") for i in range(64)]
    write_rows(repo / "dataset" / "data.jsonl", rows)


@pytest.mark.parametrize("train_type", ["sft", "lora", "distill_reason", "distillation", "pretrain"])
def test_short_rows_suggest_packing(repo, train_type):
    values = ready(repo, train_type, batch_size="16", max_seq_len="512")
    if train_type == "pretrain":
        write_rows(repo / "dataset" / "data.jsonl", [{"text": "word " * (400 if i % 4 == 0 else 3)} for i in range(64)])
    else:
        short_and_long(repo)
    checked = commandline.check(train_type, values, repo / "trainer")
    [note] = preflight.warnings(checked, repo / "trainer")
    assert note.startswith("Rows fill ") and "of max_seq_len (512) on average: pack (--pack 1) would compute ~" in note
    gain = float(note.split("~")[1].split("×")[0])
    assert gain >= preflight.PACK_MIN_GAIN
    with i18n.language("zh"):
        assert "打包" in preflight.warnings(checked, repo / "trainer")[0]
    packed = commandline.check(train_type, {**values, "pack": "1"}, repo / "trainer")
    assert preflight.warnings(packed, repo / "trainer") == []  # already packing
    one_by_one = commandline.check(train_type, {**values, "batch_size": "1"}, repo / "trainer")
    assert preflight.warnings(one_by_one, repo / "trainer") == []  # no padding to skip


def test_a_mixed_precision_dtype_on_a_cpu_job_is_a_warning(repo):
    values = ready(repo, "sft", dtype="bfloat16")
    checked = commandline.check("sft", values, repo / "trainer")
    assert preflight.run("sft", values, 0, trainer_dir=repo / "trainer") == []  # not a reason to refuse
    assert preflight.warnings(checked, repo / "trainer") == [
        "dtype bfloat16 applies on CUDA only: this CPU job trains in float32. Choose float32 to launch what runs."]
    on_gpu = commandline.check("sft", {**values, "device": "cuda:0"}, repo / "trainer")
    assert preflight.warnings(on_gpu, repo / "trainer") == []


def test_dpo_short_pairs_suggest_packing(repo):
    values = ready(repo, "dpo", batch_size="8")
    pair = {"chosen": chat("q", "good")["conversations"], "rejected": chat("q", "bad")["conversations"]}
    long_pair = {"chosen": chat("q " * 400, "good")["conversations"], "rejected": pair["rejected"]}
    write_rows(repo / "dataset" / "data.jsonl", [long_pair if i % 8 == 0 else pair for i in range(64)])
    [note] = preflight.warnings(commandline.check("dpo", values, repo / "trainer"), repo / "trainer")
    assert "pack (--pack 1)" in note


def test_no_packing_suggestion_where_packing_does_not_apply(repo):
    for train_type, changes in (("grpo", {}), ("sft", {"use_moe": "1"})):  # RL; MoE SFT, which cannot pack
        checked = commandline.check(train_type, ready(repo, train_type, **changes), repo / "trainer")
        short_and_long(repo)  # rows that suggest packing to a dense SFT run
        assert preflight.warnings(checked, repo / "trainer") == [], train_type


def test_packing_a_moe_model_whose_loss_adds_the_auxiliary_loss_is_refused(repo):
    for train_type in ("sft", "lora", "distill_reason", "distillation"):
        values = ready(repo, train_type, use_moe="1", pack="1")
        for path in list((repo / "out").iterdir()):  # the MoE base weights
            path.with_name(path.stem + "_moe.pth").write_bytes(b"weights")
        problems = preflight.run(train_type, values, 0, trainer_dir=repo / "trainer")
        assert problems == [f"Pack cannot be used with the MoE model for {i18n.t(f'type.{train_type}')}: the MoE "
                            "auxiliary loss is taken over every position of a batch, the padding included, so packed "
                            "rows would change the loss. Turn pack off, or train a dense model."], train_type
    values = ready(repo, "dpo", use_moe="1", pack="1")  # DPO adds no auxiliary loss: packing stays exact
    assert preflight.run("dpo", values, 0, trainer_dir=repo / "trainer") == []
