"""The wiring of a built topology as a ``networkx.Graph`` at switch granularity, and graph-measured
metrics, to check the closed forms on small instances (tests) and to inspect a design.

Vertices: ``("ep", node, port)`` NIC endpoints, ``("leaf", block, rail)``, ``("spine", pod, j)``,
``("core", group, c)``; Dragonfly+ ``("leaf", group, l)``, ``("spine", group, s)``; torus ``("node",
x, y, z)`` (each node is its own router and endpoint). Edge attribute ``capacity`` is the bundle's
bandwidth, GB/s per direction (parallel links are merged into one edge).

Only for small instances: graphs over :data:`MAX_GRAPH_VERTICES` vertices are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import networkx as nx
import numpy as np

from clustertwin.errors import SpecError
from clustertwin.topology.model import Topology

MAX_GRAPH_VERTICES = 50_000


@dataclass(frozen=True)
class GraphMetrics:
    """Metrics measured on the graph."""

    diameter_hops: int
    avg_hops: float
    halving_max_flow_gb_per_s: float
    """Max flow from the endpoints of one half of the nodes to the other half's, GB/s."""


def _check_size(topo: Topology) -> None:
    size = topo.endpoints + topo.switch_count + (topo.nodes if topo.graph_vertex_extra else 0)
    if size > MAX_GRAPH_VERTICES:
        raise SpecError(f"graph of {size} vertices is too large to build (limit {MAX_GRAPH_VERTICES})")
    if not topo.scale_out:
        raise SpecError("a single node has no scale-out graph")


def to_networkx(topo: Topology) -> nx.Graph:
    """The topology's wiring (module docstring)."""
    _check_size(topo)
    return topo.wiring()


def _add(g: nx.Graph, a: tuple, b: tuple, capacity: float) -> None:
    if g.has_edge(a, b):
        g[a][b]["capacity"] += capacity
    else:
        g.add_edge(a, b, capacity=capacity)


def fat_tree_graph(topo: Topology) -> nx.Graph:
    """The wiring of a fat-tree network (module docstring)."""
    lay, r = topo.layout, topo.port_gb_per_s
    rails, tiers, up = int(lay["rails"]), int(lay["tiers"]), int(lay["leaf_up"])
    rpl = int(lay["rails_per_leaf"])
    blocks = int(lay["leaves_per_rail"])
    g = nx.Graph()
    nics = topo.nics_per_node
    for node in range(topo.nodes):
        for port in range(nics):
            _add(g, ("ep", node, port), ("leaf", node // topo.nodes_per_leaf, port // rpl), r)
    leaves = [("leaf", b, rr) for b in range(blocks) for rr in range(rails)]
    if tiers == 2:
        spines = int(lay["spines_per_pod"])
        for leaf, s in product(leaves, range(spines)):
            _add(g, leaf, ("spine", 0, s), up / spines * r)
    elif tiers == 3:
        pod_spines, cores = int(lay["spines_per_pod"]), int(lay["cores_per_group"])
        blocks_per_pod = int(lay["leaves_per_pod"]) // rails
        leaves_in_pod: dict[int, int] = {}
        for leaf in leaves:
            pod = leaf[1] // blocks_per_pod
            leaves_in_pod[pod] = leaves_in_pod.get(pod, 0) + 1
            for s in range(pod_spines):
                _add(g, leaf, ("spine", pod, s), up / pod_spines * r)
        for pod, n_leaves in leaves_in_pod.items():
            spine_up = n_leaves * up / pod_spines / float(lay.get("pod_oversubscription", 1.0))
            for s, c in product(range(pod_spines), range(cores)):
                _add(g, ("spine", pod, s), ("core", s, c), spine_up / cores * r)
    return g


def dragonfly_graph(topo: Topology) -> nx.Graph:
    """The wiring of a dragonfly network (module docstring)."""
    lay, r = topo.layout, topo.port_gb_per_s
    groups = int(lay["groups"])
    lpg, spines = int(lay["leaves_per_group"]), int(lay["spines_per_group"])
    h, m = int(lay["global_ports_per_spine"]), int(lay["global_links_per_pair"])
    up = int(lay["leaf_up"])
    g = nx.Graph()
    addr = topo.node_address(np.arange(topo.nodes))
    for node in range(topo.nodes):
        grp, leaf = int(addr["group"][node]), int(addr["leaf"][node]) - int(addr["group"][node]) * lpg
        for port in range(topo.nics_per_node):
            _add(g, ("ep", node, port), ("leaf", grp, leaf), r)
    for grp, leaf, s in product(range(groups), range(lpg), range(spines)):
        _add(g, ("leaf", grp, leaf), ("spine", grp, s), up / spines * r)

    def spine_of(a: int, b: int, j: int) -> tuple:
        slot = ((b if b < a else b - 1) * m) + j  # peers of a in increasing order, m slots each
        return ("spine", a, slot // h)

    for a in range(groups):
        for b in range(a + 1, groups):
            for j in range(m):
                _add(g, spine_of(a, b, j), spine_of(b, a, j), r)
    return g


def torus_graph(topo: Topology) -> nx.Graph:
    """The wiring of a torus network (module docstring)."""
    lay = topo.layout
    dims = (int(lay["x"]), int(lay["y"]), int(lay["z"]))
    cap = float(lay["link_gb_per_s"])
    g = nx.Graph()
    for x, y, z in product(*(range(d) for d in dims)):
        g.add_node(("node", x, y, z))
        here = (x, y, z)
        for axis, k in enumerate(dims):
            if k < 2:
                continue
            there = list(here)
            there[axis] = (here[axis] + 1) % k
            if not g.has_edge(("node", *here), ("node", *there)):
                g.add_edge(("node", *here), ("node", *there), capacity=cap)
    return g


def endpoints_of(topo: Topology, nodes: np.ndarray) -> list[tuple]:
    """Graph vertices of the endpoints of ``nodes``."""
    return topo.graph_endpoints(nodes)


def measure(topo: Topology, side_a: np.ndarray | None = None) -> GraphMetrics:
    """Diameter and average hops over ordered pairs of distinct endpoints (switches traversed; torus:
    links), and the max flow between the endpoints of ``side_a`` (default: the first half of the
    nodes) and those of the other nodes."""
    g = to_networkx(topo)
    all_nodes = np.arange(topo.nodes)
    eps = endpoints_of(topo, all_nodes)
    offset = topo.graph_access_links  # endpoint-to-endpoint edges minus the two access links
    total, count, worst = 0, 0, 0
    ep_set = set(eps)
    for src in eps:
        dist = nx.single_source_shortest_path_length(g, src)
        d = np.array([v for t, v in dist.items() if t in ep_set and t != src]) - offset
        total += int(d.sum())
        count += d.size
        worst = max(worst, int(d.max()))
    a = all_nodes[: topo.nodes // 2] if side_a is None else np.asarray(side_a)
    b = np.setdiff1d(all_nodes, a)
    flow_g = g.copy()
    for v in endpoints_of(topo, a):
        flow_g.add_edge("source", v)  # no capacity attribute = unbounded
    for v in endpoints_of(topo, b):
        flow_g.add_edge(v, "sink")
    flow = nx.maximum_flow_value(flow_g, "source", "sink")
    return GraphMetrics(diameter_hops=worst, avg_hops=total / count, halving_max_flow_gb_per_s=float(flow))
