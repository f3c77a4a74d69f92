"""Per-task GPU utilisation from the Alibaba PAI 2020 sensor table (``pai_sensor_table.csv``), so that
work utilisation (allocation x each job's own GPU utilisation) uses the trace's measurement.

Columns (alibaba/clusterdata ``cluster-trace-gpu-v2020``; headerless as published, a header line is
accepted): ``job_name, task_name, worker_name, inst_id, machine, gpu_name, cpu_usage, gpu_wrk_util,
avg_mem, max_mem, avg_gpu_wrk_mem, max_gpu_wrk_mem, read, write, read_count, write_count``, one row per
worker (instance). ``gpu_wrk_util`` is in percent of one GPU, like the task table's ``plan_gpu``
(100 = one GPU fully busy), so a task's utilisation is

    util(task) = mean over its workers of gpu_wrk_util / plan_gpu,   clipped to [0, 1]

(a worker may exceed its plan by sharing spare GPU cycles; the share of the allocation doing work cannot).
Rows that cannot be parsed are counted and reported; a worker with an empty ``gpu_wrk_util`` (no GPU
sampled) is counted as excluded, not as zero.
"""

from __future__ import annotations

import math
from pathlib import Path

from clustertwin.sched.trace_io import LineCounter, fixed_width_rows, open_trace, parse_num

SENSOR_COLUMNS = ("job_name", "task_name", "worker_name", "inst_id", "machine", "gpu_name", "cpu_usage",
                  "gpu_wrk_util", "avg_mem", "max_mem", "avg_gpu_wrk_mem", "max_gpu_wrk_mem", "read", "write",
                  "read_count", "write_count")
MAX_WORKER_UTIL_PERCENT = 100.0 * 64
"""Upper bound on one worker's ``gpu_wrk_util`` (64 GPUs fully busy); larger values are malformed."""


def read_sensor_util(path: str | Path, *, strict: bool = False) -> tuple[dict[tuple[str, str], float], LineCounter]:
    """Mean ``gpu_wrk_util`` (percent of one GPU) per (job_name, task_name) and the line accounting."""
    p = open_trace(path)
    lines = LineCounter(p, "pai2020-sensor", strict)
    sums: dict[tuple[str, str], list[float]] = {}
    for line_no, rec in fixed_width_rows(p, lines, SENSOR_COLUMNS):
        raw = rec["gpu_wrk_util"].strip()
        if not raw:
            lines.exclude("worker without gpu_wrk_util")
            continue
        try:
            util = parse_num(raw, "gpu_wrk_util", 0, MAX_WORKER_UTIL_PERCENT)
        except ValueError as e:
            lines.bad(line_no, str(e), getattr(e, "cause", "malformed"))
            continue
        acc = sums.setdefault((rec["job_name"], rec["task_name"]), [0.0, 0.0])
        acc[0] += util
        acc[1] += 1.0
    lines.report.jobs = len(sums)
    return {k: s / n for k, (s, n) in sums.items()}, lines


def task_fraction(mean_util_percent: float | None, plan_gpu_percent: float) -> float:
    """A task's GPU utilisation as a fraction of its allocation (module docstring); NaN if unmeasured."""
    if mean_util_percent is None or not math.isfinite(mean_util_percent) or plan_gpu_percent <= 0:
        return float("nan")
    return min(1.0, max(0.0, mean_util_percent / plan_gpu_percent))
