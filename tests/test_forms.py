"""The Train page's form logic: defaults per type, presets, clones, device choice, checks and launching."""
import datetime
import sys

import pytest
from _runner_helpers import wait_for

from mmcore.jobs import runner
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import launch
from mmcore.train import commandline, train_types
from mmcore.train.preset_table import demo_preset
from mmcore.widgets import train_form

NOW = datetime.datetime(2026, 1, 2, 15, 30)
SEED_GRPO = "--beta 0.02 --num_generations 8 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward"
SEED_SPO = "--beta 0.02 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward"


def test_type_labels_are_the_registrys_in_order():
    assert list(train_form.type_labels().values()) == [
        "Pretrain", "SFT - Full", "SFT - LoRA", "RL - DPO", "RL - PPO", "RL - GRPO", "RL - SPO",
        "Reasoning distill", "Distillation"]


def test_field_keys_include_the_type():
    assert train_form.field_key("grpo", "beta") != train_form.field_key("spo", "beta")


def test_grpo_form_holds_the_seed_defaults_and_no_from_weight():
    form = train_form.initial_form("grpo", now=NOW)
    assert form["learning_rate"] == "8e-8"
    assert form["batch_size"] == "2"
    assert form["max_seq_len"] == "66"
    assert form["beta"] == "0.02"
    assert form["num_generations"] == "8"
    assert form["reasoning"] == "1"
    assert form["reward_model_path"] == "../../internlm2-1_8b-reward"
    assert "from_weight" not in form
    assert "device" not in form  # the device mode stands for it
    assert form["device_mode"] == "cpu"  # no GPU given
    assert form["job_name"] == "grpo-20260102-1530"


@pytest.mark.parametrize("train_type", ["ppo", "grpo", "spo"])
def test_rl_types_show_no_from_weight(train_type):
    names = [p.name for _, _, params in train_form.sections(train_type) for p in params]
    assert "from_weight" not in names
    assert "reward_model_path" in names


def test_sections_group_the_types_own_parameters_under_its_name():
    sections = train_form.sections("spo")
    titles = [title for _, title, _ in sections]
    assert titles == ["Training", "Model", "Data, saving and loading", "SPO parameters", "Devices", "Monitoring"]
    own = dict((group, [p.name for p in params]) for group, _, params in sections)["type_specific"]
    assert own == ["max_gen_len", "beta", "reasoning", "reward_model_path", "rollout_groups", "rollout_max_mb",
                   "temperature", "top_k", "top_p"]
    assert "num_generations" not in own
    assert [title for _, title, _ in train_form.sections("pretrain")] == [
        "Training", "Model", "Data, saving and loading", "Pretrain parameters", "Devices", "Monitoring"]
    assert [title for _, title, _ in train_form.sections("sft")] == [
        "Training", "Model", "Data, saving and loading", "SFT parameters", "Devices", "Monitoring"]


def test_default_command_values_give_the_seed_flags():
    for train_type, flags in (("grpo", SEED_GRPO), ("spo", SEED_SPO)):
        values = train_form.command_values(train_type, train_form.initial_form(train_type))
        assert values["device"] == "cpu" and values["gpus"] == []
        cmd = commandline.build_command(train_type, values)
        assert flags in cmd.display
        assert "--from_weight" not in cmd.argv
        assert cmd.argv[cmd.argv.index("--device") + 1] == "cpu"
    spo = commandline.build_command("spo", train_form.command_values("spo", train_form.initial_form("spo")))
    assert "--num_generations" not in spo.argv


def test_preset_form_fills_the_demo_values():
    form = train_form.preset_form("pretrain", now=NOW)
    for name, value in demo_preset("pretrain").items():
        assert form[name] == value
    assert form["job_name"].startswith("demo-pretrain-")
    rl = train_form.preset_form("grpo")
    assert rl["reward_model_path"] == "none"


def test_devices_with_gpus():
    form = train_form.initial_form("sft", gpu_ids=[0, 1])
    assert (form["device_mode"], form["gpu"], form["gpus"]) == ("single", 0, [0, 1])
    assert train_form.device_modes([]) == ["cpu"]
    assert set(train_form.device_modes([0])) == {"cpu", "single", "multi"}

    single = train_form.command_values("sft", {**form, "gpu": 1})
    assert (single["device"], single["gpus"]) == ("cuda:1", [])
    multi = train_form.command_values("sft", {**form, "device_mode": "multi", "gpus": [0, 1]})
    assert (multi["device"], multi["gpus"]) == ("", [0, 1])
    cmd = commandline.build_command("sft", multi)
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "--nproc_per_node" in cmd.argv and "--device" not in cmd.argv


def test_device_errors():
    form = train_form.initial_form("sft", gpu_ids=[0, 1])
    no_gpus = train_form.check_form("sft", {**form, "device_mode": "multi", "gpus": []}, gpu_count=2)
    assert no_gpus.errors["gpus"] == "choose at least one GPU"
    cpu_only = train_form.check_form("sft", {**form, "device_mode": "single"}, gpu_count=0)
    assert "no GPU" in cpu_only.errors["device_mode"]
    assert cpu_only.command is None and not cpu_only.ok


def test_bad_values_are_field_errors_not_exceptions():
    form = train_form.initial_form("grpo")
    form.update(learning_rate="abc", num_generations="1", batch_size="", job_name="  ")
    check = train_form.check_form("grpo", form, gpu_count=0)
    assert check.command is None
    assert "must be a number" in check.errors["learning_rate"]
    assert "at least 2" in check.errors["num_generations"]
    assert check.errors["job_name"] == "is required"
    assert "batch_size" not in check.errors  # empty: the script's default applies
    assert any(r.startswith("Learning rate:") for r in check.reasons)


def test_preflight_problems_refuse_the_launch(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    form = train_form.initial_form("grpo")  # the default data, base weight and reward model do not exist here
    check = train_form.check_form("grpo", form, gpu_count=0)
    assert check.command is not None and not check.errors
    assert any("Reward model not found" in p for p in check.problems)
    with pytest.raises(launch.LaunchRefused) as refused:
        launch.start(store, train_form.job_name(form), check)
    assert any("Data file not found" in r for r in refused.value.reasons)
    assert store.count() == 0


def test_form_from_params_round_trips_a_job():
    form = train_form.preset_form("dpo", now=NOW)
    form["beta"] = "0.3"
    params = train_form.command_values("dpo", form)
    back = train_form.form_from_params("dpo", params, name="again", now=NOW)
    for name in train_form.form_keys("dpo"):
        if name != "job_name":
            assert back[name] == form[name], name
    assert back["job_name"] == "again"


def test_form_from_params_keeps_only_gpus_that_exist():
    params = {"device": "cuda:3", "gpus": [], "beta": "0.2"}
    assert train_form.form_from_params("dpo", params, gpu_ids=[])["device_mode"] == "cpu"
    assert train_form.form_from_params("dpo", params, gpu_ids=[0, 3])["gpu"] == 3
    multi = train_form.form_from_params("dpo", {"gpus": [0, 1]}, gpu_ids=[0, 1])
    assert (multi["device_mode"], multi["gpus"]) == ("multi", [0, 1])
    assert train_form.form_from_params("dpo", {"gpus": "0,1"}, gpu_ids=[0, 1])["device_mode"] == "multi"


def test_session_state_helpers():
    state = {}
    train_form.ensure_form(state, "spo", now=NOW)
    assert state[train_form.field_key("spo", "beta")] == 0.02  # number fields hold numbers for their widgets
    assert state[train_form.field_key("spo", "epochs")] == 1 and type(state[train_form.field_key("spo", "epochs")]) is int
    assert state[train_form.field_key("spo", "save_weight")] == "spo"
    state[train_form.field_key("spo", "beta")] = 0.5
    state[train_form.field_key("spo", "reasoning")] = "7"  # not an option: back to the default
    train_form.ensure_form(state, "spo")
    form = train_form.read_form(state, "spo")
    assert form["beta"] == "0.5" and form["reasoning"] == "1"
    assert not any(k.startswith("train.grpo.") for k in state)


def test_number_fields_convert_between_form_text_and_widget_numbers():
    epochs, lr = train_types.param("sft", "epochs"), train_types.param("sft", "learning_rate")
    assert train_form.number_value(epochs, "3") == 3 and type(train_form.number_value(epochs, "3.0")) is int
    assert train_form.number_value(epochs, "2.5") is None  # not a whole number: an empty field
    assert train_form.number_value(lr, "5e-4") == 0.0005 and train_form.number_value(lr, 1e-7) == 1e-7
    for bad in ("", "abc", "nan", "inf", None):
        assert train_form.number_value(lr, bad) is None
    assert train_form.number_text(None) == ""
    assert train_form.number_text(0.8 - 0.01) == "0.79"  # a value stepped in the browser reads as typed
    assert train_form.number_text(8e-08) == "8e-8" and train_form.number_text(3) == "3"
    assert train_form.number_step(epochs) == 1 and train_form.number_step(lr) == 1e-8  # sft: 5e-7
    # Round trip through session state: every default of every type comes back as the same text.
    for key in train_types.TYPES:
        state = {}
        train_form.ensure_form(state, key, now=NOW)
        assert train_form.read_form(state, key) == {k: v for k, v in train_form.initial_form(key, now=NOW).items()
                                              if k in train_form.form_keys(key)}, key


def test_take_clone_selects_the_type_and_fills_its_form():
    state = {train_form.CLONE_KEY: {"train_type": "ppo", "params": {"kl_coef": "0.07", "device": "cpu"},
                               "job_id": 4, "name": "ppo-a"}}
    assert train_form.take_clone(state, now=NOW) == ("ppo", 4)
    assert state[train_form.TYPE_KEY] == "ppo"
    assert state[train_form.field_key("ppo", "kl_coef")] == 0.07
    assert state[train_form.field_key("ppo", "clip_epsilon")] == 0.1
    assert train_form.read_form(state, "ppo")["kl_coef"] == "0.07"
    assert state[train_form.field_key("ppo", "job_name")] == "ppo-a-copy"
    assert train_form.CLONE_KEY not in state
    assert train_form.take_clone(state) is None
    assert train_form.take_clone({train_form.CLONE_KEY: {"train_type": "nope"}}) is None


def test_resume_values_set_from_resume_and_fill_missing_defaults():
    values = launch.resume_values("sft", {"epochs": "3", "device": "cpu"})
    assert values["from_resume"] == "1"
    assert values["epochs"] == "3"
    assert values["data_path"] == train_types.defaults("sft")["data_path"]


def test_launch_creates_a_job_and_starts_it(tmp_path):
    """A valid launch writes the form values, argv, cwd and env; the queue then starts the supervisor."""
    store = JobStore(tmp_path / "jobs.db")
    values = train_form.command_values("pretrain", train_form.preset_form("pretrain"))
    job_id = launch.launch(store, "pretrain", "tiny", values, gpu_count=0)
    try:
        job = store.get(job_id)
        assert job.params == values and job.name == "tiny"
        assert job.backend == "local" and job.resources == {}  # a CPU slot on this machine
        # The scheduler hands it to its supervisor within moments (the store's only CPU job).
        job = wait_for(lambda: (lambda j: j if j.supervisor_pid is not None else None)(store.get(job_id)), 30,
                       what="the queue to start the job")
        assert job.argv[0] == sys.executable and job.argv[1] == "../trainer/train_pretrain.py"
        assert job.argv[job.argv.index("--hidden_size") + 1] == "64"
        assert job.cwd.endswith("trainer")
    finally:
        runner.stop(store, job_id, grace=2, wait=True)
    assert store.get(job_id).finished
