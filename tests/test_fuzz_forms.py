"""Fuzz every training type's form values (hypothesis): the checks never crash, whatever they accept
the trainer's own parser accepts too, and nothing accepted reads or writes outside the allowed folders."""
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmcore.access import dashboard_roots as dashboard_roots
from mmcore.train import commandline, preflight, train_types
from mmcore.train.preset_table import demo_preset
from trainer.rules import args as trainer_args
from trainer.rules import job_paths, roots, specs

PATHS = ["../out", "../out/demo", "../dataset/demo/pretrain.jsonl", "../dataset/demo/sft.jsonl", "../checkpoints",
         "/etc", "/etc/passwd", "../../", "../out/../../x", "/tmp/x", "~/x", "../out/a b", "..", "", "none",
         "../model", "../../internlm2-1_8b-reward", "-rf", "a\nb", "../out/\x00"]
NAMES = ["pretrain", "full_sft", "x", "a.b-c_d", "../x", "/abs", "a/b", "..", ".hidden", "x" * 70, "", "none",
         "名字", "a b", "-x"]
NUMBERS = ["0", "1", "-1", "2", "8", "16", "64", "100", "512", "5000", "2147483648", "1e-3", "0.5", "nan", "inf",
           "-0", "1e309", "x", "", " 7 "]


def value_strategy(p):
    if p.kind == "name":
        return st.one_of(st.sampled_from(NAMES), st.text(max_size=12))
    if p.kind in ("read", "write"):
        return st.one_of(st.sampled_from(PATHS), st.text(max_size=12))
    if p.type in (int, float):
        return st.one_of(st.sampled_from(NUMBERS), st.integers(-10, 10 ** 10).map(str),
                         st.floats(allow_nan=True).map(repr))
    if p.widget in ("select", "checkbox") or p.type is bool:
        return st.one_of(st.sampled_from(list(p.choices or ()) + ["0", "1", "yes", "maybe", ""]).map(str))
    return st.text(max_size=16)


def form_strategy(train_type):
    """The type's demo preset with a few fields replaced by fuzz (so that many forms pass and reach
    the trainer's parser), or fuzz in every field."""
    params = [p for p in train_types.get_type(train_type).params if p.name != "device"]
    fuzz = st.fixed_dictionaries({}, optional={p.name: value_strategy(p) for p in params})
    base = {**demo_preset(train_type), "device": "cpu"}
    few = st.lists(st.sampled_from(params), max_size=3, unique_by=lambda p: p.name).flatmap(
        lambda chosen: st.fixed_dictionaries({p.name: value_strategy(p) for p in chosen}))
    return st.one_of(few.map(lambda changes: {**base, **changes}),
                     fuzz.map(lambda values: {"device": "cpu", **values}))


def inside(path, allowed):
    return any(path == r or r in path.parents for r in allowed)


def check_one(train_type, values):
    """True when the dashboard accepted the values (and everything below held)."""
    checked = commandline.check(train_type, values)  # must not raise, whatever the values
    preflight.problems(checked, gpu_count=0)  # nor the file-system checks
    if not checked.ok:
        return False
    argv = commandline.command_of(checked).argv
    script = argv.index(f"../trainer/{specs.spec(train_type).script}")
    parser = trainer_args.build_parser(train_type)
    try:
        parsed = vars(parser.parse_args(argv[script + 1:]))
    except SystemExit:
        pytest.fail(f"the trainer's parser rejects what the dashboard accepted: {argv}")
    assert trainer_args.cross_errors(train_type, parsed) == {}, argv
    in_force = dashboard_roots.current()
    assert job_paths.path_errors(train_type, parsed, in_force) == {}, argv
    for arg in trainer_args.ARGS[train_type]:
        if arg.kind in ("read", "write") and not roots.skip_path(arg, parsed[arg.name]):
            path = roots.resolved(parsed[arg.name])
            allowed = in_force.write if arg.kind == "write" else in_force.read + in_force.write
            assert inside(path, allowed), (arg.name, path)
    spec = specs.spec(train_type)
    for name in spec.weight_files(parsed):
        assert inside(roots.resolved(os.path.join(parsed["save_dir"], name)), in_force.write)
    assert inside(roots.resolved(os.path.join(specs.CHECKPOINT_DIR, spec.resume_file(parsed))), in_force.write)
    return True


@pytest.mark.parametrize("train_type", list(train_types.TYPES))
def test_fuzz_form_values(train_type, monkeypatch):
    defaults = roots.default_roots()
    monkeypatch.setenv(roots.READ_ENV, os.pathsep.join(map(str, defaults.read)))
    monkeypatch.setenv(roots.WRITE_ENV, os.pathsep.join(map(str, defaults.write)))

    accepted = []

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(form_strategy(train_type))
    def run(values):
        accepted.append(check_one(train_type, values))

    run()
    assert any(accepted), "no fuzzed form was accepted: the trainer-side checks were never reached"
