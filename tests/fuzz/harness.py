"""Fuzz harness: run the CLI in-process on one mutated input with a wall-clock bound and check the contract.

Contract (issue 22): the exit code is 0 or 2; a 2 comes with exactly one ``error:`` line on stderr, a 0 with
none; stderr holds no traceback, usage box, source path (``file.py:12``) or indented continuation line; no case
runs past :data:`CASE_TIMEOUT_S`.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.conftest import CliResult, run_cli

_SOURCE_PATH = re.compile(r"\.py:\d+")
CASE_TIMEOUT_S = 30.0
"""A case running longer than this is a hang (the slowest legitimate case takes well under 2 s on an idle core)."""
CASES: Counter[str] = Counter()
"""Cases run per surface in this session (printed by the fuzz conftest's terminal summary)."""
PROBLEMS: Counter[str] = Counter()
"""Hangs and internal errors (exit 1) seen; each also fails its test."""
CASE_CPU_S: Counter[str] = Counter()
"""CPU seconds of those cases per surface (the summary states the suite's cost too)."""
REPO = Path(__file__).resolve().parents[2]

#: number texts that broke some parser or model once, and their neighbours
HOSTILE_NUMBERS = ["nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity", "1e308", "1e309", "-1", "-0", "0", "0.0",
                   "1e-320", "1.5", "1.5.5", "1.5.5K", "9999999999999999999", str(2**63), str(2**63 - 1), str(2**64),
                   "1e30", "0x10", "1_000", "", " ", "8 ", "\u0663", "1e", "--", "+8", "1,000", "inf1", "1" * 400,
                   "2147483648", "-9223372036854775809", "1e-9", "3", "64"]
#: YAML values for spec fields
HOSTILE_VALUES = [float("nan"), float("inf"), -float("inf"), -1, 0, 0.5, 1e30, 2**63, 2**64, -(2**63) - 1, 10**400,
                  "x", "", "1e30", True, None, [], {}, [1, 2], {"a": 1}, "\u2028", "\x00", 1.5, 1e-300]

FUZZ_SETTINGS = settings(deadline=None, database=None, derandomize=True, print_blob=False,
                         suppress_health_check=list(HealthCheck))


def fuzz_settings(n: int) -> settings:
    return settings(FUZZ_SETTINGS, max_examples=n)


def numbers() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE_NUMBERS), st.integers(-10, 2**65).map(str),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr))


def values() -> st.SearchStrategy[object]:
    return st.one_of(st.sampled_from(HOSTILE_VALUES), st.integers(-(2**70), 2**70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))


class CaseTimeout(BaseException):
    """A case ran past its bound."""


@contextmanager
def bounded(seconds: float = CASE_TIMEOUT_S):
    def expire(_sig, _frame):
        raise CaseTimeout(f"case ran past {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check(r: CliResult, args: tuple[str, ...]) -> CliResult:
    """Assert the contract on one result (message names the args for the report)."""
    where = " ".join(a if len(a) < 60 else a[:57] + "..." for a in args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code in (0, 2), f"exit {r.code} for `{where}`: {r.stderr[-400:]}"
    assert not any(ln.startswith(("Traceback", "internal error", "Usage:", "Try '")) for ln in lines), (where, lines)
    # informational lines (``wrote FILE``) are fine; source paths and indented continuation lines are not
    stray = [ln for ln in lines if ln[:1].isspace() or 'File "' in ln or _SOURCE_PATH.search(ln)]
    assert not stray, f"stderr lines outside the one-line format for `{where}`: {stray[:3]}"
    errors = [ln for ln in lines if ln.startswith("error:")]
    if r.code == 2:
        assert len(errors) == 1, f"exit 2 needs one error line for `{where}`: {lines[:4]}"
    else:
        assert not errors, f"exit 0 with an error line for `{where}`: {errors[:2]}"
    return r


def run(surface: str, *args: str, timeout_s: float = CASE_TIMEOUT_S) -> CliResult:
    """One fuzz case: the CLI in-process, bounded in time, checked against the contract."""
    CASES[surface] += 1
    cpu = time.process_time()
    try:
        with bounded(timeout_s):
            r = run_cli(*args)
    except CaseTimeout:
        PROBLEMS["hangs"] += 1
        raise AssertionError(f"hang: `{' '.join(args)}` ran past {timeout_s:g} s") from None
    finally:
        CASE_CPU_S[surface] += time.process_time() - cpu
    if r.code == 1:
        PROBLEMS["internal errors"] += 1
    return check(r, args)


def write_yaml(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path
