"""Test-wide setup: keep every test's dashboard state out of the repository's runs/ folder."""
import os
import tempfile

# Set before any test imports mmcore, so a JobStore() without a path lands in a throwaway folder.
os.environ.setdefault("MINIMIND_DASHBOARD_HOME", tempfile.mkdtemp(prefix="minimind-test-home-"))
# Two cores: keep torch from oversubscribing them when several test processes run trainers.
os.environ.setdefault("OMP_NUM_THREADS", "2")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory):
    """Tiny reason_64.pth and grpo_64.pth trained by the real trainers, attributed to jobs in the test store
    (see _models_helpers); shared by every test of a session that needs them."""
    from _models_helpers import train_demo_models
    from mmcore.store import JobStore
    return train_demo_models(tmp_path_factory.mktemp("demo-models"), JobStore())
