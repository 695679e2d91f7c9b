"""No code from data: a planted pickle at every place a file is loaded runs nothing, a reward-model
folder's own code runs only where an admin allowed it, and a Resume refuses another job's state."""
import json
import os

import pytest
import torch

from model import weights
from model.model_lora import apply_lora, load_lora
from model.model_minimind import MiniMindForCausalLM
from trainer import checkpoint
from trainer import trainer_utils as tu
from trainer.rl import reward_model
from trainer.rules import ownership, roots


class Payload:
    """Unpickling this runs `open(marker, "w")`: the proof that code from the file ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(path, marker):
    """A .pth file that looks like a state dict and carries a payload."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {"embed_tokens.weight": torch.zeros(2)}, "evil": Payload(marker)}, path)
    return path


@pytest.fixture
def marker(tmp_path):
    m = tmp_path / "PWNED"
    yield m
    assert not m.exists(), "code from a data file ran"


def test_the_payload_really_runs_when_unpickled_freely(tmp_path):
    """Shows the planted files are real attacks: without weights_only they run their code."""
    m = tmp_path / "ran"
    torch.load(plant(tmp_path / "x.pth", m), weights_only=False)
    assert m.exists()


def test_base_weight(tmp_path, marker):
    plant(tmp_path / "evil_64.pth", marker)
    config = tu.model_config(64, 1, False)
    with pytest.raises(Exception, match="(?i)weights.only|unpickl|unsupported"):
        tu.init_model(config, "evil", str(tmp_path), "cpu", tokenizer=False)


def test_resume_state(tmp_path, marker):
    with pytest.raises(Exception, match="(?i)weights.only|unpickl|unsupported"):
        checkpoint.load_resume(str(plant(tmp_path / "evil_64_resume.pth", marker)), 1)


def test_lora_file(tmp_path, marker):
    model = MiniMindForCausalLM(tu.model_config(64, 1, False))
    apply_lora(model)
    with pytest.raises(Exception, match="(?i)weights.only|unpickl|unsupported"):
        load_lora(model, str(plant(tmp_path / "lora_64.pth", marker)))


def test_weight_file_read_by_the_models_page(tmp_path, marker):
    with pytest.raises(weights.WeightFileError):
        weights.read_state_dict(str(plant(tmp_path / "w_64.pth", marker)))


def test_resume_state_round_trips_with_weights_only(tmp_path):
    model = MiniMindForCausalLM(tu.model_config(64, 1, False))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    path = str(tmp_path / "r_64_resume.pth")
    checkpoint.save_resume(path, model=model, optimizer=optimizer, epoch=0, step=3, world_size=1, global_step=3)
    state = checkpoint.load_resume(path, 1)
    assert state["step"] == 3 and state["written_by"]["pid"] == os.getpid()
    checkpoint.set_rng_states(state["rng"])


def test_a_resume_refuses_a_state_another_job_wrote(tmp_path, monkeypatch):
    model = MiniMindForCausalLM(tu.model_config(64, 1, False))
    path = str(tmp_path / "shared_64_resume.pth")
    monkeypatch.setenv(ownership.JOB_ENV, "2")  # job 2 wrote the state
    checkpoint.save_resume(path, model=model, optimizer=None, epoch=0, step=125, world_size=1)
    monkeypatch.setenv(ownership.JOB_ENV, "4")
    monkeypatch.setenv(ownership.RESUME_OF_ENV, "3")  # job 4 resumes job 3
    with pytest.raises(tu.SetupError, match="written by job 2, not by job 3"):
        checkpoint.load_resume(path, 1)
    monkeypatch.setenv(ownership.RESUME_OF_ENV, "3,2")  # job 3 itself resumed job 2: its lineage
    assert checkpoint.load_resume(path, 1)["step"] == 125
    monkeypatch.delenv(ownership.RESUME_OF_ENV)  # a run by hand: the user's own choice
    assert checkpoint.load_resume(path, 1)["step"] == 125


def evil_reward_folder(folder, marker):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "evil", "architectures": ["EvilModel"],
        "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel",
                     "AutoTokenizer": ["evil.EvilTokenizer", None]}}))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                    "from transformers import PretrainedConfig\n"
                                    "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.EvilTokenizer", None]}}))
    return folder


def test_a_reward_model_folder_runs_no_code_unless_an_admin_allowed_it(tmp_path, marker, monkeypatch):
    folder = evil_reward_folder(tmp_path / "reward", marker)
    monkeypatch.delenv(roots.TRUSTED_CODE_ENV, raising=False)
    with pytest.raises(tu.SetupError, match="could not load the reward model"):
        reward_model.load_reward_model(str(folder), "cpu")


def test_preflight_names_an_untrusted_reward_model_that_needs_its_own_code(tmp_path, monkeypatch):
    from mmcore.train import preflight
    from mmcore.train.preset_table import demo_preset
    marker = tmp_path / "never"
    evil_reward_folder(tmp_path / "reward", marker)
    monkeypatch.delenv(roots.TRUSTED_CODE_ENV, raising=False)
    values = {**demo_preset("grpo"), "reward_model_path": str(tmp_path / "reward")}
    assert any("runs its own Python code" in p for p in preflight.run("grpo", values, 0))
    monkeypatch.setenv(roots.TRUSTED_CODE_ENV, str(tmp_path / "reward"))
    assert not any("runs its own Python code" in p for p in preflight.run("grpo", values, 0))
    assert not marker.exists()
