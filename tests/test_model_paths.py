"""The paths typed on the Models page (mmcore.models.modelsview.data_file, reward_model_folder): checked
against the folders a job may read, as the workers open them (relative to the repository)."""
import json

import pytest

from mmcore.base.paths import ROOT
from mmcore.models import modelsview
from trainer.rules import roots


@pytest.fixture
def read_root(tmp_path, monkeypatch):
    """Jobs may read only `tmp_path/ok` (and write nowhere else)."""
    ok = tmp_path / "ok"
    ok.mkdir()
    monkeypatch.setenv(roots.READ_ENV, str(ok))
    monkeypatch.setenv(roots.WRITE_ENV, str(ok))
    monkeypatch.delenv(roots.TRUSTED_CODE_ENV, raising=False)
    return ok


def test_a_data_file_inside_the_read_roots(read_root, tmp_path):
    data = read_root / "rlaif.jsonl"
    data.write_text("{}\n")
    assert modelsview.data_file(str(data)) == (data.resolve(), None)
    path, problem = modelsview.data_file(str(read_root / "missing.jsonl"))
    assert path is None and "missing.jsonl" in problem
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    path, problem = modelsview.data_file(str(outside))
    assert path is None and "outside the folders a job may read" in problem


def test_a_relative_data_file_is_found_from_the_repository():
    path, problem = modelsview.data_file("dataset/demo/rlaif.jsonl")  # the default roots hold dataset/
    assert problem is None and path == ROOT / "dataset" / "demo" / "rlaif.jsonl"


def test_the_reward_model_folder_is_optional_and_checked(read_root, tmp_path):
    assert modelsview.reward_model_folder("") == (None, None)
    assert modelsview.reward_model_folder("   ") == (None, None)
    path, problem = modelsview.reward_model_folder(str(tmp_path))
    assert path is None and "outside the folders a job may read" in problem
    path, problem = modelsview.reward_model_folder(str(read_root / "nothing"))
    assert path is None and problem  # no such folder
    model = read_root / "rm"
    model.mkdir()
    path, problem = modelsview.reward_model_folder(str(model))
    assert path is None and "config.json" in problem  # not a transformers model
    (model / "config.json").write_text(json.dumps({"model_type": "x"}))
    assert modelsview.reward_model_folder(str(model)) == (str(model.resolve()), None)


def test_a_reward_model_with_its_own_code_needs_an_admins_trust(read_root, monkeypatch):
    model = read_root / "remote"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "modeling.Model"}}))
    path, problem = modelsview.reward_model_folder(str(model))
    assert path is None and roots.TRUSTED_CODE_ENV in problem
    monkeypatch.setenv(roots.TRUSTED_CODE_ENV, str(model))
    assert modelsview.reward_model_folder(str(model)) == (str(model.resolve()), None)
