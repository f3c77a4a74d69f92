"""Several clusters behind one federation policy (``sched federate``).

Each member is its own cluster with its own scheduling policy and placement. Jobs are submitted to the
federation; the simulators of all members advance in lock-step (one event loop), in member order at equal
times.

- ``first-start`` (Slurm federation sibling jobs / MultiKueue): a job is queued on every member that can
  ever run it; the first member whose scheduler starts it wins and the copies on the others are withdrawn.
  Members are tried in the order given, so at equal times the first-listed cluster wins.
- ``locality``: as ``first-start``, but a job whose data lives on another member (its ``home``) pays a WAN
  transfer there: ``dataset_bytes / (wan_gbps x 1e9)`` seconds added to its runtime and time limit on
  every member but its home (the transfer runs inside the allocation, as a stage-in step would).
- ``round-robin``: job ``i`` goes to member ``i mod k`` only (no federation: a baseline).

Per-member metrics and global metrics (all GPUs, all jobs) are reported. A job that no member can ever
run is unschedulable; every job ends the run in exactly one state (conservation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.sched import engine
from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.engine import SimConfig, SimResult, Simulator
from clustertwin.sched.failures import FailureEvents
from clustertwin.sched.jobs import JobTable
from clustertwin.sched.partitions import merge

FEDERATION_POLICIES = ("first-start", "locality", "round-robin")
BYTES_PER_GB = 1e9


@dataclass(frozen=True)
class Member:
    cluster: SchedCluster
    policy: str = "backfill"
    placement: str = "first-fit"
    failures: FailureEvents | None = None


@dataclass(frozen=True)
class FederationResult:
    members: tuple[SimResult, ...]
    """Per member: the jobs it ran (member 0 also holds the jobs no member started)."""
    combined: SimResult
    """All members as one: each job's outcome where it ran, all GPUs."""
    member_of_job: np.ndarray
    """Index of the member that ran each job (-1: never started)."""
    transfer_s: np.ndarray
    """WAN seconds each job paid where it ran."""


def simulate_federation(members: Sequence[Member], jobs: JobTable, policy: str = "first-start", *,
                        home: np.ndarray | None = None, dataset_bytes: np.ndarray | float = 0.0,
                        wan_gbps: float = 1.0, max_requeues: int = engine.MAX_REQUEUES_DEFAULT) -> FederationResult:
    """Run ``jobs`` over ``members`` under a federation ``policy`` (see the module docstring). ``home``:
    member holding each job's data (``locality``; default: job ``i`` at member ``i mod k``)."""
    if policy not in FEDERATION_POLICIES:
        raise SpecError(f"unknown federation policy '{policy}'; choose from {', '.join(FEDERATION_POLICIES)}")
    k = len(members)
    if k < 1:
        raise SpecError("a federation needs at least one member cluster")
    if not math.isfinite(wan_gbps) or wan_gbps <= 0:
        raise SpecError(f"wan_gbps must be a finite number > 0, got {wan_gbps}")
    n = len(jobs)
    home = np.arange(n) % k if home is None else np.asarray(home, dtype=np.int64)
    if len(home) != n or (n and (home.min() < 0 or home.max() >= k)):
        raise SpecError("home must give a member index for every job")
    data = np.broadcast_to(np.asarray(dataset_bytes, dtype=float), (n,))
    if n and (np.any(~np.isfinite(data)) or np.any(data < 0)):
        raise SpecError("dataset_bytes must be finite and >= 0")
    wan_s = data / (wan_gbps * BYTES_PER_GB)
    sims: list[Simulator] = []
    for m_idx, m in enumerate(members):
        extra = None
        accept = None
        if policy == "locality":
            extra = np.where(home == m_idx, 0.0, wan_s)
        elif policy == "round-robin":
            accept = (np.arange(n) % k) == m_idx
        cfg = SimConfig(policy=engine.get_policy(m.policy), placement=m.placement, max_requeues=max_requeues)
        sims.append(Simulator(m.cluster, jobs, cfg, m.failures, runtime_extra_s=extra, accept=accept))
    member_of = np.full(n, -1, dtype=np.int64)

    def started_on(m_idx: int):
        def hook(j: int) -> None:
            if member_of[j] < 0:
                member_of[j] = m_idx
                for o, other in enumerate(sims):
                    if o != m_idx:
                        other.withdraw(j)
        return hook

    for m_idx, sim in enumerate(sims):
        sim.on_start = started_on(m_idx)
        sim.begin()
    while True:
        t = min(sim.next_time() for sim in sims)
        if t == math.inf:
            break
        for sim in sims:
            sim.advance(t)
        for sim in sims:
            sim.arrive(t)
        for sim in sims:
            sim.schedule(t)
    results = tuple(sim._result() for sim in sims)
    parts = []
    all_idx = np.arange(n)
    for m_idx, res in enumerate(results):
        mine = member_of == m_idx
        # the member that ran a job reports it; the first member reports jobs that never started
        hold = mine | ((member_of < 0) & (m_idx == 0))
        sub = _restrict(res, hold)
        parts.append((sub, all_idx[hold]))
    combined = merge(jobs, parts, sum(m.cluster.total_gpus for m in members), f"federation:{policy}")
    # a job is unschedulable only if no member accepting it could ever run it
    never = np.ones(n, dtype=bool)
    for sim, res in zip(sims, results, strict=True):
        never &= ~sim.accept | res.unschedulable
    state = combined.state.copy()
    state[(member_of < 0) & never] = engine.UNSCHEDULABLE
    state[(member_of < 0) & ~never] = engine.QUEUED
    combined = _replace_state(combined, state, never)
    paid = np.where(member_of >= 0, np.where(member_of == home, 0.0, wan_s), 0.0) if policy == "locality" \
        else np.zeros(n)
    # timelines of the members cover their own GPUs; the combined one sums them
    combined_tl = _timeline_sum(results, combined)
    return FederationResult(tuple(sub for sub, _ in parts), combined_tl, member_of, paid)


def _restrict(res: SimResult, hold: np.ndarray) -> SimResult:
    """Per-job arrays of ``res`` for the jobs in ``hold`` (timelines kept whole)."""
    from dataclasses import replace

    return replace(res, jobs=res.jobs.subset(np.flatnonzero(hold)), state=res.state[hold],
                   first_start_s=res.first_start_s[hold], start_s=res.start_s[hold], end_s=res.end_s[hold],
                   requeues=res.requeues[hold], unschedulable=res.unschedulable[hold],
                   multi_leaf=res.multi_leaf[hold])


def _replace_state(res: SimResult, state: np.ndarray, never: np.ndarray) -> SimResult:
    from dataclasses import replace

    k = int((state == engine.UNSCHEDULABLE).sum())
    return replace(res, state=state, unschedulable=never,
                   unschedulable_causes={"no member cluster can ever run it": k} if k else {})


def _timeline_sum(results: Sequence[SimResult], combined: SimResult) -> SimResult:
    from dataclasses import replace

    from clustertwin.sched.partitions import step_at

    t = np.unique(np.concatenate([r.timeline_t for r in results]))
    def total(attr: str) -> np.ndarray:
        out = np.zeros(len(t))
        for r in results:
            v = getattr(r, attr)
            out += step_at(r.timeline_t, v if v is not None else r.timeline_alloc_gpus, t)
        return out
    return replace(combined, timeline_t=t, timeline_alloc_gpus=total("timeline_alloc_gpus"),
                   timeline_running=total("timeline_running").astype(np.int64),
                   timeline_queued=total("timeline_queued").astype(np.int64),
                   timeline_fragmented_gpus=total("timeline_fragmented_gpus"),
                   timeline_work_gpus=total("timeline_work_gpus"))
