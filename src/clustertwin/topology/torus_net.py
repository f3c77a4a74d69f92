"""The direct 3D torus as a network: nodes are their own routers; coordinates fill x first, then y, then z.

Span of a node set: per dimension the smallest cyclic extent ``a_d = k_d - g_d + 1`` covering its
coordinates (``g_d`` the largest gap between consecutive occupied coordinates, wrapping); hops per
dimension ``floor(k/2)`` where the extent is a whole ring of ``k >= 3`` (wrap links usable), else
``a - 1``; all-to-all fraction = bisection of the sub-block (cut across its cheapest dimension, ``n / a``
links, x2 with wrap-around) / (group injection / 2); ring fraction 1 (neighbour traffic). One collective
phase: a ring over a group spanning ``s`` dimensions uses ``2 s`` of the node's ``D`` link directions and
each byte travels the mean hop count ``h`` of its edges, ``fraction = min(1, 2 s / D / h)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from clustertwin.topology.model import TORUS_WRAP_MIN_K, GroupSpan, Topology

GOLDEN = (5**0.5 - 1) / 2
"""Stride of the torus scattered order, as a fraction of the node count (golden ratio: far apart)."""
AXES = ("x", "y", "z")


class Torus3D(Topology):
    """Direct 3D torus (module docstring)."""

    graph_access_links: ClassVar[int] = 0
    graph_vertex_extra: ClassVar[bool] = True

    def node_address(self, node_index: np.ndarray | int) -> dict[str, np.ndarray]:
        idx = self.check_nodes(node_index)
        nx_, ny_ = int(self.layout["x"]), int(self.layout["y"])
        return {"leaf": idx.copy(), "pod": np.zeros_like(idx), "x": idx % nx_, "y": (idx // nx_) % ny_,
                "z": idx // (nx_ * ny_)}

    def span_of(self, nodes: np.ndarray | Sequence[int]) -> GroupSpan:
        idx = self.distinct_nodes(nodes)
        n = int(idx.size)
        if n == 1:
            return GroupSpan(1, 1, 1, 0, 1.0, 1.0)
        addr = self.node_address(idx)
        dims = np.array([int(self.layout[d]) for d in AXES], dtype=np.int64)
        ext = np.empty(3, dtype=np.int64)
        for i, d in enumerate(AXES):
            c = np.unique(addr[d])
            gaps = np.diff(np.append(c, c[0] + int(dims[i])))
            ext[i] = int(dims[i]) - int(gaps.max()) + 1
        wrap = (ext == dims) & (dims >= TORUS_WRAP_MIN_K)
        hops = int(np.where(wrap, ext // 2, ext - 1).sum())
        cut = ext >= 2
        cut_links = (n / ext[cut]) * np.where(wrap[cut], 2.0, 1.0)
        link_gb = float(self.layout["link_gb_per_s"])
        a2a = float(cut_links.min()) * link_gb / (n * self.injection_gb_per_s / 2.0)
        return GroupSpan(n, n, 1, hops, 1.0, min(1.0, a2a))

    def pair_hops(self, same_node: np.ndarray, au: dict[str, np.ndarray], av: dict[str, np.ndarray]) -> np.ndarray:
        """Link hops: per dimension ``min(|d|, k - |d|)`` with wrap-around (``k >= 3``), else ``|d|``."""
        h = np.zeros(same_node.shape, dtype=np.int64)
        for d in AXES:
            k = int(self.layout[d])
            diff = np.abs(au[d] - av[d])
            h += np.minimum(diff, k - diff) if k >= TORUS_WRAP_MIN_K else diff
        return h

    def a2a_hops(self, addr: dict[str, np.ndarray], n: int) -> tuple[float, int]:
        """The torus's own average and diameter (all-to-all traffic covers the whole sub-block)."""
        return float(self.avg_hops), int(self.diameter_hops)

    def scattered_order(self) -> np.ndarray:
        """No switches: node ``i x s mod N`` with a golden-ratio stride ``s`` coprime with ``N``."""
        n = self.nodes
        stride = max(1, round(n * GOLDEN))
        while math.gcd(stride, n) != 1:
            stride += 1
        return (np.arange(n, dtype=np.int64) * stride) % n

    def phase_fractions(self, g: np.ndarray, w: np.ndarray, pattern: str, addr: dict[str, np.ndarray],
                        asucc: dict[str, np.ndarray], hops: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        n_groups = g.shape[0]
        degree = int(self.layout["degree"])
        fr = np.ones(n_groups)
        if pattern == "ring":
            spans = np.zeros(n_groups)
            for d in AXES:
                c = addr[d]
                spans += (c.max(axis=1) > c.min(axis=1)).astype(float)
            h = np.maximum(hops.mean(axis=1), 1.0)
            fr = np.minimum(1.0, 2.0 * np.maximum(spans, 1.0) / degree / h)
        else:
            for i in range(n_groups):
                fr[i] = self.span_of(g[i]).a2a_bw_fraction
        return fr, {"torus links": float(1.0 / fr.min())}

    def wiring(self) -> Any:
        from clustertwin.topology.graph import torus_graph

        return torus_graph(self)

    def graph_endpoints(self, nodes: np.ndarray) -> list[tuple]:
        a = self.node_address(nodes)
        return [("node", int(x), int(y), int(z)) for x, y, z in zip(a["x"], a["y"], a["z"], strict=True)]
