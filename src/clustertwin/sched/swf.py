"""Standard Workload Format v2.2 reader (Feitelson's Parallel Workloads Archive), vectorised.

18 whitespace-separated numeric fields per line, ``;`` comments, -1 for unknown. Processors (requested,
field 8, else allocated, field 5) are read as GPUs; runtime field 4; requested time field 9 is the limit;
user field 12; queue field 15 is the priority. Lines with status 2-4 (field 11: the parts of a
checkpointed job, whose job line already accounts for the whole) are excluded by reason.

Speed: the numbers of every line are converted in one ``numpy.loadtxt`` call (its C parser) and the
per-line checks run as array masks; only lines that fail a mask take the per-line path, which reports
them exactly as before (when a line has another field count or a token numpy cannot read, every line
takes it). The jobs and the report are the same as
the per-line reader's, in the same order.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from clustertwin.sched import parse
from clustertwin.sched.jobs import Trace, make_jobs
from clustertwin.sched.trace_io import MAX_GPUS_PER_JOB, MAX_TIME_S, LineCounter, open_trace, parse_num

SWF_FIELDS = 18
SWF_PARTIAL_STATUS = (2, 3, 4)
"""SWF field 11 values of partial-execution lines (checkpointed or swapped jobs), Feitelson's SWF 2.2."""
SWF_UNKNOWN = -1
_SUBMIT, _RUN, _ALLOC, _REQ_P, _REQ_T, _STATUS, _QUEUE = 1, 3, 4, 7, 8, 10, 14


def _bulk_numbers(texts: list[str]) -> np.ndarray | None:
    """The fields of ``texts`` as an ``(n, 18)`` float array (numpy's C text parser), or None when a line
    has another field count or a token numpy cannot read (then every line takes the per-line path)."""
    if not texts:
        return np.zeros((0, SWF_FIELDS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns on an empty input; the shape check below decides
        try:
            vals = np.loadtxt(texts, dtype=np.float64, comments=None, ndmin=2)
        except ValueError:
            return None
    return vals if vals.shape == (len(texts), SWF_FIELDS) else None


def _line_fields(parts: list[str], line_no: int, lines: LineCounter) -> list[float] | None:
    """One line's 18 numbers checked field by field (the per-line path), or None once reported bad."""
    try:
        f = list(map(float, parts))
        total = sum(f)
        if not (math.isfinite(total) and max(f) <= MAX_TIME_S and min(f) >= -MAX_TIME_S):
            raise ValueError
    except ValueError:
        try:
            f = [parse_num(x, f"field {i + 1}") for i, x in enumerate(parts)]
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            return None
    return f


def _verdict(f: list[float], line_no: int, lines: LineCounter) -> bool:
    """Report a line whose numbers parse but that is out of range or not a job that ran; True to keep it."""
    procs = f[_REQ_P] if f[_REQ_P] > 0 else f[_ALLOC]
    if f[_SUBMIT] < 0:
        lines.bad(line_no, "submit time (field 2) is negative", parse.OUT_OF_RANGE)
        return False
    if procs > MAX_GPUS_PER_JOB:
        lines.bad(line_no, f"processors {procs:g} above {MAX_GPUS_PER_JOB:,}", parse.OUT_OF_RANGE)
        return False
    if int(f[_STATUS]) in SWF_PARTIAL_STATUS:
        lines.exclude("partial execution (SWF status 2-4)")
        return False
    if f[_RUN] < 0:
        lines.exclude("no runtime")
        return False
    if procs <= 0:
        lines.exclude("no processors")
        return False
    return True


def read_swf(path: str | Path, *, strict: bool = False) -> Trace:
    """Read an SWF trace (module docstring); malformed lines counted and reported, ``strict`` raises."""
    p = open_trace(path)
    lines = LineCounter(p, "swf", strict)
    data = [(no, t) for no, raw in enumerate(parse.read_lines(p), start=1)
            if (t := raw.strip()) and not t.startswith(";")]
    lines.report.lines += len(data)
    texts = [t for _, t in data]
    n = len(texts)
    bulk = _bulk_numbers(texts)
    fast = np.zeros(n, dtype=bool)
    if bulk is not None:  # every line has 18 numbers: the tokens line up 18 by 18
        fields = bulk
        tokens = " ".join(texts).split()
        ids, users = tokens[0::SWF_FIELDS], tokens[11::SWF_FIELDS]
        procs = np.where(bulk[:, _REQ_P] > 0, bulk[:, _REQ_P], bulk[:, _ALLOC])
        with np.errstate(invalid="ignore"):
            fast = (np.isfinite(bulk).all(axis=1) & (bulk.max(axis=1) <= MAX_TIME_S)
                    & (bulk.min(axis=1) >= -MAX_TIME_S) & (bulk[:, _SUBMIT] >= 0) & (procs <= MAX_GPUS_PER_JOB)
                    & (procs > 0) & (bulk[:, _RUN] >= 0))
        fast[fast] &= ~np.isin(bulk[fast, _STATUS].astype(np.int64), SWF_PARTIAL_STATUS)
    else:
        fields = np.zeros((n, SWF_FIELDS))
        ids, users = [""] * n, [""] * n
    keep = fast.copy()
    for k in np.flatnonzero(~fast).tolist():  # the exceptions, in line order, reported as the per-line reader does
        line_no, parts = data[k][0], texts[k].split()
        if len(parts) != SWF_FIELDS:
            lines.bad(line_no, f"expected {SWF_FIELDS} fields, got {len(parts)}", parse.FIELD_COUNT)
            continue
        f = _line_fields(parts, line_no, lines)
        if f is not None and _verdict(f, line_no, lines):
            fields[k] = f
            keep[k] = True
            ids[k], users[k] = parts[0], parts[11]
    kept = np.flatnonzero(keep)
    f = fields[kept]
    procs = np.where(f[:, _REQ_P] > 0, f[:, _REQ_P], f[:, _ALLOC]).astype(np.int64)
    limit = np.where(f[:, _REQ_T] > 0, f[:, _REQ_T], f[:, _RUN])
    rows = kept.tolist()
    jobs = make_jobs([ids[k] for k in rows], f[:, _SUBMIT], f[:, _RUN], procs.astype(float),
                     units=np.zeros(len(rows), dtype=np.int64), limit_s=limit,
                     users=[users[k] for k in rows],
                     priority=np.maximum(f[:, _QUEUE].astype(np.int64), 0), rebase=True)
    lines.report.jobs = len(jobs)
    return Trace(jobs, lines.report)
