"""Trace readers: Standard Workload Format, Alibaba PAI 2023 / 2020, Microsoft Philly, SenseTime Helios,
Slurm ``sacct --parsable2`` exports, and synthetic-generator parameter files.

Every reader returns a :class:`Trace`: the jobs (submit times rebased to start at 0) and a
:class:`TraceReport`. A line that cannot be parsed is counted and skipped, with the first reasons kept;
``strict=True`` turns the first one into a :class:`SpecError`. Well-formed records that are not GPU jobs
that ran (CPU-only, never started, no runtime) are counted under ``excluded`` by reason, never dropped
silently. Schemas: the trace publishers' own documentation (Feitelson's SWF 2.2; alibaba/clusterdata;
msr-fiddle/philly-traces; S-Lab/HeliosData; Slurm's sacct manual).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched import parse
from clustertwin.sched.cluster_logs import (  # noqa: F401 (re-exported)
    HELIOS_COLUMNS,
    HELIOS_TIME,
    PHILLY_TIME,
    read_helios,
    read_philly,
)
from clustertwin.sched.jobs import MILLI_PER_GPU, JobRows, Trace, TraceReport
from clustertwin.sched.pai_sensor import read_sensor_util, task_fraction
from clustertwin.sched.sacct import (  # noqa: F401 (re-exported)
    SACCT_FORMAT,
    SACCT_REQUIRED,
    SACCT_TIME,
    SLURM_PRIORITY_MAX,
    parse_slurm_duration,
    read_sacct,
)
from clustertwin.sched.swf import SWF_FIELDS, SWF_PARTIAL_STATUS, SWF_UNKNOWN, read_swf  # noqa: F401 (re-exported)
from clustertwin.sched.trace_io import (
    MAX_GPUS_PER_JOB,
    LineCounter,
    finish_report,
    fixed_width_rows,
    open_trace,
    parse_num,
    trace_csv_rows,
)

FORMATS = ("swf", "pai2023", "pai2020", "philly", "helios", "sacct", "synthetic")

PAI2020_PLAN_GPU_PER_GPU = 100.0
"""PAI 2020 ``plan_gpu`` is in percent of one GPU (50 = half a GPU)."""
PAI2023_QOS_PRIORITY = {"LS": 3, "Guaranteed": 2, "Burstable": 1, "BE": 0}
"""Kubernetes/PAI QoS classes as priorities: latency-sensitive above guaranteed above burstable above
best-effort (the order PAI preempts in)."""


# ---------------------------------------------------------------------------------------------- PAI 2023
PAI2023_COLUMNS = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time")


def read_pai2023(path: str | Path, *, strict: bool = False) -> Trace:
    """Alibaba PAI 2023 ``openb_pod_list_*.csv``. A pod asks for ``num_gpu`` GPUs, or ``gpu_milli``/1000 of
    one GPU when ``gpu_milli < 1000``; it is submitted at ``creation_time`` and runs
    ``deletion_time − scheduled_time`` (pods still running at the end of the trace run to its end).
    ``gpu_spec`` (allowed models, ``|``-separated) is the GPU-type constraint; ``qos`` the priority
    (``PAI2023_QOS_PRIORITY``); ``cpu_milli`` and ``memory_mib`` the pod's CPU and memory. CPU-only pods
    and pods never scheduled (no ``scheduled_time``) are excluded. Sample lists without times (``multigpu50``) cannot be replayed and are rejected."""
    p = open_trace(path)
    lines = LineCounter(p, "pai2023", strict)
    rows = JobRows()
    for line_no, row in trace_csv_rows(p, lines, PAI2023_COLUMNS):
        try:
            num_gpu = parse_num(row["num_gpu"], "num_gpu", -1, MAX_GPUS_PER_JOB)
            milli = parse_num(row["gpu_milli"], "gpu_milli", -1, MILLI_PER_GPU * MAX_GPUS_PER_JOB)
            created = parse_num(row["creation_time"], "creation_time")
            deleted = parse_num(row["deletion_time"], "deletion_time")
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
            started = parse_num(sched, "scheduled_time")
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
            cpu = int(parse_num(row.get("cpu_milli") or "0", "cpu_milli", -1, 1e12))
            mem = int(parse_num(row.get("memory_mib") or "0", "memory_mib", -1, 1e12))
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        if cpu < 0 or mem < 0:
            lines.bad(line_no, "cpu_milli and memory_mib must be >= 0")
            continue
        rows.add(row["name"], created, deleted - started, gpus, user=qos,
                 priority=PAI2023_QOS_PRIORITY.get(qos, 0), gpu_types=types, cpu_milli=cpu, memory_mib=mem)
    return finish_report(rows, lines)


# ---------------------------------------------------------------------------------------------- PAI 2020
PAI2020_TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu",
                        "plan_mem", "plan_gpu", "gpu_type")


def read_pai2020(path: str | Path, *, strict: bool = False, sensor: str | Path | None = None) -> Trace:
    """Alibaba PAI 2020 task table (``pai_task_table.csv``; headerless as published, a header line is
    accepted). Each task with ``plan_gpu > 0`` is a job of ``inst_num`` instances, each needing
    ``plan_gpu``/100 GPUs (50 = half a GPU); it runs ``end_time − start_time``. The task table has no
    submit time, so tasks are submitted at ``start_time``. ``gpu_type`` other than ``MISC`` constrains
    the GPU model; the user is the job name's owner only in the job table, so ``job_name`` is used.
    ``sensor``: the sensor table, joined on (job_name, task_name) for each task's own GPU utilisation
    (:mod:`clustertwin.sched.pai_sensor`); tasks without sensor rows keep NaN (allocation stands for work)."""
    p = open_trace(path)
    lines = LineCounter(p, "pai2020", strict)
    util_of: dict[tuple[str, str], float] = {}
    if sensor is not None:
        util_of, s_lines = read_sensor_util(sensor, strict=strict)
        lines.report.utilisation = {**s_lines.report.to_dict(), "tasks_measured": len(util_of)}
    rows = JobRows()
    for line_no, r in fixed_width_rows(p, lines, PAI2020_TASK_COLUMNS):
        if not r["plan_gpu"].strip() or not r["start_time"].strip() or not r["end_time"].strip():
            lines.exclude("no gpu plan or times")
            continue
        try:
            plan = parse_num(r["plan_gpu"], "plan_gpu", -1, PAI2020_PLAN_GPU_PER_GPU * MAX_GPUS_PER_JOB)
            start = parse_num(r["start_time"], "start_time")
            end = parse_num(r["end_time"], "end_time")
            inst = parse_num(r["inst_num"], "inst_num", 0, MAX_GPUS_PER_JOB)
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
        util = float("nan")
        if util_of:
            util = task_fraction(util_of.get((r["job_name"], r["task_name"])), plan)
        rows.add(f"{r['job_name']}/{r['task_name']}", start, end - start, per, units=units,
                 user=r["job_name"], gpu_types=types, gpu_util=util)
    if lines.report.utilisation is not None:
        lines.report.utilisation["jobs_with_util"] = sum(1 for u in rows.gpu_util if u == u)
    return finish_report(rows, lines)


# ---------------------------------------------------------------------------------------------- dispatch
def read_synthetic(path: str | Path, *, cluster_gpus: int | None = None, strict: bool = False,
                   max_jobs: int | None = None, progress: Callable[[int], None] | None = None) -> Trace:
    """A synthetic trace from a YAML/JSON file of :class:`SyntheticSpec` parameters. A spec asking for more
    than ``MAX_SYNTHETIC_JOBS`` jobs is generated only when ``max_jobs`` is at most the cap (then only
    ``max_jobs`` jobs), else refused naming the file's ``jobs`` field before anything is drawn;
    ``progress`` gets :func:`~clustertwin.sched.synthetic.generate`'s steps."""
    from clustertwin import specs
    from clustertwin.sched.synthetic import MAX_SYNTHETIC_JOBS, SyntheticSpec, generate

    p = open_trace(path)
    spec = specs.load(SyntheticSpec, str(p))
    if max_jobs is not None and spec.jobs > MAX_SYNTHETIC_JOBS >= max_jobs:
        spec = spec.model_copy(update={"jobs": max_jobs})  # above the cap: generate only what is replayed
    try:
        jobs = generate(spec, cluster_gpus, max_jobs=MAX_SYNTHETIC_JOBS, progress=progress)
    except SpecError as e:
        raise e.with_context(str(p)) from None
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
               max_jobs: int | None = None, sensor: str | Path | None = None,
               progress: Callable[[int], None] | None = None) -> Trace:
    """Read a trace in format ``fmt`` (one of ``FORMATS``); ``sensor`` joins PAI 2020's sensor table;
    ``progress`` follows the synthetic generator's steps."""
    if sensor is not None:
        if fmt != "pai2020":
            raise SpecError(f"--sensor joins the PAI 2020 sensor table; it does not apply to format '{fmt}'")
        return read_pai2020(path, strict=strict, sensor=sensor)
    if fmt == "synthetic":
        return read_synthetic(path, cluster_gpus=cluster_gpus, strict=strict, max_jobs=max_jobs,
                              progress=progress)
    if fmt not in READERS:
        raise SpecError(f"unknown trace format '{fmt}'{did_you_mean(fmt, FORMATS)}; choose from {', '.join(FORMATS)}")
    return READERS[fmt](path, strict=strict)
