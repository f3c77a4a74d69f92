"""Fuzz suite: print how many cases ran per surface (the suite's size is part of its contract)."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from tests.fuzz.harness import CASES

    if CASES:
        per = ", ".join(f"{k} {v}" for k, v in sorted(CASES.items()))
        terminalreporter.write_line(f"fuzz cases: {sum(CASES.values())} ({per})")
