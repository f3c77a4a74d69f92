"""Readers of cluster job logs: Microsoft Philly (JSON job list, read one job at a time), SenseTime Helios
(CSV); Slurm ``sacct --parsable2`` exports are read by :mod:`clustertwin.sched.sacct`. Line accounting and parsing helpers: :mod:`trace_io`."""

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
