"""Write roots are part of every act that writes (`mmcore.actions.core.write_root`), whichever door asks:
`mmcore.api`, `python -m mmcore`, or a page (the act called with entry "page", as the widgets call it).

A property test sends hostile paths (`..`, absolute, a symlink out, `~`, NUL, very long) through every
writing act at every entry and finds nothing written outside the roots; the probe's four export paths are
refused and write nothing, waited for or queued.
"""
import os
from pathlib import Path

import pytest
from _runner_helpers import home_with_roles
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmcore import api, cli
from mmcore.access import audit
from mmcore.actions import core, data_acts, model_acts, run_acts, view_acts
from mmcore.actions.core import PAGE
from mmcore.jobs.jobstore import JobStore
from trainer.rules import roots as trainer_roots
from trainer.rules.records import RunRecords

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=20).filter(
    lambda s: s not in (".", ".."))


def tree(folder):
    """Every path under `folder` (links not followed) with its size: what an act could have written."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            found[str(path)] = path.lstat().st_size if not path.is_dir() else -1
    return found


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A write root (the only one), a folder outside it that a symlink in the root and `~` lead to, a
    member's dashboard home, and a working directory inside the root."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "work").mkdir(parents=True)
    (outside / "home").mkdir(parents=True)
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "w_64.pth").write_bytes(b"not loaded: refused first")
    home = home_with_roles(tmp_path, monkeypatch, mia="member")
    monkeypatch.setenv(trainer_roots.WRITE_ENV, str(root))
    monkeypatch.setenv("HOME", str(outside / "home"))
    monkeypatch.chdir(root / "work")
    return {"root": root, "outside": outside, "home": home, "weight": str(root / "w_64.pth"),
            "run": one_step_run(tmp_path / "run")}


def one_step_run(run_dir):
    """An RL run's records with one group of two rollouts: what `prompts --export` exports from."""
    records = RunRecords(run_dir, "grpo", rollouts=True, meta={"group_size": 2, "reasoning": 0})
    records.add_rollouts(1, 0, [[{"prompt": "1+1=?", "reference": "2", "response": answer, "reward": reward,
                                  "advantage": reward - 0.5, "length": 1, "truncated": False, "parts": {"rule": reward}}
                                 for answer, reward in (("2", 1.0), ("3", 0.0))]])
    records.close()
    return str(run_dir)


def hostile(world):
    """Paths that lead outside the root (or are no usable path), each built a different way."""
    outside = world["outside"]
    up = os.path.relpath(outside, world["root"] / "work")  # ../../outside from the working directory
    return st.one_of(
        NAMES.map(lambda n: str(outside / n)),  # absolute
        st.tuples(NAMES, st.integers(0, 3)).map(lambda p: "a/" * p[1] + "../" * p[1] + f"{up}/{p[0]}"),  # ..
        NAMES.map(lambda n: f"../link/{n}"),  # a symlink in the root that points out
        NAMES.map(lambda n: f"~/{n}"),  # the home folder
        NAMES.map(lambda n: f"../out\0{n}"),  # NUL
        st.integers(256, 400).map(lambda k: "x" * k),  # a name longer than the file system takes
        st.integers(1100, 1300).map(lambda k: "/".join(["abcd"] * k)),  # a path longer than PATH_MAX
    )


def _acts(world, path):
    """Each writing act at each entry, asked to write `path`: (label, whether it refused)."""
    weight, home = world["weight"], world["home"]
    store = JobStore(home / "jobs.db")
    outcomes = []

    def api_call(**kw):
        try:
            api.export(weight, path, user="mia", **kw)
        except api.Refused:
            return True
        return False

    outcomes.append(("api export", api_call()))
    outcomes.append(("api export wait=False", api_call(wait=False)))
    outcomes.append(("cli export", cli.main(["export", weight, path, "--user", "mia"]) == 1))
    outcomes.append(("page export", model_acts.export("mia", weight, path, home, entry=PAGE).refused))
    outcomes.append(("page export job", model_acts.launch_export(store, "mia", weight, path, entry=PAGE).refused))
    outcomes.append(("page import", model_acts.import_weight("mia", weight, path, home, entry=PAGE).refused))
    run = world["run"]
    try:
        api.export_prompts(run, path, user="mia")
        outcomes.append(("api prompts export", False))
    except api.Refused:
        outcomes.append(("api prompts export", True))
    outcomes.append(("cli prompts export", cli.main(["prompts", run, "--export", path, "--user", "mia"]) == 1))
    outcomes.append(("page prompts export", run_acts.export_prompts(run, path, user="mia", entry=PAGE,
                                                                    home=home).refused))
    return outcomes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_paths_are_refused_at_every_door_and_nothing_lands_outside(world, data):
    path = data.draw(hostile(world))
    before_out, before_root = tree(world["outside"]), tree(world["root"])
    for label, was_refused in _acts(world, path):
        assert was_refused, f"{label} accepted {path!r}"
    assert tree(world["outside"]) == before_out
    assert tree(world["root"]) == before_root  # refused means nothing written, inside the root either
    assert api.list_jobs() == []  # no export job was queued


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_uploads_named_by_hostile_paths_stay_in_their_owners_folder(world, data):
    """An upload's name is a name, not a path: whatever it says, the file lands in the uploader's folder."""
    name = data.draw(hostile(world)) + data.draw(st.sampled_from([".jsonl", ".log"]))
    before_out = tree(world["outside"])
    for act in (data_acts.upload_data, view_acts.upload_log):
        outcome = act(world["home"], b'{"text": "hi"}\n', name, "mia", entry=PAGE)
        if outcome.done:
            assert world["home"].resolve() in Path(outcome.value).resolve().parents
    assert tree(world["outside"]) == before_out


def test_a_path_inside_the_root_passes_and_resolves_as_the_write_will(world):
    assert core.write_root("new/folder") == world["root"] / "work" / "new" / "folder"
    assert core.write_root(world["root"] / "work" / ".." / "x") == world["root"] / "x"
    assert core.write_refusal(world["root"] / "link" / ".." / "x") is not None  # `..` of the link's target
    assert core.write_refusal(world["outside"] / "x") is not None
    assert core.write_refusal(world["home"] / "uploads", roots=[world["home"]]) is None
    # the run the property test's prompt exports name does export inside the root: their refusals are the roots'
    assert api.export_prompts(world["run"], "prompts.jsonl", user="mia") == 1
    assert (world["root"] / "work" / "prompts.jsonl").is_file()


def test_the_cli_refusal_keeps_its_message_and_the_act_keeps_the_attempt(world, capsys):
    assert cli.main(["export", world["weight"], str(world["outside"] / "x"), "--user", "mia"]) == 1
    err = capsys.readouterr().err
    assert "is outside the folders a job may write to" in err and str(world["root"]) in err
    kept = audit.refusals(home=world["home"])
    assert kept and kept[0].action == "export" and kept[0].entry == "cli" and "outside the folders" in kept[0].reason
    assert audit.entries(home=world["home"]) == []  # refused: no act in the trail


@pytest.mark.parametrize("wait", [True, False])
def test_the_probe_export_paths_are_refused_and_write_nothing(tmp_path, monkeypatch, wait):
    """The four paths of the probe, with the default roots (out/, checkpoints/, the home's records/)."""
    home = home_with_roles(tmp_path, monkeypatch, bob="member")
    monkeypatch.delenv(trainer_roots.WRITE_ENV, raising=False)
    monkeypatch.chdir(trainer_roots.REPO)
    elsewhere = tmp_path / "elsewhere"
    paths = ["out/hf/../../../escape", str(elsewhere), str(home / "records" / ".." / "exp"),
             str(trainer_roots.REPO.parent / "escape")]
    before = {p: Path(p).resolve().exists() for p in paths}
    for path in paths:
        with pytest.raises(api.Refused, match="outside the folders a job may write to"):
            api.export("out/demo/bobrun_64.pth", path, user="bob", wait=wait)
    assert {p: Path(p).resolve().exists() for p in paths} == before
    assert not elsewhere.exists() and not (home / "exp").exists()
    assert api.list_jobs() == []


def test_an_import_inside_the_root_writes_where_it_was_checked(world, tmp_path):
    """The importer runs in the repository root: it is handed the prefix as the act resolved and checked it
    (relative to the caller's working directory), so it writes there and nowhere else."""
    from _trainer_helpers import save_random_weights

    source = save_random_weights(tmp_path / "weights", "upstream", seed=1)
    before_out = tree(world["outside"])
    code, output = model_acts.import_weight("mia", str(source), "imported", world["home"], entry=PAGE).value
    assert code == 0, output
    assert (world["root"] / "work" / "imported_64.pth").is_file()
    assert tree(world["outside"]) == before_out
