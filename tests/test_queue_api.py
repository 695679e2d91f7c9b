"""The queue through the public API and CLI: backend and GPUs on submit, queue fields on get."""
import os
import subprocess
import sys

import pytest
from _runner_helpers import wait_for

from mmcore import api
from mmcore.base.paths import ROOT
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import queueconf
from mmcore.train import preset_table

# Its jobs write fixed names under the repository's out/ and checkpoints/, which every test's teardown
# removes: in parallel runs (pytest-xdist, --dist loadgroup) the file's tests share one worker.
pytestmark = pytest.mark.xdist_group("test_queue_api")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"
    # The API keeps jobs inside the repository's out/ and checkpoints/: leave them as they were.
    for name in ("api_queue", "cli_queue"):
        for path in (ROOT / "out" / "demo" / f"{name}_64.pth", ROOT / "checkpoints" / f"{name}_64_resume.pth"):
            path.unlink(missing_ok=True)


def test_get_reports_backend_and_queue_fields(home):
    job_id = api.submit("pretrain", {**preset_table.demo_preset("pretrain"), "save_weight": "api_queue", "epochs": "1",
                                     "device": "cpu"})
    job = api.get(job_id)
    assert job["backend"] == "local" and job["external_id"] is None
    assert job["status"] == "queued" and job["queue_reason"]  # in the queue until the scheduler starts it
    wait_for(lambda: api.get(job_id)["status"] != "queued", 60, what="the queue to start it")
    assert api.get(job_id)["queue_reason"] is None
    assert api.stop(job_id, wait=True)
    assert api.get(job_id)["status"] in ("stopped", "succeeded")


def test_gpus_beyond_the_machine_are_refused(home):
    with pytest.raises(api.Refused, match="GPU"):
        api.submit("pretrain", preset_table.demo_preset("pretrain"), gpus=2)
    with pytest.raises(api.Refused, match="backend"):
        api.submit("pretrain", preset_table.demo_preset("pretrain"), backend="cloud")
    assert JobStore(home / "jobs.db").count() == 0


def test_cli_submit_takes_backend_and_gpus_and_status_shows_them(home):
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "mmcore", "submit", "pretrain", "--gpus", "1",
                          "--set", "data_path=../dataset/demo/pretrain.jsonl"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "GPU" in out.stderr  # no GPU on this machine: refused, nothing queued
    queueconf.save(home, queueconf.QueueSettings(cpu_slots=1))
    out = subprocess.run([sys.executable, "-m", "mmcore", "submit", "pretrain", "--backend", "local",
                          "--set", "device=cpu", "--set", "epochs=1", "--set", "hidden_size=64",
                          "--set", "num_hidden_layers=2", "--set", "save_dir=../out/demo",
                          "--set", "save_weight=cli_queue", "--set", "data_path=../dataset/demo/pretrain.jsonl"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip())
    status = subprocess.run([sys.executable, "-m", "mmcore", "status", str(job_id)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60).stdout
    assert "backend: local" in status and "queue_reason:" in status
    api.stop(job_id, wait=True)


def test_queue_listing_moves_and_priorities_from_the_cli(home):
    store = JobStore(home / "jobs.db")
    ids = [store.create("pretrain", f"w{i}", {**preset_table.demo_preset("pretrain"), "save_weight": f"w{i}"},
                        # GPU 0 is not on this machine: they wait, whatever the scheduler does.
                        ["python3", "x.py"], "/tmp", {}, user="bob", waiting=1, resources={"gpu_ids": [0]},
                        queue_reason=f"#{i + 1} in the queue · waiting for a CPU slot") for i in range(3)]
    assert [j["id"] for j in api.queue()] == ids
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "mmcore", "queue", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)

    listed = cli()
    assert listed.returncode == 0 and "#2 in the queue" in listed.stdout
    assert cli(str(ids[2]), "--move", "top").returncode == 0
    assert cli(str(ids[0]), "--priority", "5").returncode == 0  # the OS user is this store's admin
    assert [j["id"] for j in api.queue()] == [ids[0], ids[2], ids[1]]
    assert api.get(ids[0])["priority"] == 5
    store.cancel_waiting(ids[1])
    out = cli(str(ids[1]), "--move", "up")
    assert out.returncode == 1 and "not waiting" in out.stdout
