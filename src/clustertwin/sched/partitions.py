"""Team partitions vs quotas vs one shared pool, on the same trace (``sched partitions``).

Layouts, each with the same scheduling policy inside:

- ``team-partitions``: every team owns a fixed set of nodes (Slurm partitions with disjoint node lists,
  equal GPU shares unless given); a team's jobs run only on its nodes. Disjoint partitions never interact,
  so the layout is simulated exactly as one independent cluster per team and the results merged.
- ``team-quotas``: one cluster, each team capped at its nominal GPU quota, no borrowing (Kueue
  ClusterQueues without a cohort): fixed shares in GPU count rather than node lists.
- ``cohort``: the same quotas in one Kueue cohort: unused quota is lent and borrowed
  (:mod:`clustertwin.sched.quota`), optionally with a borrowing limit.
- ``shared-pool``: no partitions or quotas.

Utilisation is measured over the submission window (see :mod:`clustertwin.sched.metrics`); with fixed
shares it is at most ``sum_team min(offered_team, share_team)`` while a pool reaches ``min(offered, ~1)``:
the gap is the demand of busy teams that idle GPUs of quiet teams cannot serve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.sched import engine
from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.engine import QUEUED, UNSCHEDULABLE, SimResult
from clustertwin.sched.jobs import JobTable
from clustertwin.sched.quota import QuotaLayout, TeamQuota

LAYOUTS = ("team-partitions", "team-quotas", "cohort", "shared-pool")


def sub_cluster(cluster: SchedCluster, nodes: np.ndarray, name: str) -> SchedCluster:
    return SchedCluster(
        name=name, gpus=cluster.gpus[nodes], model_code=cluster.model_code[nodes], models=cluster.models,
        leaf=np.unique(cluster.leaf[nodes], return_inverse=True)[1].astype(np.int64),
        node_names=tuple(cluster.node_names[i] for i in nodes) if cluster.node_names else (),
        cpu_milli=None if cluster.cpu_milli is None else cluster.cpu_milli[nodes],
        memory_mib=None if cluster.memory_mib is None else cluster.memory_mib[nodes],
    )


def split_nodes(cluster: SchedCluster, shares: Sequence[float]) -> list[np.ndarray]:
    """Consecutive node ranges whose GPU counts follow ``shares`` (largest remainder, at least one
    node each)."""
    k = len(shares)
    if k < 1 or k > cluster.nodes:
        raise SpecError(f"cannot split {cluster.nodes} nodes into {k} team partitions")
    w = np.asarray(shares, dtype=float)
    if np.any(~np.isfinite(w)) or np.any(w <= 0):
        raise SpecError("team shares must be finite and > 0")
    cum = np.cumsum(cluster.gpus)
    target = np.cumsum(w / w.sum()) * cum[-1]
    cuts = [0]
    for i in range(k - 1):
        c = int(np.searchsorted(cum, target[i] - 1e-9)) + 1
        c = min(max(c, cuts[-1] + 1), cluster.nodes - (k - 1 - i))
        cuts.append(c)
    cuts.append(cluster.nodes)
    return [np.arange(cuts[i], cuts[i + 1]) for i in range(k)]


def step_at(t_src: np.ndarray, v_src: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Piecewise-constant ``v_src`` (holding from each ``t_src``) sampled at ``t``; 0 before the first."""
    if len(t_src) == 0:
        return np.zeros(len(t))
    i = np.searchsorted(t_src, t, side="right") - 1
    return np.where(i >= 0, np.asarray(v_src, dtype=float)[np.maximum(i, 0)], 0.0)


def merge(jobs: JobTable, parts: list[tuple[SimResult, np.ndarray]], cluster_gpus: int, name: str) -> SimResult:
    """One result for ``jobs`` from per-cluster results; ``parts[k] = (result, global index of each of its
    jobs)``. A job no part ran keeps the state of the first part that holds it (queued/unschedulable)."""
    n = len(jobs)
    state = np.full(n, -1, dtype=np.int64)
    arrays = {k: np.full(n, np.nan) for k in ("first_start", "start", "end")}
    requeues = np.zeros(n, dtype=np.int64)
    unsched = np.ones(n, dtype=bool)
    multi = np.zeros(n, dtype=bool)
    for res, idx in parts:
        ran = ~np.isnan(res.first_start_s)
        take = ran | (state[idx] < 0)
        g = idx[take]
        state[g] = res.state[take]
        arrays["first_start"][g] = res.first_start_s[take]
        arrays["start"][g] = res.start_s[take]
        arrays["end"][g] = res.end_s[take]
        requeues[idx] += res.requeues
        multi[idx] |= res.multi_leaf
        unsched[idx] &= res.unschedulable
    state[state < 0] = QUEUED
    # a job unschedulable in one part but held by another that could run it is only queued
    state[(state == UNSCHEDULABLE) & ~unsched] = QUEUED
    t = np.unique(np.concatenate([r.timeline_t for r, _ in parts])) if parts else np.zeros(0)

    def total(attr: str) -> np.ndarray:
        out = np.zeros(len(t))
        for r, _ in parts:
            v = getattr(r, attr)
            out += step_at(r.timeline_t, v if v is not None else r.timeline_alloc_gpus, t)
        return out

    return SimResult(
        policy=name, placement=parts[0][0].placement if parts else "", cluster_gpus=cluster_gpus, jobs=jobs,
        state=state, first_start_s=arrays["first_start"], start_s=arrays["start"], end_s=arrays["end"],
        requeues=requeues, unschedulable=unsched, multi_leaf=multi,
        killed_by_timeout=sum(r.killed_by_timeout for r, _ in parts),
        preemptions=sum(r.preemptions for r, _ in parts), failure_kills=sum(r.failure_kills for r, _ in parts),
        timeline_t=t, timeline_alloc_gpus=total("timeline_alloc_gpus"),
        timeline_running=total("timeline_running").astype(np.int64),
        timeline_queued=total("timeline_queued").astype(np.int64),
        timeline_fragmented_gpus=total("timeline_fragmented_gpus"), timeline_work_gpus=total("timeline_work_gpus"),
        unschedulable_causes=_sum_counts([r.unschedulable_causes for r, _ in parts]),
    )


def _sum_counts(counts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items()))


def simulate_layout(layout: str, cluster: SchedCluster, jobs: JobTable, team_of_job: np.ndarray,
                    team_names: Sequence[str], *, policy: str = "backfill", placement: str = "first-fit",
                    shares: Sequence[float] | None = None, borrowing_limit_gpus: float | None = None,
                    **kw) -> SimResult:
    """Simulate ``jobs`` under one of ``LAYOUTS``; ``shares`` are the teams' GPU shares (default equal)."""
    if layout not in LAYOUTS:
        raise SpecError(f"unknown layout '{layout}'; choose from {', '.join(LAYOUTS)}")
    k = len(team_names)
    w = np.ones(k) if shares is None else np.asarray(shares, dtype=float)
    if len(w) != k:
        raise SpecError(f"{len(w)} team shares for {k} teams")
    if layout == "shared-pool":
        return engine.simulate(cluster, jobs, policy, placement=placement, **kw)
    if layout == "team-partitions":
        parts = []
        for team, nodes in enumerate(split_nodes(cluster, w)):
            idx = np.flatnonzero(team_of_job == team)
            sub = sub_cluster(cluster, nodes, f"{cluster.name}/{team_names[team]}")
            if len(idx) == 0:
                continue
            parts.append((engine.simulate(sub, jobs.subset(idx), policy, placement=placement, **kw), idx))
        return merge(jobs, parts, cluster.total_gpus, policy)
    nominal = w / w.sum() * cluster.total_gpus
    teams = tuple(TeamQuota(str(team_names[i]), float(nominal[i]),
                            borrowing_limit_gpus=borrowing_limit_gpus if layout == "cohort" else None)
                  for i in range(k))
    quotas = QuotaLayout(teams, np.asarray(team_of_job, dtype=np.int64), cohort=layout == "cohort")
    return engine.simulate(cluster, jobs, policy, placement=placement, quotas=quotas, **kw)


def team_utilization(res: SimResult, team_of_job: np.ndarray, teams: int) -> np.ndarray:
    """GPU-seconds each team held over the run, as a fraction of all GPU-seconds held."""
    held = np.zeros(teams)
    ran = ~np.isnan(res.start_s) & ~np.isnan(res.end_s)
    gpus = res.jobs.total_gpus
    np.add.at(held, team_of_job[ran], gpus[ran] * (res.end_s[ran] - res.start_s[ran]))
    return held / held.sum() if held.sum() > 0 else held
