"""What the Slurm tests share: the one-node cluster of .ci/slurm-up.sh, a dashboard home on the 'shared
filesystem' (this machine) that cancels what its jobs left, and the values of a tiny CPU pretrain.

    from _slurm_helpers import cluster, home, needs_slurm, pretrain_values   # fixtures by import
"""
import os
import shutil
import subprocess

import pytest
from _trainer_helpers import DEMO, head_jsonl

from mmcore.access import roles
from mmcore.base.paths import ROOT
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import backends, resources
from mmcore.train import preset_table

needs_slurm = pytest.mark.skipif(not shutil.which("sbatch") or not shutil.which("slurmctld"),
                                 reason="Slurm is not installed (Debian packages slurmctld slurmd slurm-client munge; "
                                        ".ci/run installs them)")


@pytest.fixture(scope="module")
def cluster():
    """A running one-node Slurm: the one .ci/run started, else started here (idempotent)."""
    up = subprocess.run(["bash", str(ROOT / ".ci" / "slurm-up.sh")], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    return up.stdout.strip().splitlines()[-1]


@pytest.fixture
def home(tmp_path, cluster, monkeypatch):
    """The dashboard's home (its job store) under tmp_path, with no roles file; afterwards its active jobs are
    cancelled and its jobs' resume files removed."""
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    store = JobStore(tmp_path / "home" / "jobs.db")
    yield store
    for job in store.list(limit=None):
        if job.active and job.external_id:
            subprocess.run(["scancel", job.external_id], check=False)
        for path in resources.output_paths(job):
            if "checkpoints" in path:
                for f in (path, path + ".tmp"):
                    if os.path.exists(f):
                        os.remove(f)


def pretrain_values(tmp_path, name, lines=48, **changes):
    """The form values of a tiny CPU pretrain on the demo file's first `lines` lines (48 lines, batch 8: six
    steps), saving `<name>_<pid>_64.pth` under tmp_path/out."""
    data = head_jsonl(DEMO / "pretrain.jsonl", tmp_path / f"{name}{lines}.jsonl", lines)
    return {**preset_table.demo_preset("pretrain"), "data_path": str(data), "save_dir": str(tmp_path / "out"),
            "save_weight": f"{name}_{os.getpid()}", "batch_size": "8", "epochs": "1", "log_interval": "1",
            "save_interval": "1", "device": "cpu", **changes}


def finished(store, job_id):
    """The job once Slurm's view of it says it ended (after reconciling), else None: a wait_for condition."""
    backends.refresh(store)
    job = store.get(job_id)
    return job if job.finished else None
