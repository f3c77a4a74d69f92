"""Result types of the topology builders: :class:`Topology`, :class:`GroupSpan`, :class:`ScaleUpDomain`.

Addresses and group spans are computed from a handful of integers (nodes per leaf, nodes per pod and,
for the torus and Dragonfly+, the ``layout`` shape), so every method is vectorised and O(1) in the
cluster size. Conventions (see docs/topology.md):

* *endpoint* = one NIC port on the compute fabric; nodes are numbered 0..nodes-1 and filled in order
  (leaf by leaf, scalable unit by scalable unit, pod by pod, group by group; torus: x fastest);
* *hops* count the switches a packet traverses between two endpoints (1 on the same leaf, 3 through a
  spine, 5 through a core, 4 between Dragonfly+ groups); for the direct torus they count node-to-node
  links;
* bandwidths are per direction, decimal GB/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from clustertwin.errors import SpecError

# Switch hops between endpoints by the highest tier a path climbs (fat-tree family).
HOPS_SAME_LEAF = 1
HOPS_VIA_SPINE = 3
HOPS_VIA_CORE = 5
HOPS_DRAGONFLY_GLOBAL = 4
"""leaf -> spine -> (global link) -> spine -> leaf: four switches (Shpiner et al. 2017)."""
TORUS_WRAP_MIN_K = 3
"""A ring of k >= 3 nodes has distinct +/- neighbours (wrap-around link); k = 2 has one link."""


@dataclass(frozen=True)
class ScaleUpDomain:
    """The scale-up (NVLink / Infinity Fabric / HCCS / PCIe) domain of one node.

    ``per_pair_gb_per_s``: NVSwitch and PCIe switch any pair at the full per-GPU rate; a direct full
    mesh splits each GPU's bandwidth over its ``gpus - 1`` peers. ``bisection_gb_per_s``: switched
    domains ``gpus/2 x per-GPU``; a full mesh ``(gpus/2)^2`` crossing links of ``per-pair`` each.
    """

    kind: str
    gpus: int
    per_gpu_gb_per_s: float
    per_pair_gb_per_s: float
    bisection_gb_per_s: float
    hops: int
    """Switch hops between two GPUs of the domain (1 through an NVSwitch/PCIe switch, 0 direct mesh)."""
    switch_chips: int = 0
    """NVSwitch chips in the node (bill of materials)."""


@dataclass(frozen=True)
class GroupSpan:
    """What a group of nodes sees of the network: nodes 0..n-1 (:meth:`Topology.span`) or any node set
    (:meth:`Topology.span_of`)."""

    nodes: int
    leaves: int
    """Leaf switches (per rail) the group touches."""
    pods: int
    """Pods (fat-tree), groups (Dragonfly+) the group touches; 1 for a torus."""
    max_hops: int
    """Switch hops between the farthest members (torus: link hops)."""
    ring_bw_fraction: float
    """Fraction of per-node NIC injection bandwidth a ring/neighbour pattern gets."""
    a2a_bw_fraction: float
    """Fraction of injection bandwidth for a uniform all-to-all among the group."""


@dataclass(frozen=True)
class Topology:
    """A built scale-out network (or a single node) with its metrics.

    ``layout`` holds the integers the builder chose (radix, leaf down/up ports, spines per pod, torus
    shape, Dragonfly+ groups ...) so the wiring can be reproduced, e.g. as a networkx graph by
    :func:`clustertwin.topology.graph.to_networkx` for verification on small instances.
    """

    kind: str
    nodes: int
    gpus_per_node: int
    gpus: int
    endpoints: int
    port_gb_per_s: float
    switches: dict[str, int]
    links: dict[str, int]
    cables: int
    transceivers: int
    bisection_gb_per_s: float
    diameter_hops: int
    avg_hops: float
    oversubscription: float
    nodes_per_leaf: int
    nodes_per_pod: int
    scale_up_domain_gpus: int
    notes: tuple[str, ...] = ()
    scale_up: ScaleUpDomain | None = None
    """The node's scale-up domain (per-GPU, per-pair bandwidth and bisection)."""
    layout: dict[str, int | float] = field(default_factory=dict)
    """Builder parameters: radix, tiers, rails, leaf_down, leaf_up, ... (kind-specific)."""

    # ------------------------------------------------------------------ counts
    @property
    def switch_count(self) -> int:
        """Switches over all tiers."""
        return int(sum(self.switches.values()))

    @property
    def nics_per_node(self) -> int:
        return self.endpoints // self.nodes

    @property
    def injection_gb_per_s(self) -> float:
        """Per-node scale-out injection bandwidth: NIC ports x port rate, GB/s."""
        return self.nics_per_node * self.port_gb_per_s

    # --------------------------------------------------------------- addresses
    def _check_nodes(self, node_index: np.ndarray | int) -> np.ndarray:
        idx = np.asarray(node_index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.nodes):
            raise SpecError(f"node index out of range 0..{self.nodes - 1}")
        return idx

    def node_address(self, node_index: np.ndarray | int) -> dict[str, np.ndarray]:
        """Leaf and pod of each node (vectorised); torus adds x, y, z; Dragonfly+ adds group.

        ``leaf`` is the index of the leaf (rail-optimised: the scalable unit, i.e. the leaf of every
        rail); ``pod`` the subtree below the top tier (Dragonfly+: the group; torus: 0).
        """
        idx = self._check_nodes(node_index)
        if self.kind == "torus3d":
            nx_, ny_ = int(self.layout["x"]), int(self.layout["y"])
            return {
                "leaf": idx.copy(),
                "pod": np.zeros_like(idx),
                "x": idx % nx_,
                "y": (idx // nx_) % ny_,
                "z": idx // (nx_ * ny_),
            }
        if self.kind == "dragonfly+":
            npg, lpg = int(self.layout["nodes_per_group"]), int(self.layout["leaves_per_group"])
            group = idx // npg
            leaf = group * lpg + (idx % npg) // self.nodes_per_leaf
            return {"leaf": leaf, "pod": group.copy(), "group": group}
        return {"leaf": idx // self.nodes_per_leaf, "pod": idx // self.nodes_per_pod}

    def gpu_address(self, gpu_index: np.ndarray | int) -> dict[str, np.ndarray]:
        """Node address of each GPU plus ``node``, ``local`` (index inside the node) and ``rail``
        (the NIC it uses: ``local x nics / gpus_per_node``)."""
        g = np.asarray(gpu_index, dtype=np.int64)
        if g.size and (g.min() < 0 or g.max() >= self.gpus):
            raise SpecError(f"GPU index out of range 0..{self.gpus - 1}")
        node = g // self.gpus_per_node
        local = g % self.gpus_per_node
        out = self.node_address(node)
        out.update(node=node, local=local, rail=local * self.nics_per_node // self.gpus_per_node)
        return out

    # -------------------------------------------------------------------- span
    def span(self, n_nodes: int) -> GroupSpan:
        """Leaves, pods, farthest hops and bandwidth fractions of nodes ``0 .. n_nodes-1``.

        Fat-tree family (realised leaf oversubscription ``o``): ring = 1 inside one leaf, else ``1/o``;
        all-to-all = ``min over touched leaves of min(1, 1 / (o_leaf x c_leaf))`` where ``c_leaf =
        (n - e_leaf)/(n - 1)`` is the share of a node's traffic that leaves its leaf and ``o_leaf`` the
        leaf's oversubscription with ``e_leaf`` group nodes on it. Torus: ring 1 (neighbour traffic),
        all-to-all = bisection of the group's sub-block / (group injection / 2). Dragonfly+: the leaf
        rule, and between groups ``m`` global links carry ``e_a e_b P / (n - 1)`` ports' worth of
        traffic (minimal routing).
        """
        n = int(n_nodes)
        if n < 1 or n > self.nodes:
            raise SpecError(f"group of {n} nodes does not fit in {self.nodes} nodes")
        last = self.node_address(n - 1)
        leaves = int(last["leaf"]) + 1
        pods = int(last["pod"]) + 1
        if self.kind == "single" and not self.switches:
            return GroupSpan(n, 0, 1, 0, 1.0, 1.0)
        if self.kind == "torus3d":
            return self._torus_span(n)
        leaf_frac = self._leaf_a2a_fraction(n)
        ring = 1.0 if leaves <= 1 else 1.0 / self.oversubscription
        if n == 1:
            hops = 0
        elif leaves == 1:
            hops = HOPS_SAME_LEAF
        elif pods == 1:
            hops = HOPS_VIA_SPINE
        else:
            hops = HOPS_DRAGONFLY_GLOBAL if self.kind == "dragonfly+" else HOPS_VIA_CORE
        a2a = leaf_frac
        if self.kind == "dragonfly+" and pods > 1:
            m = float(self.layout["global_links_per_pair"])
            npg = int(self.layout["nodes_per_group"])
            e_last = n - (pods - 1) * npg
            e_a, e_b = (npg, npg) if pods > 2 else (npg, e_last)
            a2a = min(a2a, m * (n - 1) / (e_a * e_b * self.nics_per_node))
            ring = min(ring, m / self.nics_per_node)
        return GroupSpan(n, leaves, pods, hops, min(1.0, ring), min(1.0, a2a))

    def span_of(self, nodes: np.ndarray | Sequence[int]) -> GroupSpan:
        """Span of an arbitrary set of nodes (a scattered placement); ``span_of(arange(n)) == span(n)``.

        Duplicate indices count once; ``n`` below is the number of distinct nodes. Leaves and pods are the
        distinct ``node_address`` leaf/pod indices. Fat-tree family: ring = 1 on one leaf, else ``1/o``;
        all-to-all = ``min over touched leaves of min(1, 1/(o_leaf x c_leaf))`` with ``e_leaf`` the group's
        nodes on that leaf, ``o_leaf = max(1, o x e_leaf / nodes_per_leaf)``, ``c_leaf = (n - e_leaf)/(n - 1)``.
        Dragonfly+: additionally ``min(., m (n - 1) / (e_a e_b P))`` for the two groups ``a, b`` holding most
        of the nodes and ring ``min(., m / P)``. Torus: the smallest cyclic extent ``a_d`` covering the
        coordinates in each dimension (``k_d - largest cyclic gap + 1``) replaces the contiguous sub-block;
        hops and the bisection cut ``n / a_d`` links (x2 with wrap-around) follow :meth:`_torus_span`.
        """
        idx = np.unique(self._check_nodes(nodes).reshape(-1))
        n = int(idx.size)
        if n < 1:
            raise SpecError("a group needs at least one node")
        if self.kind == "single" and not self.switches:
            return GroupSpan(n, 0, 1, 0, 1.0, 1.0)
        addr = self.node_address(idx)
        if self.kind == "torus3d":
            return self._torus_span_of(n, addr)
        leaf_ids, leaf_counts = np.unique(addr["leaf"], return_counts=True)
        pod_ids, pod_counts = np.unique(addr["pod"], return_counts=True)
        leaves, pods = int(leaf_ids.size), int(pod_ids.size)
        a2a = 1.0
        if leaves > 1:
            e = leaf_counts.astype(float)
            o_leaf = np.maximum(1.0, self.oversubscription * e / self.nodes_per_leaf)
            cross = (n - e) / (n - 1)
            a2a = float(min(1.0, (1.0 / (o_leaf * cross)).min()))
        ring = 1.0 if leaves <= 1 else 1.0 / self.oversubscription
        if n == 1:
            hops = 0
        elif leaves == 1:
            hops = HOPS_SAME_LEAF
        elif pods == 1:
            hops = HOPS_VIA_SPINE
        else:
            hops = HOPS_DRAGONFLY_GLOBAL if self.kind == "dragonfly+" else HOPS_VIA_CORE
        if self.kind == "dragonfly+" and pods > 1:
            m = float(self.layout["global_links_per_pair"])
            e_b, e_a = np.sort(pod_counts)[-2:].astype(float)
            a2a = min(a2a, m * (n - 1) / (e_a * e_b * self.nics_per_node))
            ring = min(ring, m / self.nics_per_node)
        return GroupSpan(n, leaves, pods, hops, min(1.0, ring), min(1.0, a2a))

    def _torus_span_of(self, n: int, addr: dict[str, np.ndarray]) -> GroupSpan:
        """Torus span of ``n`` distinct nodes with coordinates ``addr``: per dimension the cyclic extent
        ``a = k - g + 1`` (``g`` the largest gap between consecutive occupied coordinates, wrapping)."""
        dims = np.array([int(self.layout[d]) for d in ("x", "y", "z")], dtype=np.int64)
        ext = np.empty(3, dtype=np.int64)
        for i, d in enumerate(("x", "y", "z")):
            c = np.unique(addr[d])
            k = int(dims[i])
            gaps = np.diff(np.append(c, c[0] + k))
            ext[i] = k - int(gaps.max()) + 1
        if n == 1:
            return GroupSpan(1, 1, 1, 0, 1.0, 1.0)
        wrap = (ext == dims) & (dims >= TORUS_WRAP_MIN_K)
        hops = int(np.where(wrap, ext // 2, ext - 1).sum())
        cut = ext >= 2
        cut_links = (n / ext[cut]) * np.where(wrap[cut], 2.0, 1.0)
        link_gb = float(self.layout["link_gb_per_s"])
        a2a = float(cut_links.min()) * link_gb / (n * self.injection_gb_per_s / 2.0)
        return GroupSpan(n, n, 1, hops, 1.0, min(1.0, a2a))

    def _leaf_a2a_fraction(self, n: int) -> float:
        """Worst touched leaf: ``min(1, 1/(o_leaf c_leaf))`` for a full leaf (realised
        oversubscription) and for the last, partial leaf (``o_leaf = max(1, o x e/nodes_per_leaf)``)."""
        npl = self.nodes_per_leaf
        if n <= npl:
            return 1.0
        npg = int(self.layout["nodes_per_group"]) if self.kind == "dragonfly+" else n
        e = np.array([npl, ((n - 1) % npg) % npl + 1], dtype=float)
        o_leaf = np.maximum(1.0, self.oversubscription * e / npl)
        cross = (n - e) / (n - 1)
        return float(min(1.0, (1.0 / (o_leaf * cross)).min()))

    def _torus_span(self, n: int) -> GroupSpan:
        """Nodes 0..n-1 fill x first, then y, then z: a sub-block ``(a, b, c)``. Hops: per dimension
        ``floor(k/2)`` if the block spans a whole ring of ``k >= 3`` (wrap links usable), else ``a - 1``.
        Bisection: cut across the block's cheapest dimension, ``n/a`` links (x2 with wrap-around)."""
        kx, ky, kz = (int(self.layout[d]) for d in ("x", "y", "z"))
        if n <= kx:
            extent = (n, 1, 1)
        elif n <= kx * ky:
            extent = (kx, -(-n // kx), 1)
        else:
            extent = (kx, ky, -(-n // (kx * ky)))
        ext = np.array(extent, dtype=np.int64)
        dims = np.array([kx, ky, kz], dtype=np.int64)
        wrap = (ext == dims) & (dims >= TORUS_WRAP_MIN_K)
        hops = int(np.where(wrap, ext // 2, ext - 1).sum())
        if n == 1:
            return GroupSpan(1, 1, 1, 0, 1.0, 1.0)
        cut = ext >= 2
        cut_links = (n / ext[cut]) * np.where(wrap[cut], 2.0, 1.0)
        link_gb = float(self.layout["link_gb_per_s"])
        a2a = float(cut_links.min()) * link_gb / (n * self.injection_gb_per_s / 2.0)
        return GroupSpan(n, n, 1, hops, 1.0, min(1.0, a2a))

    # --------------------------------------------------------------------- io
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with stable keys (units in names)."""
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["switch_count"] = self.switch_count
        return d
