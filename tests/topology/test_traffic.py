"""Topology traffic: per-tier oversubscription, placement, contention between concurrent groups, and the
same 16,384-GPU cluster on four topologies (docs/topology.md table)."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin import topology as T
from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec, NetworkSpec
from clustertwin.specs.loading import build

DESIGNS = {
    "fat-tree 1:1": {"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 3},
    "fat-tree 1:7 aggregation": {"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 3, "oversubscription": [1.0, 7.0]},
    "3D torus": {"fabric": "ib-ndr", "topology": "torus3d"},
    "Dragonfly+": {"fabric": "ib-ndr", "topology": "dragonfly+"},
}


@pytest.fixture(scope="module")
def topos():
    return {k: T.build(ClusterSpec(node="dgx-h100", nodes=2048, network=v)) for k, v in DESIGNS.items()}


def test_oversubscription_scalar_or_per_tier():
    assert NetworkSpec(fabric="ib-ndr", oversubscription=2.0).tier_oversubscription == (2.0,)
    n = NetworkSpec(fabric="ib-ndr", tiers=3, oversubscription=[1.0, 7.0])
    assert n.tier_oversubscription == (1.0, 7.0) and n.leaf_oversubscription == 1.0
    assert NetworkSpec(fabric="ib-ndr", tiers=3, oversubscription=1.5).tier_oversubscription == (1.5, 1.0)
    with pytest.raises(SpecError, match="lists 2 tiers"):
        build(NetworkSpec, {"fabric": "ib-ndr", "tiers": 2, "oversubscription": [1.0, 7.0]})


def test_aggregation_oversubscription_builds_fewer_core_links(topos):
    flat, agg = topos["fat-tree 1:1"], topos["fat-tree 1:7 aggregation"]
    assert agg.layout["pod_oversubscription"] == pytest.approx(7.0, rel=0.15)
    assert agg.links["spine-core"] < flat.links["spine-core"] / 5
    assert agg.bisection_gb_per_s < flat.bisection_gb_per_s / 5


def test_aggregation_oversubscription_matches_the_graph():
    """A small 3-tier tree with 1:3 at the spines: the closed-form bisection equals the graph max-flow."""
    from clustertwin import specs
    from clustertwin.topology.graph import measure

    node = {"gpu": "h100-sxm", "gpus": 1, "nics": {"count": 1}}
    net = {"fabric": "ib-ndr", "switch": {"ports": 8, "port_gbit_per_s": 400}, "topology": "fat-tree",
           "tiers": 3, "oversubscription": [1.0, 3.0]}
    topo = T.build(specs.load(specs.ClusterSpec, {"node": node, "nodes": 96, "network": net}))
    assert topo.layout["pods"] > 1 and topo.layout["pod_oversubscription"] == pytest.approx(3.0)
    assert measure(topo).halving_max_flow_gb_per_s == pytest.approx(topo.bisection_gb_per_s, rel=1e-9)


def test_four_topologies_give_different_bandwidths(topos):
    """DP rings of 16 pipeline stages (128 nodes each, TP 8 inside the node) placed scattered, and
    expert all-to-all among 128 contiguous nodes: each topology is limited by a different term."""
    res = {}
    for name, t in topos.items():
        dp = T.groups_of(T.place(t, 2048, "scattered"), 128)
        ep = T.groups_of(T.place(t, 2048), 128)
        res[name] = (T.group_bandwidth(t, dp, "ring"), T.group_bandwidth(t, ep, "all_to_all"))
    ring = {k: round(v[0].per_node_gb_per_s, 1) for k, v in res.items()}
    a2a = {k: round(v[1].per_node_gb_per_s, 1) for k, v in res.items()}
    assert len(set(ring.values()) | set(a2a.values())) >= 4
    assert res["fat-tree 1:1"][0].bottleneck == "nic" and ring["fat-tree 1:1"] == pytest.approx(400.0)
    assert res["fat-tree 1:7 aggregation"][0].bottleneck == "pod uplinks"
    assert ring["fat-tree 1:7 aggregation"] < ring["fat-tree 1:1"] / 5
    assert res["3D torus"][1].bottleneck == "torus links" and a2a["3D torus"] < 0.1 * a2a["fat-tree 1:1"]
    assert res["Dragonfly+"][0].bottleneck == "global links"


def test_contiguous_dp_rings_cross_the_aggregation_only_at_boundaries(topos):
    t = topos["fat-tree 1:7 aggregation"]
    r = T.group_bandwidth(t, T.groups_of(T.place(t, 2048), 128), "ring")
    assert r.fraction == pytest.approx(1.0) and r.bottleneck == "nic"


def test_scattered_slower_than_contiguous_on_oversubscribed_leaves():
    c = ClusterSpec(node="dgx-h100", nodes=128,
                    network={"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 2, "oversubscription": 4.0})
    t = T.build(c)
    cont = T.group_bandwidth(t, T.place(t, 64, "contiguous"), "ring")
    scat = T.group_bandwidth(t, T.place(t, 64, "scattered"), "ring")
    assert scat.per_node_gb_per_s < 0.6 * cont.per_node_gb_per_s
    assert scat.bottleneck == "leaf uplinks" and scat.mean_hops > cont.mean_hops


def test_contention_between_groups_sharing_uplinks():
    c = ClusterSpec(node="dgx-h100", nodes=128,
                    network={"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 2, "oversubscription": 4.0})
    t = T.build(c)
    nodes = T.place(t, 64, "scattered")
    one = T.group_bandwidth(t, nodes[:16], "ring")
    four = T.group_bandwidth(t, T.groups_of(nodes, 16), "ring")
    assert four.per_node_gb_per_s < one.per_node_gb_per_s


def test_all_to_all_matches_span_rule_on_a_leaf_oversubscribed_tree():
    c = ClusterSpec(node="dgx-h100", nodes=128,
                    network={"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 2, "oversubscription": 4.0})
    t = T.build(c)
    nodes = np.arange(64)
    assert T.group_bandwidth(t, nodes, "all_to_all").fraction == pytest.approx(t.span_of(nodes).a2a_bw_fraction)


def test_placements_and_errors(topos):
    t = topos["fat-tree 1:1"]
    assert np.array_equal(T.place(t, 4), np.arange(4))
    s = T.place(t, 2048, "scattered")
    assert np.unique(s).size == 2048
    assert len(set(t.node_address(s[:16])["pod"].tolist())) == 16
    assert np.array_equal(T.place(t, 3, [5, 1, 9]), np.array([5, 1, 9]))
    with pytest.raises(SpecError, match="twice"):
        T.place(t, 2, [1, 1])
    with pytest.raises(SpecError, match="out of range"):
        T.place(t, 1, [5000])
    with pytest.raises(SpecError, match="placement must be"):
        T.place(t, 2, "packed")
    with pytest.raises(SpecError, match="do not split"):
        T.groups_of(np.arange(10), 3)
    assert T.groups_of(np.arange(8), 2, stride=4).tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
