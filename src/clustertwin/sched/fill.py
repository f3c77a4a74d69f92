"""Fill experiment: how many GPUs stay unallocated when a cluster is filled with a trace's task mix.

This is the evaluation of FGD (Weng et al., USENIX ATC 2023, section 6): tasks drawn from the trace arrive
one after another and never leave; each is placed at once or fails (no queue). As the arrived GPU demand
grows past the cluster's capacity, a placement that fragments less keeps more tasks running, so fewer
GPUs are left unallocated. Every placement sees the same seeded arrival sequence, hence the same load.

``unallocated_gpus(L)`` = capacity − allocated GPUs at the moment the arrived demand first reaches
``L x capacity``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.engine import Policy, SimConfig, Simulator
from clustertwin.sched.jobs import MILLI_PER_GPU, JobTable
from clustertwin.sched.placement import Placer, WorkloadShapes
from clustertwin.sched.state import ClusterState

_GPU_EPS = 1e-9
"""Tolerance when comparing summed fractional GPU demands with a load point."""
MAX_LOAD = 100.0
"""Largest arrived demand, as a fraction of capacity, a fill may report at (bounds the arrival sample)."""
DEFAULT_LOADS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)
"""Arrived demand as a fraction of GPU capacity at which to report (FGD plots 0-130 %)."""


@dataclass(frozen=True)
class FillResult:
    placement: str
    capacity_gpus: int
    loads: tuple[float, ...]
    unallocated_gpus: tuple[float, ...]
    failed_tasks: tuple[int, ...]
    arrived_tasks: int

    def to_dict(self) -> dict:
        return {
            "placement": self.placement,
            "capacity_gpus": self.capacity_gpus,
            "arrived_tasks": self.arrived_tasks,
            "points": [
                {"load": lo, "unallocated_gpus": u, "failed_tasks": f}
                for lo, u, f in zip(self.loads, self.unallocated_gpus, self.failed_tasks, strict=True)
            ],
        }


def arrival_order(jobs: JobTable, capacity_gpus: int, max_load: float, seed: int) -> np.ndarray:
    """Job indices drawn uniformly with replacement (seeded) until their GPUs sum to
    ``max_load x capacity``."""
    if len(jobs) == 0:
        raise SpecError("the trace holds no GPU jobs to fill the cluster with")
    rng = np.random.default_rng(seed)
    gpus = jobs.total_gpus
    target = max_load * capacity_gpus
    draws = max(int(2 * target / max(float(gpus.mean()), 1e-9)), 16)
    idx = rng.integers(0, len(jobs), size=draws)
    while gpus[idx].sum() < target:
        idx = np.concatenate([idx, rng.integers(0, len(jobs), size=draws)])
    cum = np.cumsum(gpus[idx])
    return idx[: int(np.searchsorted(cum, target)) + 1]


def fill(cluster: SchedCluster, jobs: JobTable, placement: str, *, loads: Sequence[float] = DEFAULT_LOADS,
         seed: int = 0, progress: Callable[[int], None] | None = None) -> FillResult:
    """Run the fill experiment for one placement (see the module docstring)."""
    loads = tuple(sorted(float(x) for x in loads))
    if not loads or loads[0] <= 0 or not np.isfinite(loads[-1]) or loads[-1] > MAX_LOAD:
        raise SpecError(f"fill loads must be finite fractions of capacity in (0, {MAX_LOAD:g}]")
    cap = cluster.total_gpus
    order = arrival_order(jobs, cap, loads[-1], seed)
    # requests (eligibility, spread/whole/share) exactly as the engine builds them
    sim = Simulator(cluster, jobs, SimConfig(policy=Policy("fill", "fifo", backfill=False), placement="first-fit"))
    shapes = WorkloadShapes.from_jobs(jobs, cluster.max_gpus_per_node) if placement == "fgd" else None
    placer = Placer(placement, shapes)
    state = ClusterState(cluster)
    gpus = jobs.total_gpus
    arrived = 0.0
    allocated_milli = 0
    failed = 0
    out_unalloc: list[float] = []
    out_failed: list[int] = []
    li = 0
    for k, j in enumerate(order.tolist()):
        arrived += float(gpus[j])
        alloc = placer.place(state, sim.requests[j])
        if alloc is None:
            failed += 1
        else:
            state.apply(alloc, -1)
            allocated_milli += alloc.total_milli
        while li < len(loads) and arrived >= loads[li] * cap - _GPU_EPS:
            out_unalloc.append(cap - allocated_milli / MILLI_PER_GPU)
            out_failed.append(failed)
            li += 1
        if progress is not None:
            progress(k)
    while li < len(loads):  # rounding: the last point is reached by construction
        out_unalloc.append(cap - allocated_milli / MILLI_PER_GPU)
        out_failed.append(failed)
        li += 1
    return FillResult(placement, cap, loads, tuple(out_unalloc), tuple(out_failed), len(order))
