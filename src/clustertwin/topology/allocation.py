"""A job's nodes as the scheduler simulator allocated them, as a training placement.

:func:`clustertwin.sched.engine.simulate` with ``record_allocations=True`` keeps every allocation a job
held (``SimResult.allocations``: job index, start, end, the node of every GPU slot, its milli-GPUs). The
scheduler's cluster built from a ``ClusterSpec`` (:func:`clustertwin.sched.cluster.from_spec`) numbers
nodes as the topology does, so a job's distinct nodes, in the order the placer filled them, are a
placement for ``train.estimate/search/scale`` (``placement=[...]``): a fragmented first-fit allocation
spread over leaves costs spine bandwidth and switch hops as it would on the real fabric.
"""

from __future__ import annotations

from typing import Any

from clustertwin.errors import SpecError, did_you_mean


def allocation_nodes(result: Any, job: str | int, which: int = -1) -> list[int]:
    """Distinct nodes of ``job``'s allocation (``which``: its index among the job's allocations, default the
    last; a requeued job has several), in placement order. ``job``: the trace's job id or its row.

    Raises SpecError for an unknown job, a result simulated without ``record_allocations=True`` or a job
    with no finished allocation."""
    ids = list(result.jobs.ids)
    if isinstance(job, str):
        if job not in ids:
            raise SpecError(f"no job '{job}' in the simulation{did_you_mean(job, ids)}", path=("job",))
        j = ids.index(job)
    else:
        j = int(job)
        if not 0 <= j < len(ids):
            raise SpecError(f"job row must be 0..{len(ids) - 1} (got {job})", path=("job",))
    if not result.allocations:
        raise SpecError("the simulation recorded no allocations: run it with record_allocations=True")
    held = [a for a in result.allocations if a[0] == j]
    if not held:
        raise SpecError(f"job '{ids[j]}' has no finished allocation in this simulation (never started, or "
                        f"still running at its end)", path=("job",))
    try:
        nodes = held[which][3]
    except IndexError:
        raise SpecError(f"job '{ids[j]}' has {len(held)} allocation(s); which={which} is out of range",
                        path=("which",)) from None
    return list(dict.fromkeys(int(n) for n in nodes.tolist()))
