"""Test-wide setup: keep every test's dashboard state out of the repository's runs/ folder."""
import os
import tempfile

# Set before any test imports mmcore, so a JobStore() without a path lands in a throwaway folder.
os.environ.setdefault("MINIMIND_DASHBOARD_HOME", tempfile.mkdtemp(prefix="minimind-test-home-"))
# Two cores: keep torch from oversubscribing them when several test processes run trainers.
os.environ.setdefault("OMP_NUM_THREADS", "2")
