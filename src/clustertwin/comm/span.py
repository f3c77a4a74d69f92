"""Where a group of nodes sits on the cluster's network: the one place comm asks topology.

``group_span(cluster, n_nodes)`` returns the topology layer's :class:`~clustertwin.topology.GroupSpan`
(leaves and pods touched, farthest hops, the bandwidth fractions that a ring and an all-to-all get across
the spine) for nodes ``0 .. n_nodes-1``; ``placement_span(cluster, nodes)`` the same for any node set
(:meth:`~clustertwin.topology.Topology.span_of`, used by explicit placements). Built topologies are
cached by value (the frozen cluster spec is the key), so equal clusters share one build.
"""

from __future__ import annotations

import numpy as np

from clustertwin.specs.cluster import ClusterSpec
from clustertwin.topology import GroupSpan, Topology, build

_CACHE_SIZE = 64

_topologies: dict[ClusterSpec, Topology] = {}


def _topology(cluster: ClusterSpec) -> Topology:
    hit = _topologies.get(cluster)
    if hit is not None:
        return hit
    topo = build(cluster)
    if len(_topologies) >= _CACHE_SIZE:
        _topologies.pop(next(iter(_topologies)))
    _topologies[cluster] = topo
    return topo


def group_span(cluster: ClusterSpec, n_nodes: int) -> GroupSpan:
    """Span of nodes ``0 .. n_nodes-1`` from the topology layer (cached build)."""
    return _topology(cluster).span(max(int(n_nodes), 1))


def placement_span(cluster: ClusterSpec, nodes: np.ndarray) -> GroupSpan:
    """Span of an arbitrary set of node indices from the topology layer (cached build)."""
    return _topology(cluster).span_of(nodes)
