"""One class per network: the formulas of :class:`~clustertwin.topology.model.Topology`'s interface for a
single node, the fat-tree family (top-of-rack, rail-optimised), Dragonfly+ and the direct 3D torus.

The builders (:func:`clustertwin.topology.build`) pick the class; the rest of the package and every layer
above call the interface and never test the network's ``kind``. Conventions (docs/topology.md): hops count
the switches a packet traverses (1 same leaf, 3 via a spine, 5 via the core, 4 between Dragonfly+ groups:
leaf -> spine -> global link -> spine -> leaf, Shpiner et al. 2017); torus hops count links.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from clustertwin.topology.link_load import global_link_fractions, pair_share
from clustertwin.topology.model import (
    HOPS_DRAGONFLY_GLOBAL,
    HOPS_SAME_LEAF,
    HOPS_VIA_CORE,
    HOPS_VIA_SPINE,
    GroupSpan,
    Topology,
)


class SingleNode(Topology):
    """One node without a scale-out switch: every group is NIC-bound and has no network hops."""

    scale_out: ClassVar[bool] = False

    def node_address(self, node_index: np.ndarray | int) -> dict[str, np.ndarray]:
        idx = self.check_nodes(node_index)
        return {"leaf": np.zeros_like(idx), "pod": np.zeros_like(idx)}

    def span_of(self, nodes: np.ndarray | Sequence[int]) -> GroupSpan:
        return GroupSpan(int(self.distinct_nodes(nodes).size), 0, 1, 0, 1.0, 1.0)

    def pair_hops(self, same_node: np.ndarray, au: dict[str, np.ndarray], av: dict[str, np.ndarray]) -> np.ndarray:
        return np.zeros(same_node.shape, dtype=np.int64)

    def scattered_order(self) -> np.ndarray:
        return np.arange(self.nodes, dtype=np.int64)

    def a2a_hops(self, addr: dict[str, np.ndarray], n: int) -> tuple[float, int]:
        return 0.0, 0


class FatTree(Topology):
    """Folded Clos with 1-3 switch tiers, top-of-rack: nodes fill leaves, leaves fill pods.

    Span (realised leaf oversubscription ``o``): ring = 1 inside one leaf, else ``1/o``; all-to-all =
    ``min over touched leaves of min(1, 1/(o_leaf x c_leaf))`` with ``e_leaf`` the group's nodes on that
    leaf, ``o_leaf = max(1, o x e_leaf / nodes_per_leaf)`` and ``c_leaf = (n - e_leaf)/(n - 1)`` the share of
    a member's traffic that leaves its leaf."""

    top_hops: ClassVar[int] = HOPS_VIA_CORE
    """Hops of a path that climbs to the top tier."""

    def node_address(self, node_index: np.ndarray | int) -> dict[str, np.ndarray]:
        idx = self.check_nodes(node_index)
        return {"leaf": idx // self.nodes_per_leaf, "pod": idx // self.nodes_per_pod}

    def span_hops(self, n: int, leaves: int, pods: int) -> int:
        """Farthest hops of a group of ``n`` nodes on ``leaves`` leaves and ``pods`` pods (the hop rule)."""
        if n == 1:
            return 0
        if leaves == 1:
            return HOPS_SAME_LEAF
        return HOPS_VIA_SPINE if pods == 1 else self.top_hops

    def span_of(self, nodes: np.ndarray | Sequence[int]) -> GroupSpan:
        idx = self.distinct_nodes(nodes)
        n = int(idx.size)
        addr = self.node_address(idx)
        # nodes per touched leaf / pod, counted in Python: a scheduler asks this of every allocation it makes,
        # mostly a few to a few dozen nodes, where np.unique's sort costs more than the count
        leaf_counts = list(Counter(addr["leaf"].tolist()).values())
        pod_counts = list(Counter(addr["pod"].tolist()).values())
        leaves, pods = len(leaf_counts), len(pod_counts)
        a2a = 1.0
        o = self.oversubscription
        if leaves > 1:
            npl = self.nodes_per_leaf
            worst = min(1.0 / (max(1.0, o * e / npl) * ((n - e) / (n - 1))) for e in leaf_counts)
            a2a = min(1.0, worst)
        ring = 1.0 if leaves <= 1 else 1.0 / o
        ring, a2a = self.between_pods(n, pod_counts, ring, a2a)
        return GroupSpan(n, leaves, pods, self.span_hops(n, leaves, pods), min(1.0, ring), min(1.0, a2a))

    def between_pods(self, n: int, pod_counts: list[int], ring: float, a2a: float) -> tuple[float, float]:
        """Ring and all-to-all fractions after the links between pods (none beyond the leaf rule here);
        ``pod_counts``: the group's nodes on each pod it touches."""
        return ring, a2a

    def pair_hops(self, same_node: np.ndarray, au: dict[str, np.ndarray], av: dict[str, np.ndarray]) -> np.ndarray:
        same_leaf, same_pod = au["leaf"] == av["leaf"], au["pod"] == av["pod"]
        return np.where(same_node, 0, np.where(same_leaf, HOPS_SAME_LEAF,
                                               np.where(same_pod, HOPS_VIA_SPINE, self.top_hops)))

    def a2a_hops(self, addr: dict[str, np.ndarray], n: int) -> tuple[float, int]:
        """Mean and largest hops over ordered member pairs: the shares of pairs on one leaf / one pod."""
        leaf, pod = pair_share(addr["leaf"]), pair_share(addr["pod"])
        top = self.top_hops
        mean = HOPS_SAME_LEAF * leaf + HOPS_VIA_SPINE * (pod - leaf) + top * (1.0 - pod)
        worst = np.where(pod < 1.0, top, np.where(leaf < 1.0, HOPS_VIA_SPINE, HOPS_SAME_LEAF))
        return float(mean.mean()), int(worst.max())

    def scattered_order(self) -> np.ndarray:
        """Consecutive picks alternate over pods (Dragonfly+ groups) first, then over the leaf blocks of a pod,
        then over the slots of a leaf: consecutive ranks never share a leaf."""
        i = np.arange(self.nodes, dtype=np.int64)
        npl = max(1, self.nodes_per_leaf)
        npp = max(npl, self.nodes_per_pod)
        pods = -(-self.nodes // npp)
        lpp = -(-npp // npl)
        pod, j = i % pods, i // pods
        leaf, slot = j % lpp, j // lpp
        node = pod * npp + leaf * npl + slot
        ok = node < self.nodes
        rest = np.setdiff1d(i, node[ok], assume_unique=False)
        return np.concatenate([node[ok], rest])

    def uplink_tiers(self) -> list[tuple[str, str, float]]:
        """Leaf blocks: ``nodes_per_leaf x I / o``; pods of a 3-tier tree ``nodes_per_pod x I / (o o_pod)``
        towards the core (``o_pod`` the spine tier's ratio, e.g. Meta's 1:7)."""
        inj, o = self.injection_gb_per_s, max(self.oversubscription, 1.0)
        tiers = [("leaf uplinks", "leaf", self.nodes_per_leaf * inj / o)]
        if int(self.layout.get("pods", 1)) > 1:
            o_pod = float(self.layout.get("pod_oversubscription", 1.0))
            tiers.append(("pod uplinks", "pod", self.nodes_per_pod * inj / (o * o_pod)))
        return tiers

    def wiring(self) -> Any:
        from clustertwin.topology.graph import fat_tree_graph

        return fat_tree_graph(self)


class RailOptimized(FatTree):
    """DGX SuperPOD rail-optimised fat-tree: a leaf block is a scalable unit with one leaf per rail (NIC ``i``
    of every node of the unit on leaf ``i``); the span and traffic rules are the fat-tree's over those blocks."""


class DragonflyPlus(FatTree):
    """Dragonfly+: leaf-spine groups joined by ``m`` global links per group pair (minimal routing).

    Span: the leaf rule, and between groups ``m`` global links carry ``e_a e_b P / (n - 1)`` ports' worth of
    all-to-all traffic for the two groups ``a, b`` holding most of the nodes (ring: ``min(., m / P)``)."""

    top_hops: ClassVar[int] = HOPS_DRAGONFLY_GLOBAL

    def node_address(self, node_index: np.ndarray | int) -> dict[str, np.ndarray]:
        idx = self.check_nodes(node_index)
        npg, lpg = int(self.layout["nodes_per_group"]), int(self.layout["leaves_per_group"])
        group = idx // npg
        leaf = group * lpg + (idx % npg) // self.nodes_per_leaf
        return {"leaf": leaf, "pod": group.copy(), "group": group}

    def between_pods(self, n: int, pod_counts: list[int], ring: float, a2a: float) -> tuple[float, float]:
        if len(pod_counts) < 2:
            return ring, a2a
        m = float(self.layout["global_links_per_pair"])
        e_b, e_a = (float(e) for e in sorted(pod_counts)[-2:])
        return min(ring, m / self.nics_per_node), min(a2a, m * (n - 1) / (e_a * e_b * self.nics_per_node))

    def uplink_tiers(self) -> list[tuple[str, str, float]]:
        """Leaf blocks only: the group's spines meet the global links, which :meth:`phase_fractions` adds."""
        return super().uplink_tiers()[:1]

    def flow_links(self, u: np.ndarray, v: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Leaf bundles as in the fat-tree, plus the global bundle of the ordered group pair
        ``a x groups + b`` (both entries; ``-1`` inside one group)."""
        out = super().flow_links(u, v)
        gu = self.node_address(np.asarray(u).reshape(-1))["group"]
        gv = self.node_address(np.asarray(v).reshape(-1))["group"]
        pair = np.where(gu != gv, gu * int(self.layout["groups"]) + gv, -1)
        out["global links"] = (pair, pair)
        return out

    def phase_fractions(self, g: np.ndarray, w: np.ndarray, pattern: str, addr: dict[str, np.ndarray],
                        asucc: dict[str, np.ndarray], hops: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        fr, loads = super().phase_fractions(g, w, pattern, addr, asucc, hops)
        if int(self.layout["groups"]) > 1:
            cap = float(self.layout["global_links_per_pair"]) * self.port_gb_per_s
            ratio, per_group = global_link_fractions(addr["pod"], asucc["pod"], w, pattern,
                                                     int(self.layout["groups"]), cap)
            loads["global links"] = ratio
            fr = np.minimum(fr, per_group)
        return fr, loads

    def wiring(self) -> Any:
        from clustertwin.topology.graph import dragonfly_graph

        return dragonfly_graph(self)


def fat_tree_class(kind: str) -> type[FatTree]:
    """The class a fat-tree builder returns for its ``kind`` (the rail-optimised design or top-of-rack)."""
    return RailOptimized if kind == "rail-optimized" else FatTree
