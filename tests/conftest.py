"""Shared fixtures: paths to shared validation data and a CLI runner that captures exit codes."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CLUSTERTWIN_SHARED", ROOT.parent / "shared"))
VALIDATION = SHARED / "validation"
TRACES = SHARED / "traces"
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliResult:
    """Run ``clustertwin ARGS`` in-process and capture stdout, stderr and the exit code."""
    from clustertwin.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_cli


def need_shared(path: Path) -> Path:
    """The shared validation/trace file, or skip (fail in CI, where the shared data lies beside the clone)."""
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"shared data not present in CI: {path}")
        pytest.skip(f"shared data not present: {path.name}")
    return path
