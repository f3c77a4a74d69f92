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

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.topology.link_load import tier_fractions

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
class Topology(ABC):
    """A built scale-out network (or a single node) with its metrics: the ``Network`` interface.

    Each network is one subclass (:mod:`clustertwin.topology.networks`: single node, fat-tree,
    rail-optimised, 3D torus, Dragonfly+) chosen by the builders (:func:`clustertwin.topology.build`);
    nothing else looks at ``kind``, which stays as the network's name in outputs. The interface: node
    addresses, the span of a rank set (:meth:`span_of`; ``span(n) = span_of(range(n))``), hops between node
    pairs, the shared link tiers and the links a flow crosses, one collective phase's per-group bandwidth
    (:func:`clustertwin.topology.group_bandwidth` over :meth:`phase_fractions`), and the wiring graph.

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
    span_cache: dict[int, GroupSpan] = field(default_factory=dict, compare=False, repr=False)
    """:meth:`span` results by node count (the topology is immutable, so they never go stale)."""

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
    def check_nodes(self, node_index: np.ndarray | int) -> np.ndarray:
        """``node_index`` as an int64 array, refused (SpecError) if any index is outside ``0..nodes-1``."""
        idx = np.asarray(node_index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.nodes):
            raise SpecError(f"node index out of range 0..{self.nodes - 1}")
        return idx

    @abstractmethod
    def node_address(self, node_index: np.ndarray | int) -> dict[str, np.ndarray]:
        """Leaf and pod of each node (vectorised); the torus adds x, y, z, Dragonfly+ adds group.

        ``leaf`` is the index of the leaf (rail-optimised: the scalable unit, i.e. the leaf of every rail);
        ``pod`` the subtree below the top tier (Dragonfly+: the group; torus: 0). One class per network
        (:mod:`clustertwin.topology.networks`) defines it."""

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
        """Span of nodes ``0 .. n_nodes-1``: by definition ``span_of(range(n_nodes))`` (cached per ``n``)."""
        n = int(n_nodes)
        if n < 1 or n > self.nodes:
            raise SpecError(f"group of {n} nodes does not fit in {self.nodes} nodes")
        hit = self.span_cache.get(n)
        if hit is None:
            hit = self.span_cache[n] = self.span_of(np.arange(n, dtype=np.int64))
        return hit

    @abstractmethod
    def span_of(self, nodes: np.ndarray | Sequence[int]) -> GroupSpan:
        """Leaves, pods, farthest hops and bandwidth fractions of any set of nodes (duplicates count once).
        The formulas are the network's own (:mod:`clustertwin.topology.networks`)."""

    def distinct_nodes(self, nodes: np.ndarray | Sequence[int]) -> np.ndarray:
        """Sorted distinct node indices of ``nodes`` (checked in range, at least one)."""
        idx = np.unique(self.check_nodes(nodes).reshape(-1))
        if idx.size < 1:
            raise SpecError("a group needs at least one node")
        return idx

    # ------------------------------------------------------------------ traffic
    @abstractmethod
    def pair_hops(self, same_node: np.ndarray, au: dict[str, np.ndarray], av: dict[str, np.ndarray]) -> np.ndarray:
        """Switch hops (torus: link hops) between node pairs with addresses ``au``, ``av`` (vectorised)."""

    @abstractmethod
    def scattered_order(self) -> np.ndarray:
        """Every node, in the order a fragmented scheduler would hand them out (far apart first)."""

    def uplink_tiers(self) -> list[tuple[str, str, float]]:
        """The shared link bundles of the network as ``(name, address key, capacity GB/s per direction)``:
        every block of nodes with the same ``node_address[key]`` shares one bundle of that capacity
        towards the rest of the network. Empty for networks without shared switch tiers."""
        return []

    def flow_links(self, u: np.ndarray, v: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The shared link bundles flows ``u[i] -> v[i]`` (node indices) cross: for each tier of
        :meth:`uplink_tiers`, the ``(leaving block, entering block)`` of every flow, ``-1`` where the flow
        stays inside one block. A flow crosses the up-bundle of its source block and the down-bundle of its
        destination block; capacities per direction are the tier's. This is what link sharing between jobs
        uses (``clustertwin.sched`` co-simulation)."""
        uu, vv = self.check_nodes(u).reshape(-1), self.check_nodes(v).reshape(-1)
        au, av = self.node_address(uu), self.node_address(vv)
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, key, _cap in self.uplink_tiers():
            cross = au[key] != av[key]
            out[name] = (np.where(cross, au[key], -1), np.where(cross, av[key], -1))
        return out

    def phase_fractions(self, g: np.ndarray, w: np.ndarray, pattern: str, addr: dict[str, np.ndarray],
                        asucc: dict[str, np.ndarray], hops: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        """Each group's fraction of its injection share ``w`` for one phase of ``pattern`` over the groups
        ``g`` (node indices, ``(G, n)``), and the worst load/capacity by tier
        (:func:`clustertwin.topology.group_bandwidth`). Here: the tightest of the shared tiers of
        :meth:`uplink_tiers` (:func:`~clustertwin.topology.link_load.tier_fractions`); networks with more
        (Dragonfly+ global links) or other links (torus) extend or replace it."""
        fr = np.ones(g.shape[0])
        loads: dict[str, float] = {}
        for name, key, cap in self.uplink_tiers():
            ratio, per_group = tier_fractions(addr[key], asucc[key], w, pattern, cap)
            loads[name] = ratio
            fr = np.minimum(fr, per_group)
        return fr, loads

    @abstractmethod
    def a2a_hops(self, addr: dict[str, np.ndarray], n: int) -> tuple[float, int]:
        """Mean and largest hops over the member pairs of all-to-all groups with addresses ``addr``."""

    # -------------------------------------------------------------------- graph
    def wiring(self) -> Any:
        """The wiring as a ``networkx.Graph`` (:mod:`clustertwin.topology.graph`)."""
        raise SpecError("a single node has no scale-out graph")

    def graph_endpoints(self, nodes: np.ndarray) -> list[tuple]:
        """Graph vertices of the endpoints of ``nodes``: one per NIC port."""
        return [("ep", int(n), p) for n in nodes for p in range(self.nics_per_node)]

    scale_out: ClassVar[bool] = True
    """False for a single node without a scale-out switch: every group is NIC-bound and has no hops."""

    graph_access_links: ClassVar[int] = 1
    """Edges of an endpoint-to-endpoint graph path beyond its hops (1 where endpoints hang off switches:
    edges = switches + 1; 0 where every node is its own router)."""

    graph_vertex_extra: ClassVar[bool] = False
    """True where every node is also a router vertex of the graph (direct networks)."""

    # --------------------------------------------------------------------- io
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with stable keys (units in names)."""
        d = asdict(self)
        d.pop("span_cache", None)
        d["notes"] = list(self.notes)
        d["switch_count"] = self.switch_count
        return d
