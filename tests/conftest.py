"""Test-wide setup: keep every test's dashboard state out of the repository's runs/ folder."""
import os
import tempfile

import pytest

from trainer.rules import roots as _roots

# Set before any test imports mmcore, so a JobStore() without a path lands in a throwaway folder.
os.environ.setdefault("MINIMIND_DASHBOARD_HOME", tempfile.mkdtemp(prefix="minimind-test-home-"))
_defaults = _roots.default_roots()
_tmp = os.path.realpath(tempfile.gettempdir())
# Jobs may use the temporary folder too (tests keep their data, weights and records there), beside
# the default roots; tests of the roots themselves set these variables as they need.
os.environ.setdefault(_roots.READ_ENV, os.pathsep.join([*map(str, _defaults.read), _tmp]))
os.environ.setdefault(_roots.WRITE_ENV, os.pathsep.join([*map(str, _defaults.write), _tmp]))
# Two cores: keep torch from oversubscribing them when several test processes run trainers.
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory):
    """Tiny reason_64.pth and grpo_64.pth trained by the real trainers, attributed to jobs in the test store
    (see _models_helpers); shared by every test of a session that needs them."""
    from _models_helpers import train_demo_models

    from mmcore.jobs.jobstore import JobStore
    return train_demo_models(tmp_path_factory.mktemp("demo-models"), JobStore())
