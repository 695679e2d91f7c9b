"""Paths stay inside the allowed folders, names are plain, numbers are bounded: the form, the API and
the trainers refuse the same things with the same message."""
import os
import subprocess
import sys

import pytest

from mmcore import api
from mmcore.base.paths import ROOT, TRAINER_DIR
from mmcore.train import commandline, preflight
from trainer.rules import args as trainer_args
from trainer.rules import roots


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """Allowed roots under tmp_path/allowed (data, out, checkpoints); tmp_path/outside is not allowed."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    for folder in (allowed / "data", allowed / "out", outside):
        folder.mkdir(parents=True)
    (allowed / "data" / "p.jsonl").write_text('{"text": "hello"}\n' * 4)
    (outside / "secret.jsonl").write_text('{"text": "secret"}\n')
    (outside / "victim_64.pth").write_bytes(b"a colleague's weights")
    monkeypatch.setenv(roots.READ_ENV, str(allowed / "data"))
    monkeypatch.setenv(roots.WRITE_ENV, os.pathsep.join([str(allowed / "out"), str(ROOT / "checkpoints"),
                                                         str(tmp_path / "home")]))
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return allowed, outside


def values(allowed, **changes):
    v = {"data_path": str(allowed / "data" / "p.jsonl"), "save_dir": str(allowed / "out"), "weight_dir": str(allowed / "out"),
         "hidden_size": "64", "num_hidden_layers": "1", "save_weight": "mine", "from_weight": "none", "device": "cpu"}
    v.update(changes)
    return v


def errors(train_type, v):
    return commandline.check(train_type, v).errors


@pytest.mark.parametrize("field, target", [
    ("save_dir", "{outside}"),  # absolute
    ("save_dir", "{allowed}/out/../../outside"),  # .. out of the root
    ("save_dir", "../../../../../../../tmp"),
    ("data_path", "{outside}/secret.jsonl"),
    ("weight_dir", "{outside}"),
])
def test_paths_outside_the_roots_are_refused(layout, field, target):
    allowed, outside = layout
    path = target.format(allowed=allowed, outside=outside)
    found = errors("pretrain", values(allowed, **{field: path}))
    assert "is outside the folders a job may" in found[field]
    with pytest.raises(api.Refused, match="outside the folders a job may"):
        api.submit("pretrain", values(allowed, **{field: path}))
    assert api.list_jobs() == []


def test_a_symlink_out_of_a_root_is_followed_and_refused(layout):
    allowed, outside = layout
    (allowed / "out" / "link").symlink_to(outside)
    assert "outside the folders a job may write to" in errors("pretrain", values(allowed, save_dir=str(allowed / "out" / "link")))["save_dir"]
    # A weight file planted as a symlink inside the save folder: writing it would overwrite the victim.
    (allowed / "out" / "victim_64.pth").symlink_to(outside / "victim_64.pth")
    found = errors("pretrain", values(allowed, save_weight="victim"))
    assert "resolves to" in found["save_weight"] and str(outside / "victim_64.pth") in found["save_weight"]
    assert (outside / "victim_64.pth").read_bytes() == b"a colleague's weights"


@pytest.mark.parametrize("name", ["../../outside/victim", "/abs/path", "a/b", "..", ".hidden", "x" * 65, "a b", ""])
@pytest.mark.parametrize("field", ["save_weight", "from_weight"])
def test_names_are_plain(layout, field, name):
    allowed, _ = layout
    found = errors("pretrain", values(allowed, **{field: name}))
    if name == "":
        assert field not in found  # empty: the script's default
    else:
        assert field in found, found
        assert "plain name" in found[field] or "at most 64" in found[field]


def test_lora_name_is_plain(layout):
    allowed, _ = layout
    assert "plain name" in errors("lora", values(allowed, lora_name="../x", from_weight="full_sft"))["lora_name"]


def test_preflight_does_not_tell_whether_an_outside_path_exists(layout):
    allowed, outside = layout
    there = preflight.run("pretrain", values(allowed, data_path=str(outside / "secret.jsonl")), 0)
    missing = preflight.run("pretrain", values(allowed, data_path=str(outside / "nothing.jsonl")), 0)
    assert [p.replace("secret", "X").replace("nothing", "X") for p in there] == \
           [p.replace("secret", "X").replace("nothing", "X") for p in missing]
    assert not any("not found" in p or "not usable" in p for p in there + missing)


@pytest.mark.parametrize("field, value, message", [
    ("num_workers", "5000", "at most"),
    ("hidden_size", str(2 ** 31), "at most"),
    ("hidden_size", "100", "multiple of 16"),
    ("epochs", "10000000", "at most"),
    ("max_seq_len", "1000000", "at most"),
])
def test_numbers_are_bounded_in_the_form_the_api_and_the_trainer(layout, field, value, message):
    allowed, _ = layout
    assert message in errors("pretrain", values(allowed, **{field: value}))[field]
    with pytest.raises(api.Refused, match=message):
        api.submit("pretrain", values(allowed, **{field: value}))
    parsed = subprocess.run([sys.executable, "-c", "import sys; from trainer.rules.parsing import parse_args; "
                             "parse_args('pretrain', sys.argv[1:])", f"--{field}", value, "--device", "cpu"],
                            cwd=ROOT, capture_output=True, text=True)
    assert parsed.returncode == 2 and message in parsed.stderr


def test_every_numeric_option_has_an_upper_bound():
    for train_type, args in trainer_args.ARGS.items():
        for a in args:
            if a.type in (int, float) and a.choices is None:
                assert a.max is not None, (train_type, a.name)


def test_a_trainer_started_by_the_dashboard_refuses_paths_outside_the_roots(layout):
    allowed, outside = layout
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "train_pretrain.py", "--save_dir", str(outside), "--data_path", str(allowed / "data" / "p.jsonl"),
            "--hidden_size", "64", "--num_hidden_layers", "1", "--device", "cpu", "--epochs", "1"]
    result = subprocess.run(argv, cwd=TRAINER_DIR, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "--save_dir" in result.stderr and "outside the folders a job may write to" in result.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["secret.jsonl", "victim_64.pth"]  # nothing written
