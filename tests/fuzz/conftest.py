"""Fuzz suite: print how many cases ran per surface and their CPU time (the suite's size is part of its
contract), summed over xdist workers when the suite runs in parallel."""

from __future__ import annotations

from collections import Counter

import pytest

_TOTAL: Counter[str] = Counter()
_CPU: Counter[str] = Counter()
_PROBLEMS: Counter[str] = Counter()


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.fuzz.harness import CASE_CPU_S, CASES, PROBLEMS

    out = getattr(session.config, "workeroutput", None)
    if out is not None:  # an xdist worker: hand the counts to the controller
        out["fuzz_cases"] = dict(CASES)
        out["fuzz_cpu_s"] = dict(CASE_CPU_S)
        out["fuzz_problems"] = dict(PROBLEMS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    out = getattr(node, "workeroutput", {})
    _TOTAL.update(out.get("fuzz_cases", {}))
    _CPU.update(out.get("fuzz_cpu_s", {}))
    _PROBLEMS.update(out.get("fuzz_problems", {}))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from tests.fuzz.harness import CASE_CPU_S, CASES, PROBLEMS

    cases, cpu = _TOTAL + Counter(CASES), _CPU + Counter(CASE_CPU_S)
    problems = _PROBLEMS + Counter(PROBLEMS)
    if cases:
        per = ", ".join(f"{k} {v}" for k, v in sorted(cases.items()))
        terminalreporter.write_line(f"fuzz cases: {sum(cases.values())} in {sum(cpu.values()):.1f} s CPU, "
                                    f"{problems['hangs']} hangs, {problems['internal errors']} internal errors "
                                    f"({per})")
