"""Shared fixtures: paths to the shipped validation data and traces, and a CLI runner that captures exit codes."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (CI time stays predictable, a failure reproduces);
# a test's own @settings changes only what it names.
settings.register_profile("seeded", derandomize=True, database=None, print_blob=True)
settings.load_profile("seeded")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# The calibration cases and the small real traces ship with the repository (validation/, examples/traces/),
# so a fresh clone checks the twin's accuracy with nothing beside it.
VALIDATION = ROOT / "validation"
TRACES = EXAMPLES / "traces"
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
    """The shipped validation/trace file; its absence is a packaging defect, so the test fails."""
    if not path.exists():
        pytest.fail(f"validation/trace data missing from the repository: {path}")
    return path
