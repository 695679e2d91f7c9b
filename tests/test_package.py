"""The installed package (`pip install -e .`): its two commands work from any folder."""
import os
import shutil
import subprocess
import urllib.request

import pytest
from _browser_helpers import StreamlitServer

from mmcore.base.paths import ROOT

pytestmark = pytest.mark.skipif(shutil.which("minimind") is None, reason="needs `pip install -e .`")


def test_minimind_is_python_m_mmcore(tmp_path):
    """`minimind` takes the same subcommands as `python -m mmcore`, from any working directory."""
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(tmp_path / "home")}
    listed = subprocess.run(["minimind", "queue"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    usage = subprocess.run(["minimind", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0 and all(c in usage.stdout for c in ("submit", "queue", "export", "restore"))
    bad = subprocess.run(["minimind", "status", "424242"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and "424242" in bad.stderr and "Traceback" not in bad.stderr


def test_minimind_dashboard_serves_the_app_with_streamlits_options(tmp_path):
    """Started from another folder, with Streamlit's own options passed through."""
    with StreamlitServer(tmp_path, tmp_path / "home", tmp_path / "server.log", launcher=["minimind-dashboard"]) as server:
        with urllib.request.urlopen(server.url, timeout=10) as reply:
            assert reply.status == 200 and "<html" in reply.read().decode().lower()
        assert f":{server.port}" in server.output()  # the --server.port option reached Streamlit
    assert (ROOT / "streamlit_app.py").is_file()
