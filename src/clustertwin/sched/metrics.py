"""Metrics of a simulation run.

- ``gpu_utilization``: allocated GPU-time / (GPUs x window) over the submission window, from the first to
  the last submission (the whole run when all jobs arrive at once), so that the drain of the last
  long jobs does not dilute it; with no per-job utilisation in the traces, allocation stands for
  utilisation. ``gpu_utilization_makespan`` uses the whole run instead.
- queueing delay: first start − submit of every job that started; ``avg``, ``median``, ``p99``.
- JCT: end − submit of completed jobs.
- bounded slowdown (Feitelson): mean of ``max((end − submit) / max(run, tau), 1)`` over completed jobs with
  ``tau = BOUNDED_SLOWDOWN_TAU_S``.
- ``fragmented_gpus``: time-average of free GPU capacity that no job in the queue window can use (0 when
  nothing waits).
- ``multi_leaf_jobs``: jobs whose allocation spanned more than one leaf switch.
- ``fairness_jain``: Jain's index ``(sum x)^2 / (n sum x^2)`` over users of their mean bounded slowdown
  (1 = every user is slowed down equally).
- ``work_utilization``: GPUs doing work, allocation x the job's own GPU utilisation (``JobTable.gpu_util``;
  allocation where the trace does not say), over the same window.
- counts: ``submitted`` = ``completed`` + ``killed`` (time limit or failure without requeue) + ``queued``
  (waiting at the end) + ``running`` (still running at the end, a federation's horizon) +
  ``unschedulable`` (can never fit the cluster or its team's quota); ``requeued`` (requeue events).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.sched.engine import COMPLETED, KILLED, QUEUED, RUNNING, UNSCHEDULABLE, SimResult

BOUNDED_SLOWDOWN_TAU_S = 10.0
"""Threshold of bounded slowdown (Feitelson et al., 'Theory and Practice in Parallel Job Scheduling',
JSSPP 1997): jobs shorter than 10 s count as 10 s long."""
P99 = 99.0


@dataclass(frozen=True)
class Metrics:
    gpu_utilization: float
    gpu_utilization_makespan: float
    work_utilization: float
    """GPUs doing work (allocation x each job's own GPU utilisation) over the same window; equals
    ``gpu_utilization`` when the trace carries no per-job utilisation."""
    avg_queue_s: float
    median_queue_s: float
    p99_queue_s: float
    avg_jct_s: float
    median_jct_s: float
    p99_jct_s: float
    bounded_slowdown: float
    fragmented_gpus: float
    multi_leaf_jobs: int
    fairness_jain: float
    makespan_s: float
    submitted: int
    completed: int
    killed: int
    queued: int
    running: int
    unschedulable: int
    requeued: int
    preempted: int
    failure_kills: int
    skipped_lines: int
    unschedulable_by_cause: dict
    """Unschedulable jobs by cause (more GPUs than the cluster, no node of an allowed model, ...)."""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _stat(values: np.ndarray, fn) -> float:
    return float(fn(values)) if len(values) else float("nan")


def time_average(t: np.ndarray, values: np.ndarray, until: float | None = None) -> float:
    """Piecewise-constant time average over ``[t[0], until]`` (default: the last time): ``values[i]``
    holds over ``[t[i], t[i+1])``."""
    if len(t) < 2:
        return 0.0
    end = float(t[-1]) if until is None else float(until)
    if end <= t[0]:
        return 0.0
    edges = np.minimum(np.append(t, end), end)
    dt = np.diff(edges)
    return float((values * dt).sum() / (end - t[0]))


def jain(x: np.ndarray) -> float:
    """Jain's fairness index of ``x`` (1 when all equal)."""
    x = x[np.isfinite(x)]
    if not len(x) or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


def compute(res: SimResult, *, skipped_lines: int = 0) -> Metrics:
    jobs = res.jobs
    started = ~np.isnan(res.first_start_s)
    wait = res.first_start_s[started] - jobs.submit_s[started]
    done = res.state == COMPLETED
    jct = res.end_s[done] - jobs.submit_s[done]
    run = np.minimum(jobs.runtime_s, jobs.limit_s)[done]
    bsld = np.maximum(jct / np.maximum(run, BOUNDED_SLOWDOWN_TAU_S), 1.0)
    if done.any():
        users = jobs.user[done]
        per_user = np.bincount(users, weights=bsld) / np.maximum(np.bincount(users), 1)
        per_user = per_user[np.bincount(users) > 0]
    else:
        per_user = np.zeros(0)
    t = res.timeline_t
    last_submit = float(jobs.submit_s[-1]) if len(jobs) else 0.0
    window_end = last_submit if len(t) and last_submit > t[0] else None
    util = time_average(t, res.timeline_alloc_gpus, window_end) / res.cluster_gpus
    util_all = time_average(t, res.timeline_alloc_gpus) / res.cluster_gpus
    work_tl = res.timeline_work_gpus if res.timeline_work_gpus is not None else res.timeline_alloc_gpus
    work = time_average(t, work_tl, window_end) / res.cluster_gpus
    span = float(t[-1] - jobs.submit_s[0]) if len(t) and len(jobs) else 0.0
    return Metrics(
        gpu_utilization=util,
        gpu_utilization_makespan=util_all,
        work_utilization=work,
        avg_queue_s=_stat(wait, np.mean),
        median_queue_s=_stat(wait, np.median),
        p99_queue_s=_stat(wait, lambda v: np.percentile(v, P99)),
        avg_jct_s=_stat(jct, np.mean),
        median_jct_s=_stat(jct, np.median),
        p99_jct_s=_stat(jct, lambda v: np.percentile(v, P99)),
        bounded_slowdown=_stat(bsld, np.mean),
        fragmented_gpus=time_average(t, res.timeline_fragmented_gpus),
        multi_leaf_jobs=int(res.multi_leaf.sum()),
        fairness_jain=jain(per_user),
        makespan_s=span,
        submitted=len(jobs),
        completed=int(done.sum()),
        killed=int((res.state == KILLED).sum()),
        queued=int((res.state == QUEUED).sum()),
        running=int((res.state == RUNNING).sum()),
        unschedulable=int((res.state == UNSCHEDULABLE).sum()),
        requeued=int(res.requeues.sum()),
        preempted=res.preemptions,
        failure_kills=res.failure_kills,
        skipped_lines=skipped_lines,
        unschedulable_by_cause=dict(res.unschedulable_causes),
    )


def job_records(res: SimResult) -> list[dict]:
    """Per-job outcome: id, submit, (last) start, end, state; with recorded allocations also ``nodes``, the
    distinct nodes of the job's last finished allocation in placement order (a ``train --placement`` node
    list: node numbers follow the cluster spec's topology), None for a job that never finished one."""
    from clustertwin.sched.engine import STATE_NAMES

    jobs = res.jobs
    last_nodes: dict[int, list[int]] = {}
    for a in res.allocations or ():
        last_nodes[int(a[0])] = list(dict.fromkeys(int(n) for n in a[3].tolist()))
    out = []
    for j in range(len(jobs)):
        rec = {
            "id": jobs.ids[j],
            "submit_s": float(jobs.submit_s[j]),
            "start_s": None if np.isnan(res.start_s[j]) else float(res.start_s[j]),
            "end_s": None if np.isnan(res.end_s[j]) else float(res.end_s[j]),
            "state": STATE_NAMES[int(res.state[j])],
        }
        if res.allocations:
            rec["nodes"] = last_nodes.get(j)
        out.append(rec)
    return out


def timeline_rows(res: SimResult) -> list[tuple[float, float, float, int, int, float]]:
    """(time_s, allocated_gpus, utilization, running_jobs, queued_jobs, fragmented_gpus) per event time."""
    return [
        (float(t), float(a), float(a) / res.cluster_gpus, int(r), int(q), float(f))
        for t, a, r, q, f in zip(res.timeline_t, res.timeline_alloc_gpus, res.timeline_running,
                                 res.timeline_queued, res.timeline_fragmented_gpus, strict=True)
    ]
