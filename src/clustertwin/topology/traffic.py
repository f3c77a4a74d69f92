"""Traffic of concurrent node groups mapped onto a topology at switch granularity: the effective per-node
bandwidth, hop counts and the binding tier of a collective phase, with contention between groups that
share links in the same phase (for example the DP rings of every pipeline stage crossing the spine at once).

Input: ``groups`` = a ``(G, n)`` array of node indices (one row per group, in ring order) and a pattern.
Every node injects at most its NIC rate ``I`` (ports x port rate), split evenly over the groups it is in
(``k_u`` groups -> ``w_u = I / k_u`` per group). Demand:

* ``ring``: node ``u`` sends ``w_u`` to its successor in the row (NCCL ring, one direction);
* ``all_to_all``: node ``u`` sends ``w_u / (n - 1)`` to every other member.

Capacities (per direction): a leaf block (``node_address`` leaf: a top-of-rack leaf or a rail-optimised
scalable unit over all rails) has ``nodes_per_leaf x I / o_leaf`` of uplinks (``o_leaf`` the realised leaf
oversubscription); a pod of a 3-tier fat-tree ``nodes_per_pod x I / (o_leaf o_pod)`` towards the core
(``o_pod`` the spine tier's ratio, e.g. Meta's 1:7); a Dragonfly+ group pair ``m x port`` of global links
(minimal routing). The load of a leaf/pod is the larger of the traffic leaving and entering it, summed over
all groups; a group's fraction is ``min(1, capacity / load)`` over every leaf, pod and group pair its
traffic crosses (synchronous collectives move at the pace of their most contended link); the phase ends
with the slowest group. Direct 3D torus: a ring (or bucket algorithm) over a group spanning ``s``
dimensions uses ``2 s`` of the node's ``D`` link directions, and each byte travels the mean hop count
``h`` of its edges: ``fraction = min(1, 2 s / D / h)`` (ring), the sub-block bisection rule of
:meth:`Topology.span_of` (all-to-all). Hops: 0 inside a node, 1 same leaf, 3 via spine, 5 via core,
4 between Dragonfly+ groups; torus: link hops with wrap-around.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.topology.model import Topology

Pattern = Literal["ring", "all_to_all"]
PlacementKind = Literal["contiguous", "scattered", "random"]


@dataclass(frozen=True)
class GroupTraffic:
    """Result of :func:`group_bandwidth` for one phase of ``groups`` concurrent groups."""

    pattern: str
    groups: int
    nodes_per_group: int
    fraction: float
    """Worst group's share of its injection bandwidth ``w`` (1 = NIC-bound)."""
    per_node_gb_per_s: float
    """Effective per-node bandwidth of the worst group: ``fraction x w``, GB/s per direction."""
    max_hops: int
    mean_hops: float
    bottleneck: str
    """nic, leaf uplinks, pod uplinks, global links or torus links."""
    group_fractions: np.ndarray = field(repr=False, default_factory=lambda: np.ones(1))
    tier_load: dict[str, float] = field(default_factory=dict)
    """Worst load / capacity by tier (> 1 means that tier is oversubscribed by the phase)."""

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "groups": self.groups, "nodes_per_group": self.nodes_per_group,
                "fraction": self.fraction, "per_node_gb_per_s": self.per_node_gb_per_s,
                "max_hops": self.max_hops, "mean_hops": self.mean_hops, "bottleneck": self.bottleneck,
                "tier_load": self.tier_load}


def place(topo: Topology, n_nodes: int, kind: PlacementKind | str | list[int] | np.ndarray = "contiguous",
          *, seed: int = 0) -> np.ndarray:
    """Node indices of a job of ``n_nodes`` nodes: ``contiguous`` (nodes 0..n-1, filling leaves in order),
    ``scattered`` (round-robin over pods, then over the leaf blocks of a pod: consecutive ranks never share
    a leaf, the worst case a fragmented scheduler produces), ``random`` (uniform without replacement, ``seed``), or an explicit list
    (checked: in range, no duplicates, ``n_nodes`` long)."""
    n = int(n_nodes)
    if n < 1 or n > topo.nodes:
        raise SpecError(f"placement of {n} nodes does not fit in {topo.nodes} nodes")
    if isinstance(kind, list | tuple | np.ndarray):
        idx = np.asarray(kind, dtype=np.int64).reshape(-1)
        if idx.size != n:
            raise SpecError(f"explicit placement lists {idx.size} nodes, expected {n}")
        if idx.size and (idx.min() < 0 or idx.max() >= topo.nodes):
            raise SpecError(f"explicit placement: node index out of range 0..{topo.nodes - 1}")
        if np.unique(idx).size != idx.size:
            raise SpecError("explicit placement lists a node twice")
        return idx
    if kind == "contiguous":
        return np.arange(n, dtype=np.int64)
    if kind == "random":
        return np.random.default_rng(seed).choice(topo.nodes, size=n, replace=False).astype(np.int64)
    if kind == "scattered":
        return topo.scattered_order()[:n]
    raise SpecError(f"placement must be contiguous, scattered, random or a node list (got {kind!r})")


def groups_of(nodes: np.ndarray, size: int, stride: int = 1) -> np.ndarray:
    """Split a job's nodes (rank order) into groups of ``size``: ``stride = 1`` gives consecutive blocks
    (DP groups inside one pipeline stage with TP filling the node), ``stride = s`` takes every ``s``-th
    node (PP groups). Shape ``(len(nodes) // size, size)``."""
    a = np.asarray(nodes, dtype=np.int64).reshape(-1)
    if size < 1 or a.size % size:
        raise SpecError(f"{a.size} nodes do not split into groups of {size}")
    if stride == 1:
        return a.reshape(-1, size)
    if a.size % (size * stride):
        raise SpecError(f"{a.size} nodes do not split into groups of {size} with stride {stride}")
    return a.reshape(-1, size, stride).transpose(0, 2, 1).reshape(-1, size)


def group_bandwidth(topo: Topology, groups: np.ndarray, pattern: Pattern = "ring") -> GroupTraffic:
    """Effective per-node bandwidth of ``groups`` running ``pattern`` at the same time (module docstring).

    ``groups``: ``(G, n)`` node indices (a 1-D array is one group). Cost: O(G n) numpy work, no per-GPU
    objects."""
    g = np.atleast_2d(np.asarray(groups, dtype=np.int64))
    n_groups, n = g.shape
    if pattern not in ("ring", "all_to_all"):
        raise SpecError(f"pattern must be ring or all_to_all (got {pattern!r})")
    inj = topo.injection_gb_per_s
    flat = g.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= topo.nodes):
        raise SpecError(f"node index out of range 0..{topo.nodes - 1}")
    k = np.bincount(flat, minlength=topo.nodes)
    w = inj / k[g]  # (G, n) each member's per-group injection
    if n == 1 or not topo.scale_out:
        return GroupTraffic(pattern, n_groups, n, 1.0, float(w.min()), 0, 0.0, "nic", np.ones(n_groups))
    addr = topo.node_address(flat)
    addr = {key: val.reshape(g.shape) for key, val in addr.items()}
    succ = np.roll(g, -1, axis=1)
    asucc = {key: np.roll(val, -1, axis=1) for key, val in addr.items()}
    hops = topo.pair_hops(g == succ, addr, asucc)
    if pattern == "all_to_all":
        mean_hops, max_hops = topo.a2a_hops(addr, n)
    else:
        mean_hops, max_hops = float(hops.mean()), int(hops.max())
    fr, loads = topo.phase_fractions(g, w, pattern, addr, asucc, hops)
    worst = int(np.argmin(fr))
    bottleneck = "nic" if fr[worst] >= 1.0 else max(loads, key=loads.__getitem__)
    return GroupTraffic(pattern, n_groups, n, float(fr[worst]), float(fr[worst] * w[worst].min()),
                        max_hops, mean_hops, bottleneck, fr, loads)
