"""What the ``sched`` commands share: the output console, comma-separated name lists, finite option checks
and reading a trace (with the synthetic generator's progress bar)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from clustertwin.cli.common import console
from clustertwin.cli.progress import LazyProgress
from clustertwin.cli.terminal import SafeConsole
from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import readers

WIDE_COLUMNS = 180
"""Width used for tables when output is not a terminal (files, pipes), so the metric table stays whole."""


def output_console() -> Console:
    return console if console.is_terminal else SafeConsole(width=WIDE_COLUMNS)


def split_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def checked_names(text: str, choices, what: str) -> list[str]:
    """Comma-separated names, each one of ``choices``; at least one."""
    from clustertwin.errors import did_you_mean

    names = split_list(text)
    if not names:
        raise SpecError(f"--{what} '{text}' names no {what}; choose from {', '.join(choices)}")
    for x in names:
        if x not in choices:
            raise SpecError(f"unknown {what} '{x}'{did_you_mean(x, choices)}; choose from {', '.join(choices)}")
    return names


def check_finite(value: float | None, flag: str, *, positive: bool = True) -> None:
    import math

    if value is None:
        return
    if not math.isfinite(value) or (positive and value <= 0):
        raise SpecError(f"{flag} must be a finite number{' > 0' if positive else ''}, got {value}")


def read_jobs(trace: Path, fmt: str, strict: bool, cl: sched_cluster.SchedCluster, limit_jobs: int | None,
          sensor: Path | None = None):
    if limit_jobs is not None and limit_jobs < 1:
        raise SpecError("--max-jobs must be >= 1")
    from clustertwin.sched.synthetic import GENERATE_STEPS

    with LazyProgress() as bar:  # a bar on stderr once generating a synthetic trace takes over a second
        gen = bar.task("generating synthetic jobs", GENERATE_STEPS) if fmt == "synthetic" else None
        tr = readers.read_trace(trace, fmt, strict=strict, cluster_gpus=cl.total_gpus, max_jobs=limit_jobs,
                                sensor=sensor, progress=gen)
    if limit_jobs is not None:
        jobs = tr.jobs.subset(slice(0, limit_jobs))
        tr.report.excluded["beyond --max-jobs"] += len(tr.jobs) - len(jobs)
        return jobs, tr.report
    return tr.jobs, tr.report
