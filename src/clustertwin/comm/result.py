"""Result of a collective evaluation and nccl-tests' bus-bandwidth convention."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clustertwin.comm.placement import Placement


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: busbw = algbw x factor (doc/PERFORMANCE.md).

    all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send_recv 1."""
    if n <= 1:
        return 0.0 if op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") else 1.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class CollectiveResult:
    """Predicted performance of one collective over message sizes (nccl-tests conventions).

    ``nbytes`` is nccl-tests' size S (for all_gather/reduce_scatter the full gathered buffer);
    ``algbw = S / time``, ``busbw = algbw x busbw_factor(op, gpus)``. Arrays when ``nbytes`` was an array,
    Python scalars otherwise. ``placement`` summarises where the group sits (nodes, ranks per node,
    leaves/pods spanned, spine fractions); None only for a one-GPU group placed contiguously."""

    op: str
    gpus: int
    nbytes: np.ndarray | float
    time_s: np.ndarray | float
    algbw_gb_per_s: np.ndarray | float
    busbw_gb_per_s: np.ndarray | float
    algorithm: np.ndarray | str
    protocol: np.ndarray | str
    nodes: int = 1
    ranks_per_node: int = 1
    breakdown: dict[str, np.ndarray | float | str] = field(default_factory=dict)
    placement: Placement | None = None

    @property
    def time_us(self) -> np.ndarray | float:
        return self.time_s * 1e6

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: lists for arrays, stable keys with units."""

        def conv(v: Any) -> Any:
            if isinstance(v, np.ndarray):
                return v.tolist()
            if isinstance(v, np.generic):
                return v.item()
            return v

        return {
            "op": self.op, "gpus": self.gpus, "nodes": self.nodes, "ranks_per_node": self.ranks_per_node,
            "nbytes": conv(self.nbytes), "time_s": conv(self.time_s),
            "algbw_gb_per_s": conv(self.algbw_gb_per_s), "busbw_gb_per_s": conv(self.busbw_gb_per_s),
            "algorithm": conv(self.algorithm), "protocol": conv(self.protocol),
            "breakdown": {k: conv(v) for k, v in self.breakdown.items()},
            "placement": self.placement.to_dict() if self.placement is not None else None,
        }
