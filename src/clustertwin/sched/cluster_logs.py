"""Readers of cluster job logs: Microsoft Philly (JSON job list, read one job at a time), SenseTime Helios
(CSV) and Slurm ``sacct --parsable2`` exports. Line accounting and parsing helpers: :mod:`trace_io`."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
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
    parse_num,
    to_utc,
    trace_csv_rows,
)
from clustertwin.units import DAY_S, HOUR_S, MINUTE_S

# ---------------------------------------------------------------------------------------------- Philly
PHILLY_TIME = "%Y-%m-%d %H:%M:%S"


def _philly_time(v) -> float | None:
    if v is None or v == "None" or v == "":
        return None
    return to_utc(str(v), PHILLY_TIME)


_JSON_WS = re.compile(r"[ \t\n\r]*")


def _json_list_items(p: Path) -> Iterator[object]:
    """The items of a top-level JSON list, decoded one at a time (the whole list is never built as
    Python objects: a multi-GB job log needs the text plus one job in memory)."""
    text = "\n".join(parse.read_lines(p))
    dec = json.JSONDecoder()

    def fail(msg: str, pos: int) -> SpecError:
        line = text.count("\n", 0, pos) + 1
        return SpecError(f"not a JSON list of jobs: {msg} at line {line}", file=str(p))

    pos = _JSON_WS.match(text, 0).end()
    if not text.startswith("[", pos):
        raise fail("expected '[' (cluster_job_log is a JSON list)", pos)
    pos = _JSON_WS.match(text, pos + 1).end()
    if text.startswith("]", pos):
        return
    while True:
        try:
            item, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise fail(e.msg, e.pos) from None
        except RecursionError:
            raise fail("nesting too deep", pos) from None
        yield item
        pos = _JSON_WS.match(text, pos).end()
        if text.startswith(",", pos):
            pos = _JSON_WS.match(text, pos + 1).end()
        elif text.startswith("]", pos):
            return
        else:
            raise fail("expected ',' or ']'", pos)


def read_philly(path: str | Path, *, strict: bool = False) -> Trace:
    """Microsoft Philly ``cluster_job_log`` (a JSON list of jobs). GPUs = GPUs of the last attempt's
    ``detail`` (summed over machines; units = machines when more than one); runtime = sum of attempt
    durations; submit = ``submitted_time``. Jobs without a finished attempt are excluded."""
    p = open_trace(path)
    lines = LineCounter(p, "philly", strict)
    rows = JobRows()
    for i, job in enumerate(_json_list_items(p), start=1):
        lines.report.lines += 1
        try:
            jid = str(job["jobid"])
            submit = _philly_time(job["submitted_time"])
            attempts = job.get("attempts") or []
            if submit is None:
                raise ValueError("no submitted_time")
            runtime = 0.0
            last_detail: list = []
            finished = False
            for a in attempts:
                s, e = _philly_time(a.get("start_time")), _philly_time(a.get("end_time"))
                if s is not None and e is not None:
                    if e < s:
                        raise ValueError("attempt ends before it starts")
                    runtime += e - s
                    finished = True
                last_detail = a.get("detail") or last_detail
            per_machine = [len(d.get("gpus") or []) for d in last_detail]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            lines.bad(i, f"job {i}: {e}")
            continue
        if not finished:
            lines.exclude("no finished attempt")
            continue
        gpus = sum(per_machine)
        if gpus <= 0:
            lines.exclude("no gpus")
            continue
        machines = sum(1 for g in per_machine if g > 0)
        if machines > 1:
            rows.add(jid, submit, runtime, max(per_machine), units=machines, user=str(job.get("user", "")))
        else:
            rows.add(jid, submit, runtime, gpus, user=str(job.get("user", "")))
    return finish_report(rows, lines)


# ---------------------------------------------------------------------------------------------- Helios
HELIOS_COLUMNS = ("job_id", "user", "vc", "gpu_num", "node_num", "state", "submit_time", "duration")
HELIOS_TIME = "%Y-%m-%d %H:%M:%S"


def _seconds_or_datetime(text: str, name: str) -> float:
    try:
        return parse_num(text, name)
    except ValueError:
        try:
            return to_utc(text.strip(), HELIOS_TIME)
        except ValueError:
            raise ValueError(f"{name} '{text}' is neither seconds nor '{HELIOS_TIME}'") from None


def read_helios(path: str | Path, *, strict: bool = False) -> Trace:
    """SenseTime Helios ``cluster_log.csv``: ``gpu_num`` GPUs over ``node_num`` nodes, ``duration``
    seconds, submitted at ``submit_time`` (seconds or ``YYYY-MM-DD HH:MM:SS``). CPU jobs are excluded.
    Large clean files go through pyarrow when it is installed (:mod:`clustertwin.sched.arrow_readers`),
    with the same result."""
    p = open_trace(path)
    if not strict:
        from clustertwin.sched import arrow_readers

        fast = arrow_readers.read_helios(p, MAX_GPUS_PER_JOB, MAX_TIME_S)
        if fast is not None:
            return fast
    lines = LineCounter(p, "helios", strict)
    rows = JobRows()
    for line_no, r in trace_csv_rows(p, lines, HELIOS_COLUMNS):
        try:
            gpus = parse_num(r["gpu_num"], "gpu_num", -1, MAX_GPUS_PER_JOB)
            nodes = parse_num(r["node_num"], "node_num", -1, MAX_GPUS_PER_JOB)
            submit = _seconds_or_datetime(r["submit_time"], "submit_time")
            dur = parse_num(r["duration"], "duration")
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        if gpus < 0 or dur < 0 or nodes < 0 or gpus != int(gpus):
            lines.bad(line_no, "negative or fractional gpu_num / node_num / duration", parse.OUT_OF_RANGE)
            continue
        if gpus == 0:
            lines.exclude("cpu-only")
            continue
        if nodes > 1:
            rows.add(r["job_id"], submit, dur, math.ceil(gpus / nodes), units=int(nodes), user=r["user"])
        else:
            rows.add(r["job_id"], submit, dur, int(gpus), user=r["user"])
    return finish_report(rows, lines)


# ---------------------------------------------------------------------------------------------- sacct
SLURM_PRIORITY_MAX = 2**32 - 1
"""Slurm job priorities are 32-bit unsigned."""
SACCT_REQUIRED = ("JobID", "Submit", "Start", "End", "Timelimit", "NNodes")
SACCT_TIME = "%Y-%m-%dT%H:%M:%S"
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")


def parse_slurm_duration(text: str) -> float | None:
    """Slurm time ``[D-]HH:MM:SS``, ``MM:SS``, ``MM`` -> seconds; ``UNLIMITED``/``Partition_Limit`` -> None."""
    t = text.strip()
    if t in ("UNLIMITED", "Partition_Limit", "INVALID", ""):
        return None
    days = 0.0
    if "-" in t:
        d, t = t.split("-", 1)
        days = float(d)
    parts = [float(x) for x in t.split(":")]
    if len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2:
        h, (m, s) = 0.0, parts
    elif len(parts) == 1:
        h, m, s = 0.0, parts[0], 0.0
    else:
        raise ValueError(f"bad Slurm duration '{text}'")
    return days * DAY_S + h * HOUR_S + m * MINUTE_S + s


def _sacct_gpus(r: dict[str, str]) -> int:
    total = 0
    for col in ("AllocTRES", "ReqTRES"):
        text = r.get(col) or ""
        found = [int(x) for x in _GPU_TRES.findall(text)]
        if found:
            # "gres/gpu=8,gres/gpu:h100=8" lists the same GPUs twice: take the largest entry
            total = max(found)
            break
    return total


def read_sacct(path: str | Path, *, strict: bool = False) -> Trace:
    """Slurm ``sacct --parsable2`` export (``|``-separated, header line) with at least JobID, Submit,
    Start, End, Timelimit, NNodes and AllocTRES or ReqTRES (``gres/gpu=N``). Job steps (``123.batch``) are
    skipped; jobs that never started (``Start=Unknown``/``None``) and CPU-only jobs are excluded. Runtime
    = End − Start; priority from the ``Priority`` column when present."""
    p = open_trace(path)
    lines = LineCounter(p, "sacct", strict)
    rows = JobRows()
    text = parse.read_lines(p)
    cols = text[0].split("|") if text else []
    missing = [c for c in SACCT_REQUIRED if c not in cols]
    if missing or not ({"AllocTRES", "ReqTRES"} & set(cols)):
        raise SpecError(f"sacct export lacks columns {missing or ['AllocTRES or ReqTRES']}; export with "
                        "sacct --parsable2 --format=JobID,User,Submit,Start,End,Timelimit,NNodes,AllocTRES",
                        file=str(p))
    for line_no, rec, damage in parse.records(text, 1, "|", quoting=False):
        if damage is not None or len(rec) != len(cols):
            lines.report.lines += 1
            if damage is not None:
                lines.damaged(line_no, damage)
            else:
                lines.bad(line_no, f"expected {len(cols)} fields, got {len(rec)}", parse.FIELD_COUNT)
            continue
        r = dict(zip(cols, rec, strict=True))
        if "." in r["JobID"]:
            continue  # job step, not a job
        lines.report.lines += 1
        if r["Start"] in ("Unknown", "None", ""):
            lines.exclude("never started")
            continue
        try:
            submit = to_utc(r["Submit"], SACCT_TIME)
            start = to_utc(r["Start"], SACCT_TIME)
            end = to_utc(r["End"], SACCT_TIME) if r["End"] not in ("Unknown", "None", "") else None
            limit = parse_slurm_duration(r["Timelimit"])
            nnodes = parse.count(r["NNodes"], "NNodes", lo=0, hi=MAX_GPUS_PER_JOB)
            prio = parse.count(r.get("Priority") or "0", "Priority", lo=0, hi=SLURM_PRIORITY_MAX)
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        if end is None:
            lines.exclude("still running")
            continue
        if end < start or start < submit:
            lines.bad(line_no, "times out of order (Submit <= Start <= End expected)", parse.TIMES_BACKWARDS)
            continue
        gpus = _sacct_gpus(r)
        if gpus <= 0:
            lines.exclude("cpu-only")
            continue
        units = nnodes if nnodes > 1 else 0
        per = math.ceil(gpus / nnodes) if nnodes > 1 else gpus
        rows.add(r["JobID"], submit, end - start, per, units=units, limit_s=limit,
                 user=r.get("User", ""), priority=prio)
    return finish_report(rows, lines)
