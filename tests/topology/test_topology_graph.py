"""Closed forms agree with a networkx graph of the same wiring on small instances."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin import specs
from clustertwin.errors import SpecError
from clustertwin.topology import build
from clustertwin.topology.graph import measure, to_networkx


def cluster(nodes: int, *, nics: int = 1, ports: int = 8, o: float = 1.0, **network):
    node = {"gpu": "h100-sxm", "gpus": nics, "nics": {"count": nics}}
    net = {
        "fabric": "ib-ndr",
        "switch": {"ports": ports, "port_gbit_per_s": 400},
        "oversubscription": o,
        **network,
    }
    return specs.load(specs.ClusterSpec, {"node": node, "nodes": nodes, "network": net})


CASES = {
    "2-tier": cluster(32, topology="fat-tree", tiers=2),
    "2-tier-2:1": cluster(36, ports=9, o=2.0, topology="fat-tree", tiers=2),
    "2-tier-3:1": cluster(24, topology="fat-tree", tiers=2, o=3.0),
    "3-tier-one-pod": cluster(16, topology="fat-tree", tiers=3),
    "3-tier-k8": cluster(128, topology="fat-tree", tiers=3),
    "3-tier-2nic": cluster(32, nics=2, topology="fat-tree", tiers=3),
    "single-switch": cluster(6, topology="single"),
    "rail-2-tier": cluster(12, nics=2, topology="rail-optimized", su_nodes=4),
    "rail-promoted": cluster(32, nics=2, topology="rail-optimized", su_nodes=4),
    "rail-3-tier": cluster(48, nics=2, topology="rail-optimized", tiers=3, su_nodes=4),
    "rail-2:1": cluster(24, nics=2, ports=12, o=2.0, topology="rail-optimized", su_nodes=6),
    "rail-2-rails-per-leaf": cluster(24, nics=4, ports=16, topology="rail-optimized", su_nodes=4),
    "rail-3-rails-per-leaf-3-tier": cluster(36, nics=3, ports=12, topology="rail-optimized", su_nodes=2),
    "dragonfly+-max": cluster(17 * 16, ports=8, topology="dragonfly+"),
    "dragonfly+-4": cluster(64, ports=8, topology="dragonfly+", dragonfly_groups=4),
    "dragonfly+-2nic": cluster(48, nics=2, ports=8, topology="dragonfly+", dragonfly_groups=6),
    "torus-444": cluster(64, nics=2, topology="torus3d"),
    "torus-345": cluster(60, nics=6, topology="torus3d", torus_dims=(3, 4, 5)),
    "torus-226": cluster(24, nics=6, topology="torus3d", torus_dims=(2, 2, 6)),
}


def halving(topo) -> np.ndarray | None:
    """Torus: cut the largest side in half by coordinate; others: first half of the nodes."""
    if topo.kind != "torus3d":
        return None
    axis = max("xyz", key=lambda d: topo.layout[d])
    return np.nonzero(topo.node_address(np.arange(topo.nodes))[axis] < topo.layout[axis] // 2)[0]


@pytest.mark.parametrize("name", list(CASES))
def test_closed_forms_match_graph(name: str) -> None:
    topo = build(CASES[name])
    measured = measure(topo, halving(topo))
    assert measured.diameter_hops == topo.diameter_hops
    assert measured.avg_hops == pytest.approx(topo.avg_hops, rel=1e-12)
    assert measured.halving_max_flow_gb_per_s == pytest.approx(topo.bisection_gb_per_s, rel=1e-9)


def test_graph_counts_match_switches_and_links() -> None:
    topo = build(CASES["3-tier-k8"])
    g = to_networkx(topo)
    kinds = {}
    for v in g.nodes:
        kinds[v[0]] = kinds.get(v[0], 0) + 1
    assert kinds == {"ep": topo.endpoints, **topo.switches}
    capacity = sum(d["capacity"] for _, _, d in g.edges(data=True))
    assert capacity == pytest.approx(sum(topo.links.values()) * topo.port_gb_per_s)


def test_graph_refuses_large_or_single() -> None:
    with pytest.raises(SpecError):
        to_networkx(build(specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 8192})))
    with pytest.raises(SpecError):
        to_networkx(build(specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 1})))
