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

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.topology.model import (
    HOPS_DRAGONFLY_GLOBAL,
    HOPS_SAME_LEAF,
    HOPS_VIA_CORE,
    HOPS_VIA_SPINE,
    TORUS_WRAP_MIN_K,
    Topology,
)

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
        return _scattered(topo)[:n]
    raise SpecError(f"placement must be contiguous, scattered, random or a node list (got {kind!r})")


GOLDEN = (5**0.5 - 1) / 2
"""Stride of the torus scattered order, as a fraction of the node count (golden ratio: far apart)."""


def _scattered(topo: Topology) -> np.ndarray:
    """All nodes in scattered order: consecutive picks alternate over pods (Dragonfly+ groups) first, then
    over the leaf blocks inside a pod, then over the slots of a leaf; on a torus, node ``i x s mod N``
    with a golden-ratio stride ``s`` coprime with ``N``."""
    i = np.arange(topo.nodes, dtype=np.int64)
    if topo.kind == "torus3d":  # no switches: spread ranks by a golden-ratio stride coprime with N
        n = topo.nodes
        stride = max(1, round(n * GOLDEN))
        while math.gcd(stride, n) != 1:
            stride += 1
        return (i * stride) % n
    npl = max(1, topo.nodes_per_leaf)
    npp = max(npl, topo.nodes_per_pod)
    pods = -(-topo.nodes // npp)
    lpp = -(-npp // npl)
    pod, j = i % pods, i // pods
    leaf, slot = j % lpp, j // lpp
    node = pod * npp + leaf * npl + slot
    ok = node < topo.nodes
    rest = np.setdiff1d(i, node[ok], assume_unique=False)
    return np.concatenate([node[ok], rest])


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


def _hops(topo: Topology, u: np.ndarray, v: np.ndarray, au: dict, av: dict) -> np.ndarray:
    if topo.kind == "torus3d":
        h = np.zeros(u.shape, dtype=np.int64)
        for d in ("x", "y", "z"):
            k = int(topo.layout[d])
            diff = np.abs(au[d] - av[d])
            h += np.minimum(diff, k - diff) if k >= TORUS_WRAP_MIN_K else diff
        return h
    same_node, same_leaf, same_pod = u == v, au["leaf"] == av["leaf"], au["pod"] == av["pod"]
    top = HOPS_DRAGONFLY_GLOBAL if topo.kind == "dragonfly+" else HOPS_VIA_CORE
    return np.where(same_node, 0, np.where(same_leaf, HOPS_SAME_LEAF, np.where(same_pod, HOPS_VIA_SPINE, top)))


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
    if n == 1 or (topo.kind == "single" and not topo.switches):
        return GroupTraffic(pattern, n_groups, n, 1.0, float(w.min()), 0, 0.0, "nic", np.ones(n_groups))
    addr = topo.node_address(flat)
    addr = {key: val.reshape(g.shape) for key, val in addr.items()}
    succ = np.roll(g, -1, axis=1)
    asucc = {key: np.roll(val, -1, axis=1) for key, val in addr.items()}
    hops = _hops(topo, g, succ, addr, asucc)
    if pattern == "all_to_all" and topo.kind != "torus3d":
        mean_hops, max_hops = _a2a_hops(topo, addr, n)
    elif pattern == "all_to_all":
        mean_hops, max_hops = float(topo.avg_hops), int(topo.diameter_hops)
    else:
        mean_hops, max_hops = float(hops.mean()), int(hops.max())
    if topo.kind == "torus3d":
        return _torus(topo, g, w, pattern, hops, mean_hops, max_hops)
    fr = np.ones(n_groups)
    loads: dict[str, float] = {}
    tiers = [("leaf uplinks", "leaf", topo.nodes_per_leaf * inj / max(topo.oversubscription, 1.0))]
    if topo.kind != "dragonfly+" and int(topo.layout.get("pods", 1)) > 1:
        o_pod = float(topo.layout.get("pod_oversubscription", 1.0))
        tiers.append(("pod uplinks", "pod", topo.nodes_per_pod * inj / (max(topo.oversubscription, 1.0) * o_pod)))
    for name, key, cap in tiers:
        ratio, per_group = _tier(addr[key], asucc[key], w, pattern, cap)
        loads[name] = ratio
        fr = np.minimum(fr, per_group)
    if topo.kind == "dragonfly+" and int(topo.layout["groups"]) > 1:
        ratio, per_group = _global(topo, addr["pod"], asucc["pod"], w, pattern)
        loads["global links"] = ratio
        fr = np.minimum(fr, per_group)
    worst = int(np.argmin(fr))
    bottleneck = "nic" if fr[worst] >= 1.0 else max(loads, key=loads.__getitem__)
    return GroupTraffic(pattern, n_groups, n, float(fr[worst]), float(fr[worst] * w[worst].min()),
                        max_hops, mean_hops, bottleneck, fr, loads)


def _pair_share(a: np.ndarray) -> np.ndarray:
    """Per group: share of ordered member pairs on the same block, ``sum e (e - 1) / (n (n - 1))``."""
    n_groups, n = a.shape
    nb = int(a.max()) + 1
    key = np.repeat(np.arange(n_groups), n) * nb + a.reshape(-1)
    uk, cnt = np.unique(key, return_counts=True)
    same = np.bincount(uk // nb, weights=cnt * (cnt - 1.0), minlength=n_groups)
    return same / (n * (n - 1.0))


def _a2a_hops(topo: Topology, addr: dict, n: int) -> tuple[float, int]:
    """Mean and largest switch hops over the member pairs of the groups (fat-tree family, Dragonfly+)."""
    leaf, pod = _pair_share(addr["leaf"]), _pair_share(addr["pod"])
    top = HOPS_DRAGONFLY_GLOBAL if topo.kind == "dragonfly+" else HOPS_VIA_CORE
    mean = HOPS_SAME_LEAF * leaf + HOPS_VIA_SPINE * (pod - leaf) + top * (1.0 - pod)
    worst = np.where(pod < 1.0, top, np.where(leaf < 1.0, HOPS_VIA_SPINE, HOPS_SAME_LEAF))
    return float(mean.mean()), int(worst.max())


def _tier(a: np.ndarray, a_next: np.ndarray, w: np.ndarray, pattern: str, cap: float) -> tuple[float, np.ndarray]:
    """Load/capacity of the worst block of one tier and each group's fraction through it."""
    n_groups, n = a.shape
    nb = int(max(a.max(), a_next.max())) + 1
    if pattern == "ring":
        cross = a != a_next
        out = np.bincount(a[cross], weights=w[cross], minlength=nb)
        inn = np.bincount(a_next[cross], weights=w[cross], minlength=nb)
        load = np.maximum(out, inn)
        ratio_b = np.where(load > 0, cap / np.maximum(load, 1e-300), np.inf)
        edge = np.where(cross, np.minimum(ratio_b[a], ratio_b[a_next]), np.inf)
        per_group = np.minimum(1.0, edge.min(axis=1))
    else:
        gid = np.repeat(np.arange(n_groups), n)
        key = gid * nb + a.reshape(-1)
        _, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
        e = cnt[inv].reshape(a.shape).astype(float)  # members of the row's group on the same block
        send = w * (n - e) / (n - 1)  # each member's traffic leaving its block
        load = np.bincount(a.reshape(-1), weights=send.reshape(-1), minlength=nb)  # in == out by symmetry
        ratio_b = np.where(load > 0, cap / np.maximum(load, 1e-300), np.inf)
        per_group = np.minimum(1.0, np.where(e < n, ratio_b[a], np.inf).min(axis=1))
    return float((np.where(np.isfinite(ratio_b), 1.0 / ratio_b, 0.0)).max()), per_group


def _global(topo: Topology, a: np.ndarray, a_next: np.ndarray, w: np.ndarray, pattern: str) -> tuple[float, np.ndarray]:
    """Dragonfly+ global links: ``m x port`` per direction between each pair of groups."""
    n_groups, n = a.shape
    ng = int(topo.layout["groups"])
    cap = float(topo.layout["global_links_per_pair"]) * topo.port_gb_per_s
    if cap <= 0:
        return np.inf, np.zeros(n_groups)
    if pattern == "ring":
        cross = a != a_next
        pair = a * ng + a_next
        load = np.bincount(pair[cross], weights=w[cross], minlength=ng * ng)
        edge = np.where(cross, cap / np.maximum(load[pair], 1e-300), np.inf)
        per_group = np.minimum(1.0, edge.min(axis=1))
        return float(load.max() / cap), per_group
    counts = np.zeros((n_groups, ng))
    np.add.at(counts, (np.repeat(np.arange(n_groups), n), a.reshape(-1)), 1.0)
    wg = w.mean(axis=1)[:, None] / (n - 1)
    load = (counts * wg).T @ counts  # traffic between every pair of Dragonfly+ groups
    np.fill_diagonal(load, 0.0)
    ratio = np.where(load > 0, cap / np.maximum(load, 1e-300), np.inf)
    per_group = np.ones(n_groups)
    for i in range(n_groups):  # groups touch few Dragonfly+ groups: this loop is over job groups only
        touched = np.nonzero(counts[i])[0]
        if touched.size > 1:
            per_group[i] = min(1.0, float(ratio[np.ix_(touched, touched)].min()))
    return float(load.max() / cap), per_group


def _torus(topo: Topology, g: np.ndarray, w: np.ndarray, pattern: str, hops: np.ndarray, mean_hops: float,
           max_hops: int) -> GroupTraffic:
    n_groups, n = g.shape
    degree = int(topo.layout["degree"])
    fr = np.ones(n_groups)
    if pattern == "ring":
        addr = topo.node_address(g.reshape(-1))
        spans = np.zeros(n_groups)
        for d in ("x", "y", "z"):
            c = addr[d].reshape(g.shape)
            spans += (c.max(axis=1) > c.min(axis=1)).astype(float)
        h = np.maximum(hops.mean(axis=1), 1.0)
        fr = np.minimum(1.0, 2.0 * np.maximum(spans, 1.0) / degree / h)
    else:
        for i in range(n_groups):
            fr[i] = topo.span_of(g[i]).a2a_bw_fraction
    worst = int(np.argmin(fr))
    bottleneck = "nic" if fr[worst] >= 1.0 else "torus links"
    return GroupTraffic(pattern, n_groups, n, float(fr[worst]), float(fr[worst] * w[worst].min()), max_hops,
                        mean_hops, bottleneck, fr, {"torus links": float(1.0 / fr[worst])})
