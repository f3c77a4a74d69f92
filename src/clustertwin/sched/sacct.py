"""Slurm accounting as a trace: ``sacct --parsable2`` (``-P``) output, so a site can replay its own month.

Export (the columns the reader uses; others are ignored, any order)::

    sacct -a -X -P -S 2024-03-01 -E 2024-04-01 \\
          --format=JobID,User,Partition,Submit,Start,End,Timelimit,State,NNodes,AllocTRES,Priority

Required: ``JobID``, ``Submit``, ``Start``, ``End``, ``Timelimit``, ``State`` and ``AllocTRES`` or
``ReqTRES``. Optional: ``NNodes`` (or ``AllocNodes``; else ``node=N`` of AllocTRES), ``User``, ``Priority``,
``Partition``. Without ``-X`` sacct also prints job steps (``123.batch``, ``123.extern``, ``123.0``); they are
skipped and counted under ``excluded['job step']`` (the allocation line carries the job).

- GPUs: ``gres/gpu=N`` in AllocTRES (ReqTRES when AllocTRES is absent); a typed entry
  (``gres/gpu:h100=N``) repeats the same GPUs, so the largest entry is taken. Jobs without GPUs are excluded
  (``cpu-only``).
- Layout: ``NNodes > 1`` makes the job ``NNodes`` units of ``ceil(gpus / NNodes)`` GPUs (one per node).
- Runtime ``End − Start``; time limit ``Timelimit`` in Slurm's formats (``MM``, ``MM:SS``, ``HH:MM:SS``,
  ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``); ``UNLIMITED`` / ``Partition_Limit`` give no limit (the runtime
  stands in). Times are ``YYYY-MM-DDTHH:MM:SS`` (sacct's default ``SLURM_TIME_FORMAT``), read as UTC.
- States (Slurm's job state codes): ``COMPLETED``, ``FAILED``, ``CANCELLED`` (also ``CANCELLED by UID``),
  ``TIMEOUT``, ``NODE_FAIL``, ``PREEMPTED``, ``OUT_OF_MEMORY``, ``DEADLINE``, ``BOOT_FAIL`` ran and are
  replayed for the time they ran, whatever ended them; their counts are kept in the report
  (``states``). A job that never started (``Start = Unknown/None``: ``PENDING``, a CANCELLED job cancelled
  while pending) is excluded as ``never started``; ``RUNNING`` and other active states (or no ``End``) as
  ``still running``; ``REQUEUED``, ``SUSPENDED``, ``RESIZING`` runs as ``state NAME``. Any other state is a
  malformed line.
- A line that does not split into the header's field count, a bad time, count or duration, or times out of
  order (``Submit <= Start <= End``) is counted as malformed with its cause and skipped (``--strict``: fatal).

Source: Slurm's ``sacct`` manual (``--parsable2``, ``--format`` fields, job state codes, time formats).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

from clustertwin.errors import SpecError
from clustertwin.sched import parse
from clustertwin.sched.jobs import JobRows, Trace
from clustertwin.sched.trace_io import (
    MAX_GPUS_PER_JOB,
    MAX_TIME_S,
    LineCounter,
    finish_report,
    open_trace,
    to_utc,
)
from clustertwin.units import DAY_S, HOUR_S, MINUTE_S

SLURM_PRIORITY_MAX = 2**32 - 1
"""Slurm job priorities are 32-bit unsigned."""
SACCT_REQUIRED = ("JobID", "Submit", "Start", "End", "Timelimit", "State")
SACCT_TIME = "%Y-%m-%dT%H:%M:%S"
SACCT_FORMAT = "JobID,User,Partition,Submit,Start,End,Timelimit,State,NNodes,AllocTRES,Priority"
"""The ``--format`` list the documentation recommends."""
RAN_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
              "DEADLINE", "BOOT_FAIL")
"""Final states of jobs that ran (replayed)."""
WAITING_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED")
"""States of jobs with no finished run (excluded as never started unless they have Start and End)."""
UNKNOWN_STATE = "unknown state"
"""Cause under which lines with a state that is not a Slurm job state are counted."""
ACTIVE_STATES = ("RUNNING", "COMPLETING", "CONFIGURING", "STOPPED", "SIGNALING", "STAGE_OUT")
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
_NODE_TRES = re.compile(r"(?:^|,)node=(\d+)")
_NO_TIME = ("Unknown", "None", "")
_NO_LIMIT = ("UNLIMITED", "Partition_Limit", "INVALID", "")
_DURATION = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def parse_slurm_duration(text: str) -> float | None:
    """Slurm time -> seconds: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``
    (sbatch ``--time`` formats); ``UNLIMITED`` / ``Partition_Limit`` -> None. ValueError otherwise."""
    t = text.strip()
    if t in _NO_LIMIT:
        return None
    m = _DURATION.fullmatch(t)
    if m is None:
        raise parse.Damaged(parse.BAD_NUMBER, f"Timelimit '{text[:40]}' is not a Slurm duration "
                                              "([D-]HH:MM:SS, MM:SS, MM, D-HH, D-HH:MM or UNLIMITED)")
    d, a, b, c = m.groups()
    if d is not None:  # D-HH[:MM[:SS]]
        days, h, mi, s = int(d), int(a), int(b or 0), int(c or 0)
    elif c is not None:  # HH:MM:SS
        days, h, mi, s = 0, int(a), int(b), int(c)
    elif b is not None:  # MM:SS
        days, h, mi, s = 0, 0, int(a), int(b)
    else:  # MM
        days, h, mi, s = 0, 0, int(a), 0
    value = days * DAY_S + h * HOUR_S + mi * MINUTE_S + s
    if value > MAX_TIME_S:
        raise parse.Damaged(parse.OUT_OF_RANGE, f"Timelimit '{text[:40]}' is out of range")
    return float(value)


def _gpus(r: dict[str, str]) -> int:
    for col in ("AllocTRES", "ReqTRES"):
        found = [int(x) for x in _GPU_TRES.findall(r.get(col) or "")]
        if found:
            # "gres/gpu=8,gres/gpu:h100=8" lists the same GPUs twice: take the largest entry
            return max(found)
    return 0


def _nodes(r: dict[str, str]) -> int:
    for col in ("NNodes", "AllocNodes"):
        v = (r.get(col) or "").strip()
        if v:
            return parse.count(v, col, lo=0, hi=MAX_GPUS_PER_JOB)
    m = _NODE_TRES.search(r.get("AllocTRES") or "")
    return parse.count(m.group(1), "AllocTRES node", lo=0, hi=MAX_GPUS_PER_JOB) if m else 1


def _time(text: str, name: str) -> float:
    try:
        return to_utc(text.strip(), SACCT_TIME)
    except ValueError:
        raise parse.Damaged(parse.BAD_NUMBER, f"{name} '{text[:40]}' is not a time YYYY-MM-DDTHH:MM:SS") from None


def read_sacct(path: str | Path, *, strict: bool = False) -> Trace:
    """A Slurm ``sacct -P`` export as a trace (module docstring); state counts in ``report.states``."""
    p = open_trace(path)
    lines = LineCounter(p, "sacct", strict)
    rows = JobRows()
    text = parse.read_lines(p)
    cols = [c.strip() for c in text[0].split("|")] if text else []
    missing = [c for c in SACCT_REQUIRED if c not in cols]
    if missing or not ({"AllocTRES", "ReqTRES"} & set(cols)):
        raise SpecError(f"sacct export lacks columns {missing or ['AllocTRES or ReqTRES']}; export with "
                        f"sacct -P --format={SACCT_FORMAT}", file=str(p))
    states: Counter = Counter()
    for line_no, rec, damage in parse.records(text, 1, "|", quoting=False):
        lines.report.lines += 1
        if damage is not None:
            lines.damaged(line_no, damage)
            continue
        if len(rec) != len(cols):
            lines.bad(line_no, f"expected {len(cols)} fields, got {len(rec)}", parse.FIELD_COUNT)
            continue
        r = dict(zip(cols, rec, strict=True))
        if "." in r["JobID"]:
            lines.exclude("job step")  # 123.batch, 123.extern, 123.0: the allocation line is the job
            continue
        state = r["State"].strip().split(" ", 1)[0].rstrip("+")  # "CANCELLED by 1234", "CANCELLED+"
        if state not in RAN_STATES + WAITING_STATES + ACTIVE_STATES:
            lines.bad(line_no, f"State '{r['State'][:40]}' is not a Slurm job state", UNKNOWN_STATE)
            continue
        if r["Start"].strip() in _NO_TIME:
            lines.exclude("never started")
            continue
        if r["End"].strip() in _NO_TIME or state in ACTIVE_STATES:
            lines.exclude("still running")
            continue
        try:
            submit = _time(r["Submit"], "Submit")
            start = _time(r["Start"], "Start")
            end = _time(r["End"], "End")
            limit = parse_slurm_duration(r["Timelimit"])
            nnodes = _nodes(r)
            prio = parse.count(r.get("Priority") or "0", "Priority", lo=0, hi=SLURM_PRIORITY_MAX)
        except parse.Damaged as e:
            lines.bad(line_no, str(e), e.cause)
            continue
        if not submit <= start <= end:
            lines.bad(line_no, "times out of order (Submit <= Start <= End expected)", parse.TIMES_BACKWARDS)
            continue
        if state in WAITING_STATES:
            lines.exclude(f"state {state}")  # a run that did not end the job (requeued, suspended, ...)
            continue
        gpus = _gpus(r)
        if gpus <= 0:
            lines.exclude("cpu-only")
            continue
        if gpus > MAX_GPUS_PER_JOB:
            lines.bad(line_no, f"gres/gpu {gpus} above {MAX_GPUS_PER_JOB:,}", parse.OUT_OF_RANGE)
            continue
        states[state] += 1
        units = nnodes if nnodes > 1 else 0
        per = math.ceil(gpus / nnodes) if nnodes > 1 else gpus
        rows.add(r["JobID"].strip(), submit, end - start, per, units=units, limit_s=limit,
                 user=(r.get("User") or "").strip(), priority=prio)
    trace = finish_report(rows, lines)
    trace.report.states.update(states)
    return trace
