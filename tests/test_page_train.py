"""The Train page (AppTest): per-type widgets and defaults, validation, preview, preflight, launch."""
import re

import pytest
from _pages_helpers import open_page, texts, wait_for, widget_keys

from mmcore.base.paths import TRAINER_DIR
from mmcore.jobs.jobstore import JobStore
from mmcore.train import train_types
from mmcore.widgets import train_form

SEED_GRPO = "--beta 0.02 --num_generations 8 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward"
SEED_SPO = "--beta 0.02 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward"

# The options every trainer has (DESIGN.md), as the form shows them: --device is the device mode,
# --use_wandb the monitor choice.
COMMON = {"save_dir", "save_weight", "epochs", "batch_size", "learning_rate", "dtype", "num_workers",
          "accumulation_steps", "grad_clip", "log_interval", "save_interval", "hidden_size", "num_hidden_layers",
          "max_seq_len", "use_moe", "data_path", "weight_dir", "from_resume", "train_monitor", "wandb_project",
          "device_mode", "job_name", "run_dir", "tokenizer_path", "keep_checkpoints",
          "eval_data", "eval_holdout", "eval_interval", "eval_rows", "seed"}  # held-out evaluation (off by default)
# The RL types' own options after upstream's: the rollout store and sampling.
RL_ADDED = {"rollout_groups", "rollout_max_mb", "temperature", "top_k", "top_p"}


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """Each test gets its own job store."""
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def train_page(train_type=None):
    at = open_page()  # Train is the default page
    assert not at.exception
    if train_type:
        at.selectbox(key="train.type").set_value(train_type).run()
        assert not at.exception
    return at


def value(at, train_type, name):
    """A field's value as the form's text (a number field's number written as the form writes it)."""
    key = f"train.{train_type}.{name}"
    for w in at.number_input:
        if w.key == key:
            return train_form.number_text(w.value)
    for kind in ("text_input", "selectbox"):
        for w in getattr(at, kind):
            if w.key == key:
                return w.value
    raise AssertionError(f"no widget {key}")


def preview(at):
    codes = texts(at.code)
    assert len(codes) == 1, codes
    return codes[0]


def test_type_select_has_the_registry_labels():
    at = train_page()
    select = at.selectbox(key="train.type")
    assert select.value == "pretrain"
    assert select.options == ["Pretrain", "SFT - Full", "SFT - LoRA", "RL - DPO", "RL - PPO", "RL - GRPO", "RL - SPO",
                              "Reasoning distill", "Distillation"]
    assert at.title[0].value == "Train"


def test_grpo_shows_exactly_its_widgets_with_the_seed_defaults():
    at = train_page("grpo")
    own = {"max_gen_len", "beta", "num_generations", "reasoning", "reward_model_path"} | RL_ADDED
    assert widget_keys(at, "train.grpo.") == {f"train.grpo.{n}" for n in COMMON | own}
    assert widget_keys(at, "train.") - widget_keys(at, "train.grpo.") == {"train.type"}
    expected = {"learning_rate": "8e-8", "batch_size": "2", "max_seq_len": "66", "beta": "0.02",
                "num_generations": "8", "reasoning": "1", "reward_model_path": "../../internlm2-1_8b-reward",
                "save_weight": "grpo", "data_path": "../dataset/rlaif-mini.jsonl", "log_interval": "1",
                "save_interval": "10", "epochs": "1", "hidden_size": "512", "num_hidden_layers": "8", "use_moe": "0",
                "temperature": "0.8", "top_k": "50", "top_p": "1.0"}
    for name, text in expected.items():
        assert value(at, "grpo", name) == text, name
    assert "**GRPO parameters**" in texts(at.markdown)
    assert SEED_GRPO in preview(at)
    assert "--temperature 0.8 --top_k 50 --top_p 1.0" in preview(at)
    assert "--from_weight" not in preview(at)


def test_spo_shows_its_widgets_without_num_generations():
    at = train_page("spo")
    own = {"max_gen_len", "beta", "reasoning", "reward_model_path"} | RL_ADDED
    assert widget_keys(at, "train.spo.") == {f"train.spo.{n}" for n in COMMON | own}
    for name, text in {"learning_rate": "1e-7", "accumulation_steps": "4", "beta": "0.02", "reasoning": "1",
                       "save_weight": "spo", "reward_model_path": "../../internlm2-1_8b-reward"}.items():
        assert value(at, "spo", name) == text, name
    assert "**SPO parameters**" in texts(at.markdown)
    assert SEED_SPO in preview(at)
    assert "--num_generations" not in preview(at)


@pytest.mark.parametrize("train_type", ["ppo", "grpo", "spo"])
def test_rl_types_hide_from_weight(train_type):
    at = train_page(train_type)
    assert f"train.{train_type}.from_weight" not in widget_keys(at, "train.")
    assert "Start from weight" not in [w.label for w in at.text_input]


def test_dpo_regression():
    at = train_page("dpo")
    assert value(at, "dpo", "beta") == "0.1"
    assert value(at, "dpo", "from_weight") == "full_sft"
    command = preview(at)
    assert "--beta 0.1" in command and "--from_weight full_sft" in command
    assert "../trainer/train_dpo.py" in command


def test_ppo_regression():
    at = train_page("ppo")
    command = preview(at)
    for flag in ("--clip_epsilon 0.1", "--vf_coef 0.5", "--kl_coef 0.02", "--reasoning 1",
                 "--update_old_actor_freq 4", "--reward_model_path ../../internlm2-1_8b-reward",
                 "--critic_learning_rate 8e-8", "--temperature 0.8", "--top_k 50", "--top_p 1.0"):
        assert flag in command, flag
    assert "--from_weight" not in command
    assert "../trainer/train_ppo.py" in command


def test_switching_type_refills_the_defaults():
    at = train_page("grpo")
    at.number_input(key="train.grpo.beta").set_value(0.5).run()
    assert "--beta 0.5" in preview(at)
    at.selectbox(key="train.type").set_value("spo").run()
    at.selectbox(key="train.type").set_value("grpo").run()
    assert value(at, "grpo", "beta") == "0.02"
    assert SEED_GRPO in preview(at)


@pytest.mark.parametrize("train_type", ["pretrain", "ppo", "distillation"])
def test_number_parameters_are_number_inputs_with_the_scripts_defaults_and_no_browser_bounds(train_type):
    at = train_page(train_type)
    numbers = {w.key: w for w in at.number_input}
    params = [p for p in train_types.get_type(train_type).params if p.type in (int, float) and p.choices is None]
    assert params and set(numbers) == {f"train.{train_type}.{p.name}" for p in params}
    for p in params:
        w = numbers[f"train.{train_type}.{p.name}"]
        if p.default is None:  # empty: left out of the command (--seed: upstream's fixed seed)
            assert w.value is None, p.name
        else:
            assert type(w.value) is p.type and w.value == p.default, p.name  # trainer/rules/args.py's default
        # No bounds in the browser (it would keep an out-of-range number without sending it): the check has them.
        assert (w.min, w.max) == (None, None), p.name
    numbers[f"train.{train_type}.epochs"].set_value(3).run()
    assert "--epochs 3" in preview(at)
    assert value(at, train_type, "epochs") == "3"


def test_cpu_only_without_gpus():
    at = train_page("sft")
    assert at.radio(key="train.sft.device_mode").options == ["CPU"]
    assert "--device cpu" in preview(at)


@pytest.mark.parametrize("name, bad, says", [("learning_rate", -0.001, "Learning rate: must be greater than 0"),
                                             ("epochs", 0, "Epochs: must be at least 1"),
                                             ("num_generations", 300, "must be at most 256")])
def test_an_out_of_range_number_is_sent_and_refused_by_name_never_replaced(name, bad, says):
    """The field holds what was typed (no browser-side bounds to keep it back), the form reads it, and Launch
    is refused with the field's message: the job never starts with the last in-range value instead."""
    at = train_page("grpo")
    before = preview(at)
    at.number_input(key=f"train.grpo.{name}").set_value(bad).run()
    assert value(at, "grpo", name) == train_form.number_text(bad)  # what the field shows is what the form has
    assert not at.code and before  # no command preview with the old value
    next(b for b in at.button if b.label == "Launch").click().run()
    refused = [e for e in texts(at.error) if e.startswith("Launch refused")]
    assert refused and says in refused[0], texts(at.error)
    assert JobStore().count() == 0


def test_bad_values_show_messages_and_never_crash():
    at = train_page("grpo")
    at.number_input(key="train.grpo.learning_rate").set_value(0.0).run()
    at.text_input(key="train.grpo.reward_model_path").set_value("-rm").run()
    assert not at.exception
    errors = " | ".join(texts(at.error))
    assert "Learning rate must be greater than 0" in errors
    assert "must not start with '-'" in errors
    assert not at.code  # no command while values are invalid
    assert any("Fix the fields" in w for w in texts(at.warning))
    launch = [b for b in at.button if b.label == "Launch"][0]
    launch.click().run()
    refused = [e for e in texts(at.error) if e.startswith("Launch refused")]
    assert refused and "Learning rate: must be greater than 0" in refused[0]
    assert JobStore().count() == 0


def test_launch_is_refused_with_the_preflight_reasons():
    at = train_page("grpo")  # the default data, base weight and reward model are not on this machine
    warnings = " | ".join(texts(at.warning))
    assert "Reward model not found" in warnings
    [b for b in at.button if b.label == "Launch"][0].click().run()
    refused = [e for e in texts(at.error) if e.startswith("Launch refused")]
    assert refused
    assert "Reward model not found" in refused[0] and "Base weight not found" in refused[0]
    assert JobStore().count() == 0
    assert not at.success


def test_demo_preset_fills_the_selected_type():
    at = train_page("grpo")
    [b for b in at.button if b.label == "Demo preset"][0].click().run()
    assert value(at, "grpo", "hidden_size") == "64"
    assert value(at, "grpo", "reward_model_path") == "none"
    assert value(at, "grpo", "num_generations") == "4"
    [b for b in at.button if b.label == "Reset to defaults"][0].click().run()
    assert value(at, "grpo", "hidden_size") == "512"


@pytest.fixture
def repo_resume_state_kept(tmp_path):
    """The job runs in the repository's trainer/, so its resume state lands in <repo>/checkpoints:
    keep whatever file of that name was there and leave the folder as the test found it."""
    folder = TRAINER_DIR.parent / "checkpoints"
    resume = folder / "pretrain_64_resume.pth"
    folder_existed = folder.exists()
    saved = tmp_path / "saved_resume.pth"
    if resume.exists():
        resume.replace(saved)
    yield
    if saved.exists():
        saved.replace(resume)
    else:
        resume.unlink(missing_ok=True)
    if not folder_existed and folder.exists() and not any(folder.iterdir()):
        folder.rmdir()


@pytest.mark.timeout(600)
def test_launching_a_demo_pretrain_job_runs_it(tmp_path, repo_resume_state_kept):
    if not (TRAINER_DIR / "train_pretrain.py").is_file():
        pytest.skip("trainer/train_pretrain.py is not in this checkout")
    at = train_page("pretrain")
    [b for b in at.button if b.label == "Demo preset"][0].click().run()
    # Keep the test small (the first lines of the demo data, one epoch) and its weights out of the
    # repository's out/ folder.
    data = tmp_path / "pretrain.jsonl"
    demo = (TRAINER_DIR / value(at, "pretrain", "data_path")).resolve()
    data.write_text("".join(demo.read_text(encoding="utf-8").splitlines(keepends=True)[:64]), encoding="utf-8")
    at.text_input(key="train.pretrain.data_path").set_value(str(data)).run()
    at.text_input(key="train.pretrain.save_dir").set_value(str(tmp_path / "out")).run()
    at.number_input(key="train.pretrain.epochs").set_value(1).run()
    at.number_input(key="train.pretrain.log_interval").set_value(1).run()
    assert not at.warning, texts(at.warning)
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.exception
    successes = texts(at.success)
    assert successes and successes[0].startswith(("Queued as job ", "Started job ")), successes  # never "launched"
    job_id = int(re.match(r"(?:Queued as|Started) job (\d+)", successes[0]).group(1))
    links = [link for link in at.get("page_link")]
    assert any("Jobs" in link.proto.label for link in links)

    store = JobStore()
    job = store.get(job_id)
    assert job.train_type == "pretrain" and job.params["hidden_size"] == "64"
    assert "--hidden_size" in job.argv
    try:
        job = wait_for(lambda: (j := store.get(job_id)).finished and j, timeout=480, interval=1,
                       what=f"the demo pretrain job to finish (log: {job.log_path})")
    finally:
        from mmcore.jobs import runner
        runner.stop(store, job_id, grace=2, wait=True)
    log = open(job.log_path, encoding="utf-8", errors="replace").read()
    assert job.status == "succeeded", log[-3000:]
    assert "Epoch:[1/1]" in log
    assert list((tmp_path / "out").glob("pretrain_64.pth"))


def two_gpus():
    from mmcore.base.gpu import GpuInfo
    gib = 1024 ** 3
    return [GpuInfo(index=i, name="NVIDIA H200", memory_used=i * gib, memory_total=140 * gib, utilization=10 * i)
            for i in range(2)]


def test_device_modes_with_gpus(monkeypatch):
    """A stand-in for NVML (this machine has no NVIDIA GPU): one GPU, several GPUs, or CPU."""
    from mmcore.base import gpu
    monkeypatch.setattr(gpu, "list_gpus", two_gpus)
    at = train_page("sft")
    mode = at.radio(key="train.sft.device_mode")
    assert mode.options == ["Single GPU", "Several GPUs", "CPU"] and mode.value == "single"
    assert at.selectbox(key="train.sft.gpu").value == 0
    assert "--device cuda:0" in preview(at)
    at.selectbox(key="train.sft.gpu").set_value(1).run()
    assert "--device cuda:1" in preview(at)

    at.radio(key="train.sft.device_mode").set_value("multi").run()
    assert at.multiselect(key="train.sft.gpus").value == [0, 1]  # all GPUs by default
    command = preview(at)
    assert command.startswith("CUDA_VISIBLE_DEVICES=0,1 ")
    assert "--nproc_per_node 2 ../trainer/train_full_sft.py" in command and "--device" not in command
    at.multiselect(key="train.sft.gpus").set_value([]).run()
    assert any("choose at least one GPU" in e for e in texts(at.error))
    assert not at.code

    at.radio(key="train.sft.device_mode").set_value("cpu").run()
    assert "--device cpu" in preview(at)


def test_launched_message_goes_when_the_type_changes_or_a_job_is_cloned():
    from mmcore.widgets import train_form
    at = open_page("pages/train.py", state={train_form.LAUNCHED_KEY: 7})
    assert any("Queued as job 7" in s for s in texts(at.success))
    at.selectbox(key=train_form.TYPE_KEY).set_value("grpo").run()
    assert not any("job 7" in s for s in texts(at.success))

    at = open_page("pages/train.py", state={train_form.LAUNCHED_KEY: 7})
    at.session_state[train_form.CLONE_KEY] = {"train_type": "dpo", "params": {"beta": "0.2"}, "job_id": 3, "name": "d"}
    at.run()
    assert not any("job 7" in s for s in texts(at.success))
    assert any("Filled from job 3" in s for s in texts(at.info))


def test_dtype_says_what_it_costs_on_a_cpu_only_machine():
    at = train_page("pretrain")
    notes = [c for c in texts(at.caption) if "float32" in c]
    assert notes and "No NVIDIA GPU" in notes[0] and "CUDA only" in notes[0]


def test_a_base_weight_a_queued_job_writes_offers_to_queue_after_it(tmp_path, monkeypatch):
    from mmcore.train import commandline
    from mmcore.train.preset_table import demo_preset
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)  # the jobs stay queued
    folder = tmp_path / "w"
    writer_values = {**demo_preset("distill_reason"), "device": "cpu", "save_dir": str(folder)}
    cmd = commandline.build_command("distill_reason", writer_values)
    store = JobStore()
    writer = store.create("distill_reason", "reason", writer_values, cmd.argv, cmd.cwd, cmd.env, waiting=1)

    at = train_page("grpo")
    [b for b in at.button if b.label == "Demo preset"][0].click().run()
    at.text_input(key="train.grpo.weight_dir").set_value(str(folder)).run()
    at.text_input(key="train.grpo.save_dir").set_value(str(folder)).run()
    warnings = " | ".join(texts(at.warning))
    assert f"Job {writer} (Reasoning distill, queued) will write it" in warnings
    assert "Base weight not found" not in warnings
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert any(f"Job {writer} (Reasoning distill, queued) will write it" in e for e in texts(at.error))
    assert store.count() == 1
    [b for b in at.button if b.label == f"Queue after job {writer}"][0].click().run()
    assert not at.exception and at.success
    [job] = [j for j in store.list() if j.id != writer]
    assert f"Queued job {job.id}: it starts when job {writer} has succeeded." in texts(at.info)
    assert job.train_type == "grpo" and job.depends_on == writer and job.in_queue


def test_the_dtype_a_cpu_form_shows_is_the_dtype_its_job_uses():
    at = train_page("sft")
    assert value(at, "sft", "dtype") == "float32" and "--dtype float32" in preview(at)
    assert not any("CUDA only" in w for w in texts(at.warning))
    at.selectbox(key="train.sft.dtype").set_value("bfloat16").run()
    assert "--dtype bfloat16" in preview(at)
    assert any("dtype bfloat16 applies on CUDA only: this CPU job trains in float32" in w for w in texts(at.warning))
    [b for b in at.button if b.label == "Reset to defaults"][0].click().run()
    assert value(at, "sft", "dtype") == "float32"


def test_reasoning_distills_weighted_loss_is_explained_under_the_type():
    at = train_page("distill_reason")
    assert any("four tags" in c and "far above SFT's" in c for c in texts(at.caption)), texts(at.caption)
    at.selectbox(key="train.type").set_value("sft").run()
    assert not any("four tags" in c for c in texts(at.caption))
    from mmcore.base import i18n
    with i18n.language("zh"):
        at = open_page(state={i18n.STATE_KEY: "zh"})
        at.selectbox(key="train.type").set_value("distill_reason").run()
    assert not at.exception, at.exception
    assert any("推理蒸馏的损失" in c and "加权 10 倍" in c for c in texts(at.caption)), texts(at.caption)
