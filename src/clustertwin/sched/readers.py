"""Trace readers: Standard Workload Format, Alibaba PAI 2023 / 2020, Microsoft Philly, SenseTime Helios,
Slurm ``sacct --parsable2`` exports, and synthetic-generator parameter files.

Every reader returns a :class:`Trace`: the jobs (submit times rebased to start at 0) and a
:class:`TraceReport`. A line that cannot be parsed is counted and skipped, with the first reasons kept;
``strict=True`` turns the first one into a :class:`SpecError`. Well-formed records that are not GPU jobs
that ran (CPU-only, never started, no runtime) are counted under ``excluded`` by reason, never dropped
silently. Schemas: research/scheduling_anchors.md sections 2-3.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched import parse
from clustertwin.sched.jobs import MILLI_PER_GPU, JobRows, Trace, TraceReport
from clustertwin.units import DAY_S, HOUR_S, MINUTE_S

FORMATS = ("swf", "pai2023", "pai2020", "philly", "helios", "sacct", "synthetic")

PAI2020_PLAN_GPU_PER_GPU = 100.0
"""PAI 2020 ``plan_gpu`` is in percent of one GPU (50 = half a GPU)."""
SWF_FIELDS = 18
SWF_PARTIAL_STATUS = (2, 3, 4)
"""SWF field 11 values of partial-execution lines (checkpointed or swapped jobs), Feitelson's SWF 2.2."""
SWF_UNKNOWN = -1
PAI2023_QOS_PRIORITY = {"LS": 3, "Guaranteed": 2, "Burstable": 1, "BE": 0}
"""Kubernetes/PAI QoS classes as priorities: latency-sensitive above guaranteed above burstable above
best-effort (the order PAI preempts in)."""


class _Lines:
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


def _open(path: str | Path) -> Path:
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


def _num(text: str, name: str, lo: float = -MAX_TIME_S, hi: float = MAX_TIME_S) -> float:
    return parse.number(text, name, lo=lo, hi=hi)


def _utc(text: str, fmt: str) -> float:
    """Seconds since the epoch of a naive timestamp read as UTC (deterministic across time zones)."""
    return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()


def _csv_rows(p: Path, lines: _Lines, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
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
    width = len(cols)
    for line_no, rec, damage in parse.records(text, 1, first_line_no=1):
        lines.report.lines += 1
        if damage is not None:
            lines.damaged(line_no, damage)
            continue
        if len(rec) != width:
            lines.bad(line_no, f"expected {width} fields, got {len(rec)}", parse.FIELD_COUNT)
            continue
        yield line_no, dict(zip(cols, rec, strict=True))


def _finish(rows: JobRows, lines: _Lines) -> Trace:
    jobs = rows.build(rebase=True)
    lines.report.jobs = len(jobs)
    return Trace(jobs, lines.report)


# ---------------------------------------------------------------------------------------------- SWF
def read_swf(path: str | Path, *, strict: bool = False) -> Trace:
    """Standard Workload Format v2.2: 18 whitespace-separated fields, ``;`` comments, -1 unknown.
    Processors (requested, field 8, else allocated, field 5) are read as GPUs; runtime field 4; requested
    time field 9 is the limit; user field 12; queue field 15 is the priority."""
    p = _open(path)
    lines = _Lines(p, "swf", strict)
    rows = JobRows()
    for line_no, raw in enumerate(parse.read_lines(p), start=1):
        text = raw.strip()
        if not text or text.startswith(";"):
            continue
        lines.report.lines += 1
        parts = text.split()
        if len(parts) != SWF_FIELDS:
            lines.bad(line_no, f"expected {SWF_FIELDS} fields, got {len(parts)}", parse.FIELD_COUNT)
            continue
        try:
            f = [_num(x, f"field {i + 1}") for i, x in enumerate(parts)]
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        submit, run, alloc_p, req_p, req_t = f[1], f[3], f[4], f[7], f[8]
        procs = req_p if req_p > 0 else alloc_p
        status = int(f[10])
        if submit < 0:
            lines.bad(line_no, "submit time (field 2) is negative", parse.OUT_OF_RANGE)
            continue
        if procs > MAX_GPUS_PER_JOB:
            lines.bad(line_no, f"processors {procs:g} above {MAX_GPUS_PER_JOB:,}", parse.OUT_OF_RANGE)
            continue
        if status in SWF_PARTIAL_STATUS:
            # SWF 2.2 field 11: 2 = a partial execution of a checkpointed job (one line per part),
            # 3 = its last part, 4 = a job that failed after partial runs: the job line (status 0/1/5)
            # already accounts for the whole job, so the parts are not jobs of their own
            lines.exclude("partial execution (SWF status 2-4)")
            continue
        if run < 0:
            lines.exclude("no runtime")
            continue
        if procs <= 0:
            lines.exclude("no processors")
            continue
        rows.add(parts[0], submit, run, int(procs), limit_s=req_t if req_t > 0 else None,
                 user=parts[11], priority=max(int(f[14]), 0))
    return _finish(rows, lines)


# ---------------------------------------------------------------------------------------------- PAI 2023
PAI2023_COLUMNS = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time")


def read_pai2023(path: str | Path, *, strict: bool = False) -> Trace:
    """Alibaba PAI 2023 ``openb_pod_list_*.csv``. A pod asks for ``num_gpu`` GPUs, or ``gpu_milli``/1000 of
    one GPU when ``gpu_milli < 1000``; it is submitted at ``creation_time`` and runs
    ``deletion_time − scheduled_time`` (pods still running at the end of the trace run to its end).
    ``gpu_spec`` (allowed models, ``|``-separated) is the GPU-type constraint; ``qos`` the priority
    (``PAI2023_QOS_PRIORITY``); ``cpu_milli`` and ``memory_mib`` the pod's CPU and memory. CPU-only pods
    and pods never scheduled (no ``scheduled_time``) are excluded. Sample lists without times (``multigpu50``) cannot be replayed and are rejected."""
    p = _open(path)
    lines = _Lines(p, "pai2023", strict)
    rows = JobRows()
    for line_no, row in _csv_rows(p, lines, PAI2023_COLUMNS):
        try:
            num_gpu = _num(row["num_gpu"], "num_gpu", -1, MAX_GPUS_PER_JOB)
            milli = _num(row["gpu_milli"], "gpu_milli", -1, MILLI_PER_GPU * MAX_GPUS_PER_JOB)
            created = _num(row["creation_time"], "creation_time")
            deleted = _num(row["deletion_time"], "deletion_time")
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        if num_gpu < 0 or milli < 0 or num_gpu != int(num_gpu):
            lines.bad(line_no, f"num_gpu {row['num_gpu']} / gpu_milli {row['gpu_milli']} out of range")
            continue
        if num_gpu == 0:
            lines.exclude("cpu-only")
            continue
        sched = (row["scheduled_time"] or "").strip()
        if not sched:
            lines.exclude("never scheduled")
            continue
        try:
            started = _num(sched, "scheduled_time")
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        if deleted < started or started < created:
            lines.bad(line_no, "times out of order (creation <= scheduled <= deletion expected)",
                      parse.TIMES_BACKWARDS)
            continue
        if milli < MILLI_PER_GPU and num_gpu != 1:
            lines.bad(line_no, "gpu_milli < 1000 (GPU sharing) with num_gpu != 1")
            continue
        if milli <= 0:
            lines.bad(line_no, "gpu_milli must be > 0 for a GPU pod")
            continue
        gpus = num_gpu if milli >= MILLI_PER_GPU else milli / MILLI_PER_GPU
        spec = (row.get("gpu_spec") or "").strip()
        types = frozenset(s.strip() for s in spec.split("|") if s.strip())
        qos = (row.get("qos") or "").strip()
        try:
            cpu = int(_num(row.get("cpu_milli") or "0", "cpu_milli", -1, 1e12))
            mem = int(_num(row.get("memory_mib") or "0", "memory_mib", -1, 1e12))
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        if cpu < 0 or mem < 0:
            lines.bad(line_no, "cpu_milli and memory_mib must be >= 0")
            continue
        rows.add(row["name"], created, deleted - started, gpus, user=qos,
                 priority=PAI2023_QOS_PRIORITY.get(qos, 0), gpu_types=types, cpu_milli=cpu, memory_mib=mem)
    return _finish(rows, lines)


# ---------------------------------------------------------------------------------------------- PAI 2020
PAI2020_TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu",
                        "plan_mem", "plan_gpu", "gpu_type")


def read_pai2020(path: str | Path, *, strict: bool = False) -> Trace:
    """Alibaba PAI 2020 task table (``pai_task_table.csv``; headerless as published, a header line is
    accepted). Each task with ``plan_gpu > 0`` is a job of ``inst_num`` instances, each needing
    ``plan_gpu``/100 GPUs (50 = half a GPU); it runs ``end_time − start_time``. The task table has no
    submit time, so tasks are submitted at ``start_time``. ``gpu_type`` other than ``MISC`` constrains
    the GPU model; the user is the job name's owner only in the job table, so ``job_name`` is used."""
    p = _open(path)
    lines = _Lines(p, "pai2020", strict)
    rows = JobRows()
    ncol = len(PAI2020_TASK_COLUMNS)
    for line_no, rec, damage in parse.records(parse.read_lines(p)):
        if line_no == 1 and rec and rec[0] == "job_name":
            continue
        lines.report.lines += 1
        if damage is not None:
            lines.damaged(line_no, damage)
            continue
        if len(rec) != ncol:
            lines.bad(line_no, f"expected {ncol} fields, got {len(rec)}", parse.FIELD_COUNT)
            continue
        r = dict(zip(PAI2020_TASK_COLUMNS, rec, strict=True))
        if not r["plan_gpu"].strip() or not r["start_time"].strip() or not r["end_time"].strip():
            lines.exclude("no gpu plan or times")
            continue
        try:
            plan = _num(r["plan_gpu"], "plan_gpu", -1, PAI2020_PLAN_GPU_PER_GPU * MAX_GPUS_PER_JOB)
            start = _num(r["start_time"], "start_time")
            end = _num(r["end_time"], "end_time")
            inst = _num(r["inst_num"], "inst_num", 0, MAX_GPUS_PER_JOB)
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        if plan <= 0:
            lines.exclude("cpu-only")
            continue
        if end < start or inst < 1:
            lines.bad(line_no, "end_time before start_time or inst_num < 1",
                          parse.TIMES_BACKWARDS if end < start else parse.OUT_OF_RANGE)
            continue
        per = plan / PAI2020_PLAN_GPU_PER_GPU
        if per > 1:
            per = float(math.ceil(per))
        gtype = r["gpu_type"].strip()
        types = frozenset() if gtype in ("", "MISC") else frozenset({gtype})
        units = int(inst) if inst > 1 else 0
        rows.add(f"{r['job_name']}/{r['task_name']}", start, end - start, per, units=units,
                 user=r["job_name"], gpu_types=types)
    return _finish(rows, lines)


# ---------------------------------------------------------------------------------------------- Philly
PHILLY_TIME = "%Y-%m-%d %H:%M:%S"


def _philly_time(v) -> float | None:
    if v is None or v == "None" or v == "":
        return None
    return _utc(str(v), PHILLY_TIME)


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
    p = _open(path)
    lines = _Lines(p, "philly", strict)
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
    return _finish(rows, lines)


# ---------------------------------------------------------------------------------------------- Helios
HELIOS_COLUMNS = ("job_id", "user", "vc", "gpu_num", "node_num", "state", "submit_time", "duration")
HELIOS_TIME = "%Y-%m-%d %H:%M:%S"


def _seconds_or_datetime(text: str, name: str) -> float:
    try:
        return _num(text, name)
    except ValueError:
        try:
            return _utc(text.strip(), HELIOS_TIME)
        except ValueError:
            raise ValueError(f"{name} '{text}' is neither seconds nor '{HELIOS_TIME}'") from None


def read_helios(path: str | Path, *, strict: bool = False) -> Trace:
    """SenseTime Helios ``cluster_log.csv``: ``gpu_num`` GPUs over ``node_num`` nodes, ``duration``
    seconds, submitted at ``submit_time`` (seconds or ``YYYY-MM-DD HH:MM:SS``). CPU jobs are excluded.
    Large clean files go through pyarrow when it is installed (:mod:`clustertwin.sched.arrow_readers`),
    with the same result."""
    p = _open(path)
    if not strict:
        from clustertwin.sched import arrow_readers

        fast = arrow_readers.read_helios(p, MAX_GPUS_PER_JOB, MAX_TIME_S)
        if fast is not None:
            return fast
    lines = _Lines(p, "helios", strict)
    rows = JobRows()
    for line_no, r in _csv_rows(p, lines, HELIOS_COLUMNS):
        try:
            gpus = _num(r["gpu_num"], "gpu_num", -1, MAX_GPUS_PER_JOB)
            nodes = _num(r["node_num"], "node_num", -1, MAX_GPUS_PER_JOB)
            submit = _seconds_or_datetime(r["submit_time"], "submit_time")
            dur = _num(r["duration"], "duration")
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
    return _finish(rows, lines)


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
    p = _open(path)
    lines = _Lines(p, "sacct", strict)
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
            submit = _utc(r["Submit"], SACCT_TIME)
            start = _utc(r["Start"], SACCT_TIME)
            end = _utc(r["End"], SACCT_TIME) if r["End"] not in ("Unknown", "None", "") else None
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
    return _finish(rows, lines)


# ---------------------------------------------------------------------------------------------- dispatch
def read_synthetic(path: str | Path, *, cluster_gpus: int | None = None, strict: bool = False,
                   max_jobs: int | None = None) -> Trace:
    """A synthetic trace from a YAML/JSON file of :class:`SyntheticSpec` parameters. A spec asking for more
    than ``MAX_SYNTHETIC_JOBS`` jobs is refused unless ``max_jobs`` is given; then only ``max_jobs`` are
    generated."""
    from clustertwin import specs
    from clustertwin.sched.synthetic import MAX_SYNTHETIC_JOBS, SyntheticSpec, generate

    p = _open(path)
    spec = specs.load(SyntheticSpec, str(p))
    if max_jobs is not None and spec.jobs > max(max_jobs, MAX_SYNTHETIC_JOBS):
        spec = spec.model_copy(update={"jobs": max_jobs})  # above the cap: generate only what is replayed
    jobs = generate(spec, cluster_gpus, max_jobs=max(max_jobs or 0, MAX_SYNTHETIC_JOBS))
    rep = TraceReport(path=str(p), format="synthetic", lines=0, jobs=len(jobs))
    return Trace(jobs, rep)


READERS: dict[str, Callable[..., Trace]] = {
    "swf": read_swf,
    "pai2023": read_pai2023,
    "pai2020": read_pai2020,
    "philly": read_philly,
    "helios": read_helios,
    "sacct": read_sacct,
}


def read_trace(path: str | Path, fmt: str, *, strict: bool = False, cluster_gpus: int | None = None,
               max_jobs: int | None = None) -> Trace:
    """Read a trace in format ``fmt`` (one of ``FORMATS``)."""
    if fmt == "synthetic":
        return read_synthetic(path, cluster_gpus=cluster_gpus, strict=strict, max_jobs=max_jobs)
    if fmt not in READERS:
        raise SpecError(f"unknown trace format '{fmt}'{did_you_mean(fmt, FORMATS)}; choose from {', '.join(FORMATS)}")
    return READERS[fmt](path, strict=strict)
