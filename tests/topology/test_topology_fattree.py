"""Fat-tree and rail-optimised builders against the k-ary formulas and the DGX SuperPOD tables."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from clustertwin import catalog, specs
from clustertwin.errors import SpecError
from clustertwin.topology import build

NDR_GB_PER_S = 50.0  # 400 Gbit/s / 8


def cluster(nodes: int, *, nics: int = 1, ports: int = 64, node: str | None = None, **network):
    node_spec = node or {"gpu": "h100-sxm", "gpus": nics, "nics": {"count": nics}}
    net = {"fabric": "ib-ndr", "switch": {"ports": ports, "port_gbit_per_s": 400}, **network}
    return specs.load(specs.ClusterSpec, {"node": node_spec, "nodes": nodes, "network": net})


@pytest.mark.parametrize("k", range(4, 65, 2))
def test_three_tier_k_ary_counts(k: int) -> None:
    topo = build(cluster(k**3 // 4, ports=k, topology="fat-tree", tiers=3))
    assert topo.endpoints == k**3 // 4
    assert topo.switches == {"leaf": k**2 // 2, "spine": k**2 // 2, "core": k**2 // 4}
    assert topo.switch_count == 5 * k**2 // 4
    assert topo.links == {"node-leaf": k**3 // 4, "leaf-spine": k**3 // 4, "spine-core": k**3 // 4}
    assert topo.bisection_gb_per_s == pytest.approx(k**3 / 4 * NDR_GB_PER_S / 2, rel=1e-12)
    assert topo.diameter_hops == 5
    assert topo.nodes_per_pod == k**2 // 4


@pytest.mark.parametrize("k", range(4, 65, 2))
def test_two_tier_k_ary_counts(k: int) -> None:
    topo = build(cluster(k**2 // 2, ports=k, topology="fat-tree", tiers=2))
    assert topo.switches == {"leaf": k, "spine": k // 2}
    assert topo.bisection_gb_per_s == pytest.approx(k**2 / 2 * NDR_GB_PER_S / 2, rel=1e-12)
    assert topo.diameter_hops == 3
    # cables: node-leaf DAC (no optics), leaf-spine 1 cable + 2 transceivers
    assert topo.cables == k**2 // 2 + k * k // 2
    assert topo.transceivers == 2 * (k * k // 2)


@pytest.mark.parametrize(("o", "down", "up"), [(1.0, 32, 32), (2.0, 42, 21), (3.0, 48, 16), (7.0, 56, 8)])
def test_bisection_falls_with_oversubscription(o: float, down: int, up: int) -> None:
    topo = build(cluster(16 * down, ports=64, topology="fat-tree", tiers=2, oversubscription=o))
    assert (topo.layout["leaf_down"], topo.layout["leaf_up"]) == (down, up)
    assert topo.oversubscription == pytest.approx(down / up) and topo.oversubscription <= o
    non_blocking = topo.endpoints * NDR_GB_PER_S / 2
    assert topo.bisection_gb_per_s == pytest.approx(non_blocking / (down / up), rel=1e-12)


def test_bisection_monotone_in_oversubscription() -> None:
    values = [
        build(cluster(1024, ports=64, topology="fat-tree", oversubscription=o)).bisection_gb_per_s
        for o in (1.0, 1.5, 2.0, 3.0, 4.0, 7.0)
    ]
    assert all(a > b for a, b in itertools.pairwise(values))


# NVIDIA DGX SuperPOD H100 RA, Table 4: SU / nodes / GPUs / leaf / spine / spine-leaf cables
SUPERPOD_H100 = [
    (1, 31, 248, 8, 4, 256),
    (2, 63, 504, 16, 8, 512),
    (3, 95, 760, 24, 16, 768),
    (4, 127, 1016, 32, 16, 1024),
]


@pytest.mark.parametrize(("su", "nodes", "gpus", "leaf", "spine", "spine_leaf"), SUPERPOD_H100)
def test_superpod_h100_table(su: int, nodes: int, gpus: int, leaf: int, spine: int, spine_leaf: int) -> None:
    c = specs.load(
        specs.ClusterSpec,
        {"node": "dgx-h100", "nodes": nodes, "network": {"fabric": "ib-ndr", "topology": "rail-optimized"}},
    )
    topo = build(c)
    assert topo.kind == "rail-optimized"
    assert topo.gpus == gpus
    assert topo.switches == {"leaf": leaf, "spine": spine}
    assert topo.links["leaf-spine"] == spine_leaf
    assert topo.links["node-leaf"] == nodes * 8  # the RA adds 4 UFM cables on top
    assert topo.nodes_per_leaf == 32
    assert int(topo.node_address(nodes - 1)["leaf"]) == su - 1


def test_reference_cluster() -> None:
    topo = build(catalog.get("cluster", "ref-1k-h100"))
    assert topo.switches == {"leaf": 32, "spine": 16}
    assert topo.links == {"node-leaf": 1024, "leaf-spine": 1024, "spine-core": 0}
    assert topo.cables == 2048 and topo.transceivers == 4096  # all links optical
    assert topo.bisection_gb_per_s == pytest.approx(1024 * NDR_GB_PER_S / 2, rel=1e-12)
    assert topo.scale_up_domain_gpus == 8 and topo.nodes_per_pod == 128
    json.dumps(topo.to_dict())


# NVIDIA DGX SuperPOD B200 RA (8 x 400G NDR per node, QM9700): nodes -> leaf / spine / core
SUPERPOD_B200 = [
    (64, 16, 8, 0),
    (128, 32, 16, 0),
    (256, 64, 32, 0),
    (512, 128, 128, 64),
    (1024, 256, 256, 128),
    (2048, 512, 512, 256),
]


@pytest.mark.parametrize(("nodes", "leaf", "spine", "core"), SUPERPOD_B200)
def test_superpod_b200_core_tier(nodes: int, leaf: int, spine: int, core: int) -> None:
    c = specs.load(
        specs.ClusterSpec,
        {"node": "dgx-h100", "nodes": nodes, "network": {"fabric": "ib-ndr", "topology": "rail-optimized"}},
    )
    topo = build(c)
    assert topo.switches.get("leaf") == leaf
    assert topo.switches.get("spine") == spine
    assert topo.switches.get("core", 0) == core
    if core:
        assert any("core tier" in n for n in topo.notes)
        assert topo.diameter_hops == 5 and topo.nodes_per_pod == 128


def test_partial_su_build_out_and_oversubscribed_rail() -> None:
    c = specs.load(
        specs.ClusterSpec,
        {
            "node": "dgx-h100",
            "nodes": 40,
            "network": {"fabric": "ib-ndr", "topology": "rail-optimized", "oversubscription": 2.0},
        },
    )
    topo = build(c)
    assert topo.layout["leaf_up"] == 16 and topo.oversubscription == 2.0
    # SU 0 (32 nodes) is built out with 16 up-links per leaf; SU 1 holds 8 of 32 slots (at most half full):
    # its leaves get ceil(8 / 2) = 4 up-links for their 8 endpoints
    assert topo.switches["leaf"] == 16 and topo.links["leaf-spine"] == 8 * 16 + 8 * 4
    # leaf of SU 0: min(32 endpoints, 16 up); SU 1: min(8, 4)
    assert topo.bisection_gb_per_s == pytest.approx(NDR_GB_PER_S / 2 * 8 * (16 + 4), rel=1e-12)


def test_single_switch_and_tier_promotion() -> None:
    one = build(cluster(16, ports=64, topology="single"))
    assert one.kind == "single" and one.switches == {"leaf": 1} and one.diameter_hops == 1
    assert one.cables == 16 and one.transceivers == 0
    promoted = build(cluster(100, ports=64, topology="single"))
    assert promoted.kind == "fat-tree" and promoted.switches["spine"] >= 1 and promoted.notes
    three = build(cluster(64 * 32 + 1, ports=64, topology="fat-tree", tiers=2))
    assert "core" in three.switches and any("core tier" in n for n in three.notes)


def test_capacity_and_port_errors() -> None:
    with pytest.raises(SpecError, match="3-tier"):
        build(cluster(8**3 // 4 + 1, ports=8, topology="fat-tree", tiers=3))
    with pytest.raises(SpecError, match="su_nodes"):
        build(cluster(64, nics=8, ports=40, topology="rail-optimized", su_nodes=32))
    with pytest.raises(SpecError, match="NIC ports"):
        build(cluster(4, nics=8, ports=8, topology="fat-tree"))
    with pytest.raises(SpecError, match="fabric rate"):
        build(
            specs.load(
                specs.ClusterSpec,
                {
                    "node": "dgx-h100",
                    "nodes": 4,
                    "network": {"fabric": "ib-ndr", "switch": {"ports": 64, "port_gbit_per_s": 300}},
                },
            )
        )


def test_rail_su_sized_to_radix_when_not_set() -> None:
    topo = build(cluster(40, nics=8, ports=40, topology="rail-optimized"))
    assert topo.nodes_per_leaf == 20 and any("scalable unit" in n for n in topo.notes)


def test_fallback_switch_when_default_missing() -> None:
    c = specs.load(
        specs.ClusterSpec,
        {
            "node": "dgx-h100",
            "nodes": 64,
            "network": {
                "topology": "fat-tree",
                "fabric": {
                    "id": "x-400",
                    "kind": "ethernet",
                    "gbit_per_s": 400,
                    "default_switch": "no-such-switch",
                },
            },
        },
    )
    topo = build(c)
    assert topo.layout["radix"] == 64 and any("no-such-switch" in n for n in topo.notes)


def test_breakout_doubles_radix() -> None:
    topo = build(
        cluster(
            16, ports=64, topology="fat-tree", fabric="ib-ndr", switch={"ports": 64, "port_gbit_per_s": 800}
        )
    )
    assert topo.layout["radix"] == 128


def test_addresses_are_vectorised() -> None:
    topo = build(catalog.get("cluster", "ref-1k-h100"))
    gpus = np.arange(topo.gpus)
    a = topo.gpu_address(gpus)
    assert np.array_equal(a["node"], gpus // 8)
    assert np.array_equal(a["rail"], gpus % 8)
    assert np.array_equal(a["leaf"], gpus // 8 // 32)
    assert np.array_equal(a["pod"], np.zeros_like(gpus))
    three = build(cluster(2048, nics=8, node="dgx-h100", topology="fat-tree", tiers=3))
    na = three.node_address(np.array([0, 3, 4, 127, 128, 2047]))
    assert na["leaf"].tolist() == [0, 0, 1, 31, 32, 511]
    assert na["pod"].tolist() == [0, 0, 0, 0, 1, 15]
    with pytest.raises(SpecError):
        topo.node_address(128)
    with pytest.raises(SpecError):
        topo.gpu_address(np.array([-1]))


def test_span_fat_tree() -> None:
    ref = build(catalog.get("cluster", "ref-1k-h100"))
    assert ref.span(1).max_hops == 0
    s = ref.span(32)
    assert (s.leaves, s.pods, s.max_hops, s.ring_bw_fraction, s.a2a_bw_fraction) == (1, 1, 1, 1.0, 1.0)
    assert ref.span(33).max_hops == 3 and ref.span(128).leaves == 4
    over = build(cluster(2048, nics=8, node="dgx-h100", topology="fat-tree", tiers=3, oversubscription=3.0))
    npl = over.nodes_per_leaf  # 6 nodes x 8 ports = 48 down, 16 up
    assert npl == 6 and over.oversubscription == pytest.approx(3.0)
    inside = over.span(npl)
    assert inside.ring_bw_fraction == 1.0 and inside.a2a_bw_fraction == 1.0
    n = 4 * npl
    wide = over.span(n)
    assert wide.ring_bw_fraction == pytest.approx(1 / 3)
    cross = (n - npl) / (n - 1)
    assert wide.a2a_bw_fraction == pytest.approx(1 / (3 * cross), rel=1e-12)
    assert over.span(over.nodes).max_hops == 5 and over.span(over.nodes).pods == over.layout["pods"]
    with pytest.raises(SpecError):
        ref.span(0)
    with pytest.raises(SpecError):
        ref.span(129)


def test_nvl72_racks_share_leaves_across_rails() -> None:
    node = {"gpu": "h100-sxm", "gpus": 72, "nics": {"count": 72}}
    c = specs.load(
        specs.ClusterSpec,
        {"node": node, "nodes": 64, "network": {"fabric": "ib-ndr", "topology": "rail-optimized"}},
    )
    topo = build(c)
    rpl, su = topo.layout["rails_per_leaf"], topo.nodes_per_leaf
    assert topo.layout["rails"] == -(-72 // rpl) <= 32  # an SU's leaves fit one pod
    assert su * rpl <= 32 and any("scalable unit" in n for n in topo.notes)
    assert topo.links["node-leaf"] == 64 * 72
    assert topo.scale_up_domain_gpus == 72
    a = topo.gpu_address(np.array([0, 71, 72, 72 * su]))
    assert a["rail"].tolist() == [0, 71, 0, 0] and a["leaf"].tolist() == [0, 0, 0, 1]


# ---- sizing from the actual endpoint count (issue 21): no spine for one leaf, no up-links for empty ports
def _net(nodes: int, topology: str = "fat-tree") -> dict:
    from clustertwin.plan import plan
    from clustertwin.specs import ClusterSpec, build

    spec = build(ClusterSpec, {"node": "dgx-h100", "nodes": nodes,
                               "network": {"fabric": "ib-ndr", "topology": topology}})
    return plan(spec).to_dict()["network"]


def test_one_node_and_one_leaf_have_no_spine() -> None:
    one = _net(1)  # one node: no scale-out switch at all
    assert one["switches"].get("spine", 0) == 0 and one["links"].get("leaf-spine", 0) == 0
    asc = _net(8)  # 64 endpoints on one 64-port leaf
    assert asc["switches"] == {"leaf": 1} and asc["links"]["leaf-spine"] == 0
    assert asc["transceivers"] == 0 and asc["diameter_hops"] == 1


def test_two_rail_optimised_nodes_get_up_links_for_their_endpoints_only() -> None:
    two = _net(2, "rail-optimized")
    assert two["links"]["node-leaf"] == 16
    assert two["links"]["leaf-spine"] == 16  # one up-link per endpoint at 1:1, not the full SU build-out
    assert two["switches"]["spine"] == 1


def test_64_and_16384_nodes_keep_full_non_blocking_build_out() -> None:
    n64 = _net(64)
    assert n64["links"]["leaf-spine"] == n64["links"]["node-leaf"] == 512
    big = _net(2048)  # 16,384 GPUs
    assert big["links"]["leaf-spine"] == big["links"]["node-leaf"] == 16384
    assert big["links"]["spine-core"] == 16384 and big["diameter_hops"] == 5
