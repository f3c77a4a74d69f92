"""Node failure and repair events for the scheduler engine.

The engine takes any :class:`FailureEvents`. The small generator here draws, independently per node, exponential times to failure (constant hazard, mean
``mtbf_h``) and exponential repair durations (mean ``mttr_h``): a node fails, stays down for its repair,
comes back, and the next time to failure starts at the repair. The per-node MTBF is a parameter, or comes
from the reliability layer's calibrated failure model (:func:`reliability_node_mtbf_h`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.units import DAY_S, HOUR_S

FAILURES_PER_1000_NODE_DAYS_RSC1 = 6.50
"""Meta RSC-1 (16K A100): 6.50 failures per 1,000 node-days (Kokolis et al. 2024, 'Revisiting
Reliability in Large-Scale Machine Learning Research Clusters', arXiv 2410.21680, HPCA 2025)."""
DEFAULT_NODE_MTBF_H = 1000.0 / FAILURES_PER_1000_NODE_DAYS_RSC1 * DAY_S / HOUR_S
"""Per-node mean time between failures implied by the RSC-1 rate: 1000 / 6.5 node-days = 3,692 h."""
DEFAULT_NODE_MTTR_H = 4.0
"""Mean node repair time (an assumption: a reboot and health check to a part swap; set it per site)."""


@dataclass(frozen=True)
class FailureEvents:
    """Node ``node[i]`` fails at ``fail_s[i]`` and is repaired ``repair_s[i]`` seconds later.
    Outages of one node must not overlap."""

    node: np.ndarray
    fail_s: np.ndarray
    repair_s: np.ndarray

    def __post_init__(self) -> None:
        if not (len(self.node) == len(self.fail_s) == len(self.repair_s)):
            raise SpecError("failure events need equal-length node, fail_s and repair_s arrays")
        if len(self.node) and (np.any(self.fail_s < 0) or np.any(self.repair_s <= 0)):
            raise SpecError("failure times must be >= 0 and repair durations > 0")
        order = np.lexsort((self.fail_s, self.node))
        n, f, r = self.node[order], self.fail_s[order], self.repair_s[order]
        same = n[1:] == n[:-1]
        if np.any(same & (f[1:] < f[:-1] + r[:-1])):
            raise SpecError("failure events of one node overlap (a node fails while it is being repaired)")

    def __len__(self) -> int:
        return len(self.node)

    @classmethod
    def none(cls) -> FailureEvents:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))


MAX_FAILURE_EVENTS = 2_000_000
"""Most failure events generated without an explicit override (``--max-failure-events``)."""

DEFAULT_NIC_PORTS_PER_NODE = 8
"""Compute NIC ports per node assumed when asking the reliability model for a node's failure rate
(8 x 400G, as DGX/HGX H100 nodes)."""


def reliability_node_mtbf_h(gpus_per_node: np.ndarray,
                            nic_ports_per_node: int = DEFAULT_NIC_PORTS_PER_NODE) -> np.ndarray:
    """Per-node MTBF (h) from the reliability layer's calibrated failure model: the mean time between
    unexpected interruptions of a one-node job, ``1 / sum_c rate_c x units_c(node)`` (Llama 3 causes:
    6,335 h for an 8-GPU node)."""
    from clustertwin.reliability.failures import job_failure_rates

    out = np.empty(len(gpus_per_node))
    cache: dict[int, float] = {}
    for i, g in enumerate(np.asarray(gpus_per_node).tolist()):
        if g not in cache:
            cache[g] = job_failure_rates(max(int(g), 1), max(int(g), 1), nic_ports_per_node).mtbf_h
        out[i] = cache[g]
    return out


def exponential_failures(nodes: int, horizon_s: float, *, mtbf_h: float | np.ndarray = DEFAULT_NODE_MTBF_H,
                         mttr_h: float = DEFAULT_NODE_MTTR_H, seed: int = 0,
                         max_events: int = 0) -> FailureEvents:
    """Failures of ``nodes`` nodes over ``[0, horizon_s)``: time to failure ~ Exp(mean ``mtbf_h``, one value
    or one per node), repair ~ Exp(mean ``mttr_h``), independent per node, seeded."""
    mtbf = np.broadcast_to(np.asarray(mtbf_h, dtype=float), (nodes,)) if nodes >= 1 else np.zeros(0)
    if (nodes < 1 or not np.isfinite(horizon_s) or horizon_s <= 0 or np.any(~np.isfinite(mtbf))
            or np.any(mtbf <= 0) or not np.isfinite(mttr_h) or mttr_h <= 0):
        raise SpecError("failure generator needs nodes >= 1 and finite, positive horizon, MTBF and MTTR")
    cap = max_events or MAX_FAILURE_EVENTS
    expected = float(np.sum(horizon_s / (mtbf * HOUR_S)))
    if expected > cap:
        raise SpecError(f"about {expected:,.0f} node failures expected over the {horizon_s:,.0f} s horizon, more "
                        f"than the cap of {cap:,}; raise the MTBF, shorten the trace or pass --max-failure-events")
    rng = np.random.default_rng(seed)
    mttr_s = mttr_h * HOUR_S
    node_l: list[int] = []
    fail_l: list[float] = []
    rep_l: list[float] = []
    for n in range(nodes):
        t = 0.0
        mtbf_s = float(mtbf[n]) * HOUR_S
        while True:
            t += float(rng.exponential(mtbf_s))
            if t >= horizon_s:
                break
            r = float(rng.exponential(mttr_s))
            node_l.append(n)
            fail_l.append(t)
            rep_l.append(r)
            t += r
    return FailureEvents(np.array(node_l, dtype=np.int64), np.array(fail_l), np.array(rep_l))
