"""A set of profiler traces (one file per rank, or a folder of them) -> per rank, per step terms and the skew
between ranks.

Files: ``*.json``, ``*.json.gz`` (PyTorch profiler / Kineto, e.g. ``rank0.pt.trace.json.gz``) and
``*.sqlite`` (Nsight Systems ``nsys export --type sqlite``); a folder is searched recursively for them.
A file that cannot be read at all is reported with its cause, not raised; a path that does not exist, or
a set in which no file holds a single event, is one :class:`~clustertwin.errors.SpecError` line.

Skew between ranks, per step number present on two or more ranks (``ProfilerStep#N`` numbers are global
to a run): ``wall_spread_s`` (longest minus shortest step window), ``compute_spread_s`` (most minus least
compute: the rank with the most is the straggler the others wait for, ``slowest_rank``), and
``end_spread_s``, the spread of the step ends on the ranks' common clock (``baseTimeNanoseconds`` + ``ts``):
the ranks leave a step together when a collective closes it, so a spread larger than the longest step
means the ranks' clocks disagree, and it is reported as a clock offset, not as skew.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.profile.hta_compat import hta_figures
from clustertwin.profile.kineto import read_kineto
from clustertwin.profile.steps import rank_steps
from clustertwin.profile.trace import RankTrace

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")
US = 1e-6


@dataclass
class RankResult:
    """One file's figures: its steps (see :func:`~.steps.step_terms`), HTA's whole-trace figures, what the
    reader skipped."""

    source: str
    rank: int | None
    world_size: int | None
    backend: str
    cpu_mode: bool
    steps: list[dict[str, Any]]
    hta: dict[str, Any] | None
    groups: dict[str, dict[str, Any]]
    damage: dict[str, int]
    events: int
    base_time_ns: int | None = None

    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else Path(self.source).name

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "rank": self.rank, "world_size": self.world_size, "backend": self.backend,
                "cpu_mode": self.cpu_mode, "events_read": self.events, "damage": self.damage,
                "groups": self.groups, "hta": self.hta, "steps": self.steps}


@dataclass
class ProfileReport:
    ranks: list[RankResult]
    skew: list[dict[str, Any]] = field(default_factory=list)
    damage: dict[str, int] = field(default_factory=dict)
    """Damage summed over every file (cause -> count)."""

    def to_dict(self) -> dict[str, Any]:
        return {"files": len(self.ranks), "damage": self.damage, "ranks": [r.to_dict() for r in self.ranks],
                "skew": self.skew}


def trace_files(paths: list[Path]) -> list[Path]:
    """The trace files named or found (recursively, sorted) under ``paths``; SpecError for a missing path or
    a folder without one."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise SpecError(f"{p}: no trace files (*.json, *.json.gz, *.sqlite) in this folder")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise SpecError(f"{p}: no such file or folder")
    return list(dict.fromkeys(out))


def read_trace(path: Path, step_range: str | None = None) -> list[RankTrace]:
    """One file, by its kind (SQLite header -> Nsight Systems export, one trace per GPU; otherwise Kineto
    JSON)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(16)
    except OSError as e:
        t = RankTrace(source=str(path))
        t.damage[f"unreadable file ({type(e).__name__})"] += 1
        return [t]
    if magic.startswith(b"SQLite format 3"):
        from clustertwin.profile.nsys import read_nsys

        return read_nsys(path, step_range=step_range)
    return [read_kineto(path, step_range=step_range)]


def _result(trace: RankTrace) -> RankResult:
    steps = rank_steps(trace)
    return RankResult(trace.source, trace.rank, trace.world_size, trace.backend, trace.cpu_mode, steps,
                      hta_figures(trace), trace.groups, dict(trace.damage), sum(trace.event_kinds.values()),
                      trace.base_time_ns)


def skew(ranks: list[RankResult]) -> list[dict[str, Any]]:
    """Per step number on two or more ranks: spreads of wall, compute and end time (module docstring)."""
    by_step: dict[int, list[tuple[RankResult, dict[str, Any]]]] = {}
    for r in ranks:
        for s in r.steps:
            if s["name"] != "trace":
                by_step.setdefault(s["step"], []).append((r, s))
    out = []
    for n in sorted(by_step):
        rows = by_step[n]
        if len(rows) < 2:
            continue
        walls = [s["wall_s"] for _, s in rows]
        comp = [s["compute_s"] for _, s in rows]
        slow = max(rows, key=lambda x: x[1]["compute_s"])[0]
        row: dict[str, Any] = {"step": n, "ranks": len(rows), "wall_min_s": min(walls), "wall_max_s": max(walls),
                               "wall_spread_s": max(walls) - min(walls), "compute_spread_s": max(comp) - min(comp),
                               "slowest_rank": slow.label(), "end_spread_s": None, "clock_offset": False}
        if all(r.base_time_ns is not None for r, _ in rows):
            ends = [(r.base_time_ns or 0) * 1e-3 + s["start_us"] + s["wall_s"] / US for r, s in rows]
            row["end_spread_s"] = (max(ends) - min(ends)) * US
            row["clock_offset"] = row["end_spread_s"] > max(walls)
        out.append(row)
    return out


def profile(paths: list[Path], *, step_range: str | None = None) -> ProfileReport:
    """Read every trace under ``paths`` and reduce each to its steps; ranks sorted by rank number."""
    files = trace_files(paths)
    ranks = [_result(t) for f in files for t in read_trace(f, step_range)]
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.source))
    total: Counter[str] = Counter()
    for r in ranks:
        total.update(r.damage)
    if not any(r.events for r in ranks):
        causes = "; ".join(f"{c} x{n}" for c, n in total.most_common(3)) or "no events"
        where = files[0] if len(files) == 1 else f"{len(files)} files"
        raise SpecError(f"{where}: no trace events read ({causes}); expected a PyTorch profiler / Kineto "
                        "JSON trace (.json, .json.gz) or an Nsight Systems SQLite export")
    seen = [r.rank for r in ranks if r.rank is not None]
    dup = sorted({x for x in seen if seen.count(x) > 1})
    if dup:
        total[f"rank number in more than one file ({', '.join(map(str, dup[:5]))})"] += len(dup)
    rep = ProfileReport(ranks, skew(ranks), dict(total))
    if any(s["clock_offset"] for s in rep.skew):
        rep.damage["clock offset between ranks (step ends further apart than a step)"] = sum(
            s["clock_offset"] for s in rep.skew)
    return rep
