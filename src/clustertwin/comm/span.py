"""Where a contiguous group of nodes sits on the cluster's network: the one place comm asks topology.

``group_span(cluster, n_nodes)`` returns the topology layer's :class:`GroupSpan` (leaves and pods
touched, farthest hops, the bandwidth fractions that a ring and an all-to-all get across the spine) for
nodes ``0 .. n_nodes-1``. Built topologies are cached per cluster object, so repeated collective
evaluations on one cluster cost one build. If the topology layer cannot build the cluster's network
kind, a fat-tree estimate is used: one leaf holds ``su_nodes`` nodes; beyond it ring and all-to-all
traffic crosses the spine at ``1 / oversubscription``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from clustertwin.specs.cluster import ClusterSpec

HOPS_SAME_LEAF = 1
HOPS_VIA_SPINE = 3
_CACHE_SIZE = 64


class GroupSpan(Protocol):
    """The fields comm reads from ``clustertwin.topology``'s GroupSpan."""

    nodes: int
    leaves: int
    pods: int
    max_hops: int
    ring_bw_fraction: float
    a2a_bw_fraction: float


@dataclass(frozen=True)
class FallbackSpan:
    """Fat-tree estimate used when the topology layer is unavailable for a network kind."""

    nodes: int
    leaves: int
    pods: int
    max_hops: int
    ring_bw_fraction: float
    a2a_bw_fraction: float


_topologies: dict[int, tuple[ClusterSpec, Any]] = {}


def _topology(cluster: ClusterSpec) -> Any | None:
    hit = _topologies.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    try:
        from clustertwin import topology
    except ImportError:
        topo = None
    else:
        build = getattr(topology, "build", None)
        topo = build(cluster) if build is not None else None
    if len(_topologies) >= _CACHE_SIZE:
        _topologies.pop(next(iter(_topologies)))
    _topologies[id(cluster)] = (cluster, topo)
    return topo


def fallback_span(cluster: ClusterSpec, n_nodes: int) -> FallbackSpan:
    """Leaf-spine estimate: ``su_nodes`` nodes per leaf; beyond one leaf, fractions ``1/oversubscription``."""
    net = cluster.net
    per_leaf = max(int(net.su_nodes), 1)
    leaves = -(-n_nodes // per_leaf)
    frac = 1.0 if leaves <= 1 else 1.0 / net.oversubscription
    hops = 0 if n_nodes <= 1 else (HOPS_SAME_LEAF if leaves <= 1 else HOPS_VIA_SPINE)
    return FallbackSpan(n_nodes, leaves, 1, hops, frac, frac)


def group_span(cluster: ClusterSpec, n_nodes: int) -> GroupSpan:
    """Span of nodes ``0 .. n_nodes-1`` from the topology layer (cached build), else the fallback."""
    if n_nodes <= 1:
        return FallbackSpan(max(n_nodes, 1), 1, 1, 0, 1.0, 1.0)
    topo = _topology(cluster)
    if topo is None:
        return fallback_span(cluster, n_nodes)
    return topo.span(n_nodes)
