"""`make demo` on a fresh clone: creates its virtualenv, installs, and prints the reference plan."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from tests.conftest import ROOT

DEMO_TIMEOUT_S = 600


@pytest.mark.slow
def test_make_demo_on_a_fresh_clone_prints_the_reference_plan(tmp_path):
    if not (ROOT / ".git").exists() or shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("needs a git checkout, git and make")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(clone)], check=True,
                   timeout=120)
    res = subprocess.run(["make", "demo"], cwd=clone, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    for section in ("compute", "memory", "network", "storage", "facility", "cost"):
        assert section in out
    assert "ref-1k-h100" in out and "dgx-h100" in out and "IT power, kW" in out
    assert (clone / ".venv" / "bin" / "clustertwin").exists()
