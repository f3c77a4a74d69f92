"""Shared machinery of the trace readers: line accounting (every line read, parsed, skipped by cause or
excluded), opening with clear errors, range-checked numbers and times, CSV rows that resynchronise after a
broken quote, and the final :class:`Trace` (submit times rebased to 0)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched import parse
from clustertwin.sched.jobs import JobRows, Trace, TraceReport


class LineCounter:
    """Count, report and (in strict mode) raise on malformed records."""

    def __init__(self, path: Path, fmt: str, strict: bool) -> None:
        self.report = TraceReport(path=str(path), format=fmt)
        self.strict = strict
        self.path = path

    def bad(self, line_no: int, reason: str, cause: str = "malformed") -> None:
        if self.strict:
            raise SpecError(f"line {line_no}: {reason} (without --strict malformed lines are skipped)",
                            file=str(self.path))
        self.report.bad(line_no, reason, cause)

    def damaged(self, line_no: int, d: parse.Damaged) -> None:
        self.bad(line_no, str(d), d.cause)

    def exclude(self, reason: str) -> None:
        self.report.excluded[reason] += 1


def open_trace(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise SpecError(f"trace not found: {p}")
    if p.is_dir():
        raise SpecError(f"trace is a directory, expected a file: {p}")
    return p


MAX_GPUS_PER_JOB = 1 << 20
"""Largest GPU count a trace record may ask for (larger is out of range, not a job)."""
MAX_TIME_S = 1e11
"""Largest time (s) a trace record may carry (about 3,000 years; ``1e308`` is out of range)."""


def parse_num(text: str, name: str, lo: float = -MAX_TIME_S, hi: float = MAX_TIME_S) -> float:
    return parse.number(text, name, lo=lo, hi=hi)


def to_utc(text: str, fmt: str) -> float:
    """Seconds since the epoch of a naive timestamp read as UTC (deterministic across time zones)."""
    return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()


def trace_csv_rows(p: Path, lines: LineCounter, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Records of a CSV with a header line, as dicts; damaged and wrong-width lines are counted."""
    text = parse.read_lines(p)
    if not text:
        raise SpecError(f"empty file; expected a header with {', '.join(required)}", file=str(p))
    try:
        cols = [c.strip() for c in parse.split_record(text[0])]
    except parse.Damaged as d:
        raise SpecError(f"header line: {d}", file=str(p)) from None
    missing = [c for c in required if c not in cols]
    if missing:
        hint = did_you_mean(missing[0], cols)
        raise SpecError(f"missing columns {missing}{hint}; expected {', '.join(required)}", file=str(p))
    yield from _checked(parse.records(text, 1, first_line_no=1), lines, tuple(cols))


def _checked(records: Iterator[tuple[int, list[str] | None, parse.Damaged | None]], lines: LineCounter, columns: tuple[str, ...],
             skip_header: bool = False) -> Iterator[tuple[int, dict[str, str]]]:
    """Records as dicts by ``columns``; damaged and wrong-width lines are counted, not yielded. With
    ``skip_header`` a first line naming the first column is skipped (not counted)."""
    width = len(columns)
    for line_no, rec, damage in records:
        if skip_header and line_no == 1 and rec and rec[0] == columns[0]:
            continue
        lines.report.lines += 1
        if damage is not None:
            lines.damaged(line_no, damage)
            continue
        if len(rec) != width:
            lines.bad(line_no, f"expected {width} fields, got {len(rec)}", parse.FIELD_COUNT)
            continue
        yield line_no, dict(zip(columns, rec, strict=True))


def fixed_width_rows(p: Path, lines: LineCounter, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Records of a headerless CSV with known ``columns`` (as Alibaba publishes its tables; a header line
    naming the first column is accepted and skipped), as dicts; damaged and wrong-width lines are counted."""
    yield from _checked(parse.records(parse.read_lines(p)), lines, columns, skip_header=True)


def finish_report(rows: JobRows, lines: LineCounter) -> Trace:
    jobs = rows.build(rebase=True)
    lines.report.jobs = len(jobs)
    return Trace(jobs, lines.report)
