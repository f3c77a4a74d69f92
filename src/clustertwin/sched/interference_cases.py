"""``interference`` validation cases: published inter-job interference and ECMP collision figures.

A case describes a scenario on one fabric and the quantity that was measured; :func:`evaluate` computes the
same quantity with the contention model of :mod:`clustertwin.sched.contention` (physics only: nothing in a
case is a fitted constant).

Case fields (format: validation/README.md):

- ``cluster``: catalog id or inline cluster spec (docs/specs.md); an inline ``network.switch`` gives the leaf
  radix (e.g. 32 ports: 16 down, 16 up).
- ``routing``: ``ecmp`` (default) or ``adaptive``; ``flows_per_nic`` (default 1): flows each NIC opens per ring
  edge (NCCL channels per network peer x queue pairs per connection), each hashed on its own.
- ``jobs``: a list of ``{nodes, placement, seed}`` (``placement``: ``packed``, the lowest free node indices;
  ``random``, a seeded draw from the free nodes; or ``node_list``, explicit node indices), placed in order.
- ``job`` (default 0): the job whose figures are reported.
- ``compare``: other settings (``routing``, ``flows_per_nic``) for ``improvement``.
- ``tolerance``: the relative error the case is allowed (used by tests; reported under ``predicted``).

Predicted keys (job ``j``, all jobs running, each at its max-min fair rate ``x_j``; contention module):

- ``bandwidth_fraction`` = ``x_j``: delivered / line-rate injection while the job communicates.
- ``slowdown`` = ``x_j(alone) / x_j``: communication time shared over alone (same routing, fabric to itself).
- ``improvement`` = ``x_j(compare) / x_j - 1``: collective bandwidth gain from the case's settings to
  ``compare``'s (only with ``compare``).

``x_j`` is ``x_alone / s_j`` with ``x_alone`` the job's adaptive-routing rate alone and ``s_j`` its slowdown
from :func:`clustertwin.sched.contention.bottleneck_slowdowns` (ECMP: a bundle of ``n`` links carrying ``k``
hashed flows delivers ``k x port / max(q, M(k, n))``, ``M`` the balls-into-bins expected maximum load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clustertwin import specs
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.inputs import CASE_METADATA_KEYS
from clustertwin.sched import contention
from clustertwin.topology import build

CASE_KEYS = CASE_METADATA_KEYS | frozenset({"cluster", "routing", "flows_per_nic", "jobs", "job", "compare",
                                            "tolerance"})
JOB_KEYS = frozenset({"nodes", "placement", "seed", "node_list"})
COMPARE_KEYS = frozenset({"routing", "flows_per_nic"})
PLACEMENTS = ("packed", "random", "node_list")
MAX_JOBS = 4096


@dataclass(frozen=True)
class Settings:
    """Routing and flows per NIC of one evaluation."""

    routing: str
    flows_per_nic: int


def _unknown(d: dict[str, Any], allowed: frozenset[str], path: tuple[str | int, ...]) -> None:
    extra = sorted(str(k) for k in set(d) - allowed)
    if extra:
        raise SpecError(f"unknown key '{extra[0][:60]}'{did_you_mean(extra[0], sorted(allowed))}",
                        path=(*path, extra[0]))


def _int(value: Any, path: tuple[str | int, ...], low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError(f"expected an integer from {low} to {high} (got {str(value)[:40]!r})", path=path)
    return value


def _settings(d: dict[str, Any], base: Settings | None, path: tuple[str, ...]) -> Settings:
    routing = d.get("routing", base.routing if base else "ecmp")
    if routing not in contention.ROUTINGS:
        raise SpecError(f"unknown routing '{str(routing)[:40]}'{did_you_mean(str(routing), contention.ROUTINGS)}; "
                        f"choose from {', '.join(contention.ROUTINGS)}", path=(*path, "routing"))
    q = d.get("flows_per_nic", base.flows_per_nic if base else 1)
    return Settings(str(routing), _int(q, (*path, "flows_per_nic"), 1, 1024))


def place_jobs(jobs: Any, nodes: int) -> list[np.ndarray]:
    """Node indices of every job of a case's ``jobs`` list on a cluster of ``nodes`` nodes, placed in order:
    ``packed`` takes the lowest free indices, ``random`` a seeded uniform draw from the free ones
    (``numpy.random.default_rng(seed)``), ``node_list`` the given indices (distinct, free, in range)."""
    if not isinstance(jobs, list) or not jobs or len(jobs) > MAX_JOBS:
        raise SpecError(f"expected a list of 1 to {MAX_JOBS} jobs ({{nodes, placement, seed}})", path=("jobs",))
    free = np.ones(nodes, dtype=bool)
    out: list[np.ndarray] = []
    for i, job in enumerate(jobs):
        path: tuple[str | int, ...] = ("jobs", i)
        if not isinstance(job, dict):
            raise SpecError("expected a mapping {nodes, placement, seed}", path=path)
        _unknown(job, JOB_KEYS, path)
        placement = job.get("placement", "node_list" if "node_list" in job else "packed")
        if placement not in PLACEMENTS:
            raise SpecError(f"unknown placement '{str(placement)[:40]}'{did_you_mean(str(placement), PLACEMENTS)};"
                            f" choose from {', '.join(PLACEMENTS)}", path=(*path, "placement"))
        if placement == "node_list":
            picked = _node_list(job.get("node_list"), free, (*path, "node_list"))
        else:
            if "nodes" not in job:
                raise SpecError("required field missing", path=(*path, "nodes"))
            n = _int(job["nodes"], (*path, "nodes"), 1, int(free.sum()) or 1)
            idle = np.flatnonzero(free)
            if n > len(idle):
                raise SpecError(f"{n} nodes do not fit: {len(idle)} left free", path=(*path, "nodes"))
            if placement == "packed":
                picked = idle[:n]
            else:
                seed = _int(job.get("seed", 0), (*path, "seed"), 0, 2**32 - 1)
                picked = np.sort(np.random.default_rng(seed).choice(idle, size=n, replace=False))
        free[picked] = False
        out.append(picked.astype(np.int64))
    return out


def _node_list(value: Any, free: np.ndarray, path: tuple[str | int, ...]) -> np.ndarray:
    if not isinstance(value, list) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SpecError("expected a non-empty list of node indices", path=path)
    idx = np.asarray(value, dtype=np.int64)
    if idx.min() < 0 or idx.max() >= len(free):
        raise SpecError(f"node index out of range 0..{len(free) - 1}", path=path)
    if len(np.unique(idx)) != len(idx) or not free[idx].all():
        raise SpecError("node indices must be distinct and not used by an earlier job", path=path)
    return np.sort(idx)


def job_rates(topology: Any, settings: Settings, jobs: list[np.ndarray]) -> list[float]:
    """Max-min fair rate ``x_j`` (fraction of line-rate injection) of every job while all communicate at once:
    ``x_alone / s_j`` (:func:`~clustertwin.sched.contention.alone_rate`,
    :func:`~clustertwin.sched.contention.bottleneck_slowdowns`)."""
    fabric = contention.fabric_of(topology, settings.routing, settings.flows_per_nic)
    flows = np.zeros(fabric.bundles, dtype=np.int64)
    nets: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
    for j, nodes in enumerate(jobs):
        bundles, f = fabric.demand(nodes)
        nets[j] = (bundles, f, contention.alone_rate(bundles, f, fabric))
        np.add.at(flows, bundles, f)
    slow = contention.bottleneck_slowdowns(fabric, flows, nets)
    return [nets[j][2] / slow.get(j, 1.0) for j in range(len(jobs))]


def _topology(case: dict[str, Any]) -> Any:
    if "cluster" not in case:
        raise SpecError("required field missing (catalog id or inline cluster spec)", path=("cluster",))
    try:
        spec = specs.load(specs.ClusterSpec, case["cluster"], kind="cluster")
    except SpecError as e:
        raise e.with_context(prefix=("cluster",)) from None
    return build(spec)


def evaluate(case: dict[str, Any]) -> dict[str, Any]:
    """Predict ``bandwidth_fraction``, ``slowdown`` and (with ``compare``) ``improvement`` of job ``job``."""
    _unknown(case, CASE_KEYS, ())
    if "jobs" not in case:
        raise SpecError("required field missing (a list of {nodes, placement, seed})", path=("jobs",))
    tol = case.get("tolerance")
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 < tol < 10):
        raise SpecError(f"expected a relative error above 0 and below 10 (got {str(tol)[:40]!r})",
                        path=("tolerance",))
    base = _settings(case, None, ())
    compare = case.get("compare")
    if compare is not None and not isinstance(compare, dict):
        raise SpecError("expected a mapping {routing, flows_per_nic}", path=("compare",))
    if compare is not None:
        _unknown(compare, COMPARE_KEYS, ("compare",))
    topo = _topology(case)
    jobs = place_jobs(case["jobs"], int(topo.nodes))
    j = _int(case.get("job", 0), ("job",), 0, len(jobs) - 1)
    shared = job_rates(topo, base, jobs)[j]
    alone = job_rates(topo, base, [jobs[j]])[0]
    out: dict[str, Any] = {
        "bandwidth_fraction": round(shared, 4),
        "slowdown": round(alone / max(shared, 1e-12), 4),
        "alone_bandwidth_fraction": round(alone, 4),
        "routing": base.routing,
        "flows_per_nic": base.flows_per_nic,
        "job_nodes": len(jobs[j]),
    }
    if compare is not None:
        other = _settings(compare, base, ("compare",))
        x_other = job_rates(topo, other, jobs)[j]
        out["improvement"] = round(x_other / max(shared, 1e-12) - 1.0, 4)
        out["compare_bandwidth_fraction"] = round(x_other, 4)
    if tol is not None:
        out["tolerance"] = float(tol)
    return out
