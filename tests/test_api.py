"""mmcore.api and `python -m mmcore`: real store, real supervisors, real trainers (stopped at once)."""
import os
import subprocess
import sys

import pytest

from mmcore import api
from mmcore.access import audit, roles
from mmcore.base.paths import ROOT
from mmcore.train.preset_table import demo_preset


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    return tmp_path / "home"


@pytest.fixture
def team(home):
    (home).mkdir(parents=True, exist_ok=True)
    (home / "roles.toml").write_text(
        'default = "viewer"\n[users]\nalice = "member"\nbob = "member"\nroot-admin = "admin"\n')
    return home


def tiny(**extra):
    values = demo_preset("pretrain")
    values.update({"epochs": "1", "save_weight": "api_test", **extra})
    return values


def cli(*args, env_home):
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(env_home)}
    env.pop(roles.ROLES_ENV, None)
    return subprocess.run([sys.executable, "-m", "mmcore", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_submit_get_stop_delete_as_the_os_user(home):
    job_id = api.submit("pretrain", tiny(), name="api-run")
    job = api.get(job_id)
    assert job["owner"] == roles.os_user() and job["name"] == "api-run"
    assert job["status"] in ("queued", "running") and job["log_path"].endswith(f"job-{job_id}.log")
    assert api.stop(job_id, grace=5, wait=True) is True
    assert api.get(job_id)["status"] == "stopped"
    assert api.stop(job_id) is False  # already ended
    api.delete(job_id)
    with pytest.raises(api.NotFound, match=f"no job with id {job_id}"):
        api.get(job_id)
    actions = [(e["action"], e["user"]) for e in api.history(job_id)]
    assert actions == [("delete", roles.os_user()), ("stop", roles.os_user()), ("stop", roles.os_user()),
                       ("launch", roles.os_user())]


def test_missing_fields_take_the_scripts_defaults_and_unknown_ones_are_refused(home):
    with pytest.raises(api.Refused, match="has no field 'lr'"):
        api.submit("pretrain", tiny(lr="1"))
    with pytest.raises(api.Refused, match="unknown training type"):
        api.submit("pretrain2", {})
    with pytest.raises(api.Refused, match="Base weight not found"):  # sft starts from pretrain by default
        api.submit("sft", {"data_path": "../dataset/demo/sft.jsonl", "hidden_size": "64", "weight_dir": "../out/none-here"})
    assert api.list_jobs() == []


def test_members_act_on_their_own_jobs_only_and_viewers_only_look(team):
    job_id = api.submit("pretrain", tiny(), user="alice")
    try:
        with pytest.raises(api.Refused, match="belongs to alice"):
            api.stop(job_id, user="bob")
        with pytest.raises(api.Refused, match="viewer and may not launch"):
            api.submit("pretrain", tiny(save_weight="carol"), user="carol")
        with pytest.raises(api.Refused, match="viewer and may not stop"):
            api.stop(job_id, user="carol")
        assert api.get(job_id)["status"] in ("queued", "running")
        assert api.stop(job_id, user="alice", grace=5, wait=True)
        with pytest.raises(api.Refused, match="belongs to alice"):
            api.delete(job_id, user="bob")
        assert [j["owner"] for j in api.list_jobs()] == ["alice"]
        api.delete(job_id, user="root-admin")  # an admin may delete anyone's job
    finally:
        if api.list_jobs(status=["queued", "running"]):
            api.stop(job_id, user="root-admin", grace=2, wait=True)
    trail = [(e.user, e.action) for e in audit.entries(job_id, home=team)]
    assert trail == [("root-admin", "delete"), ("alice", "stop"), ("alice", "launch")]


def test_cli_submit_status_list_and_refusals(home):
    ok = cli("submit", "pretrain", *sum((["--set", f"{k}={v}"] for k, v in tiny().items()), []),
             "--name", "from-cli", env_home=home)
    assert ok.returncode == 0, ok.stderr
    job_id = int(ok.stdout)
    status = cli("status", str(job_id), env_home=home)
    assert f"owner: {roles.os_user()}" in status.stdout and "name: from-cli" in status.stdout
    listed = cli("list", env_home=home)
    assert "from-cli" in listed.stdout
    stopped = cli("stop", str(job_id), "--wait", "--grace", "5", env_home=home)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    other = cli("stop", str(job_id), "--user", "mallory", env_home=home)
    assert other.returncode == 1 and "mallory is a viewer" in other.stderr
    bad = cli("submit", "pretrain", "--set", "lr", env_home=home)
    assert bad.returncode == 2 and "name=value" in bad.stderr


@pytest.mark.parametrize("content", [b"", b"this is not a database" * 100])
def test_cli_list_says_when_the_store_cannot_be_read(tmp_path, content):
    home = tmp_path / "broken"
    home.mkdir()
    (home / "jobs.db").write_bytes(content)
    (home / "logs").mkdir()
    (home / "logs" / "job-1.log").write_text("# job 1\n")
    result = cli("list", env_home=home)
    assert result.returncode != 0
    assert "job store" in result.stderr and "Traceback" not in result.stderr
