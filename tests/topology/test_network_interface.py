"""One network interface: one class per topology, chosen by the builders; the span of ``n`` nodes is the span of
the set ``range(n)``; the links a flow crosses are the tiers that bound a collective phase; and nothing outside
the builders switches on the topology's name."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from clustertwin import catalog, specs
from clustertwin import topology as T
from clustertwin.topology.networks import DragonflyPlus, FatTree, RailOptimized, SingleNode
from clustertwin.topology.torus_net import Torus3D

SRC = Path(__file__).resolve().parents[2] / "src" / "clustertwin"
CLASS_OF = {"fat-tree": FatTree, "rail-optimized": RailOptimized, "torus3d": Torus3D, "dragonfly+": DragonflyPlus}


def _cluster(cid: str) -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, cid, kind="cluster")


@pytest.fixture(scope="module")
def catalog_topologies() -> dict[str, T.Topology]:
    return {cid: T.build(_cluster(cid)) for cid in catalog.ids("cluster")}


def test_every_catalog_network_is_the_class_of_its_kind(catalog_topologies):
    for cid, topo in catalog_topologies.items():
        if topo.nodes == 1:
            assert type(topo) is SingleNode, cid
        elif topo.kind == "single":  # several nodes on one switch: a one-tier fat-tree
            assert type(topo) is FatTree, cid
        else:
            assert type(topo) is CLASS_OF[topo.kind], cid


@pytest.mark.parametrize("cid", ["ref-1k-h100", "llama3-16k-h100-roce", "tpu-style-torus-4k", "dragonfly-16k-mi300x",
                                 "gb200-nvl72-576", "a100-512-1gbe"])
def test_span_of_n_nodes_is_the_span_of_the_first_n(cid, catalog_topologies):
    topo = catalog_topologies[cid]
    for n in sorted({1, 2, 3, 7, 16, 33, topo.nodes_per_leaf + 1, topo.nodes // 2 + 1, topo.nodes} & set(
            range(1, topo.nodes + 1))):
        assert topo.span(n) == topo.span_of(list(range(n))), n


def test_flow_links_name_the_tiers_a_flow_crosses():
    """Two-tier rail-optimised fabric of 4-node scalable units: a flow inside one unit crosses no shared bundle;
    across units it leaves its unit's uplinks and enters the other's."""
    c = specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 16, "network": {
        "fabric": "ib-ndr", "topology": "rail-optimized", "tiers": 2, "su_nodes": 4}})
    topo = T.build(c)
    links = topo.flow_links(np.array([0, 0, 5]), np.array([3, 4, 13]))
    assert set(links) == {name for name, _, _ in topo.uplink_tiers()} == {"leaf uplinks"}
    out, inn = links["leaf uplinks"]
    assert out.tolist() == [-1, 0, 1] and inn.tolist() == [-1, 1, 3]


def test_flow_links_of_a_three_tier_tree_and_of_dragonfly_groups(catalog_topologies):
    tree = catalog_topologies["llama3-16k-h100-roce"]
    npp = tree.nodes_per_pod
    links = tree.flow_links(np.array([0, 0]), np.array([1, npp]))
    assert set(links) == {"leaf uplinks", "pod uplinks"}
    assert links["pod uplinks"][0].tolist() == [-1, 0] and links["pod uplinks"][1].tolist() == [-1, 1]
    df = catalog_topologies["dragonfly-16k-mi300x"]
    npg, groups = int(df.layout["nodes_per_group"]), int(df.layout["groups"])
    pair = df.flow_links(np.array([0, 0]), np.array([1, 2 * npg]))["global links"]
    assert pair[0].tolist() == [-1, 0 * groups + 2]


def test_uplink_capacity_is_what_bounds_a_crossing_ring():
    """A ring over two leaves of a 2:1 oversubscribed fabric, every node of both leaves in it: the leaf
    bundle's capacity over the ring's load is the fraction ``group_bandwidth`` reports."""
    c = specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 64, "network": {
        "fabric": "ib-ndr", "topology": "fat-tree", "tiers": 2, "oversubscription": 2.0}})
    topo = T.build(c)
    npl = topo.nodes_per_leaf
    ring = np.arange(2 * npl)
    traffic = T.group_bandwidth(topo, ring, "ring")
    (_, _, cap), = [t for t in topo.uplink_tiers() if t[0] == "leaf uplinks"]
    load = topo.injection_gb_per_s  # one ring edge leaves each leaf at the full injection rate
    assert traffic.fraction == pytest.approx(min(1.0, cap / load))


TOPOLOGY_NAMES = {"single", "fat-tree", "rail-optimized", "torus3d", "dragonfly+"}
BUILDERS = {"topology/build.py", "topology/fattree.py", "topology/networks.py"}
"""The factory: build.py dispatches on the kind, the fat-tree builder lays out top-of-rack or rail-optimised
leaves and networks.fat_tree_class picks the class it returns."""


def test_no_switch_on_the_topology_name_outside_the_factory():
    hits = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        if rel in BUILDERS or rel.startswith("specs/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                consts = [c.value for c in (node.left, *node.comparators) if isinstance(c, ast.Constant)]
                if any(isinstance(v, str) and v in TOPOLOGY_NAMES for v in consts):
                    hits.append(f"{rel}:{node.lineno}")
    assert not hits, hits
