"""3D torus, Dragonfly+ and single-node scale-up domain against their closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin import catalog, specs
from clustertwin.errors import SpecError
from clustertwin.topology import build, pcie_x16_gb_per_s
from clustertwin.topology.torus import cubic_dims

NDR_GB_PER_S = 50.0


def cluster(nodes: int, *, nics: int = 1, ports: int = 64, gpus: int = 1, **network):
    net = {"fabric": "ib-ndr", "switch": {"ports": ports, "port_gbit_per_s": 400}, **network}
    node = {"gpu": "h100-sxm", "gpus": gpus, "nics": {"count": nics}}
    return specs.load(specs.ClusterSpec, {"node": node, "nodes": nodes, "network": net})


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 8, 16])
def test_k_ary_3_cube(k: int) -> None:
    topo = build(cluster(k**3, nics=6, topology="torus3d", torus_dims=(k, k, k)))
    degree = 6 if k >= 3 else 3
    link = 6 * NDR_GB_PER_S / degree
    assert topo.kind == "torus3d" and topo.switches == {}
    assert topo.diameter_hops == 3 * (k // 2)
    assert topo.links["node-node"] == k**3 * degree // 2
    cut = 2 * k**2 if k >= 3 else k**3 // 2
    assert topo.bisection_gb_per_s == pytest.approx(cut * link, rel=1e-12)
    mean = k / 4 if k % 2 == 0 else (k * k - 1) / (4 * k)
    assert topo.avg_hops == pytest.approx(3 * mean * k**3 / (k**3 - 1), rel=1e-12)


def test_tpu_v4_scale_torus() -> None:
    topo = build(cluster(4096, nics=6, topology="torus3d"))
    assert (topo.layout["x"], topo.layout["y"], topo.layout["z"]) == (16, 16, 16)
    assert topo.diameter_hops == 24
    assert topo.bisection_gb_per_s == pytest.approx(512 * NDR_GB_PER_S, rel=1e-12)  # 512 links


def test_xyz_torus_and_shape_errors() -> None:
    topo = build(cluster(4 * 6 * 8, nics=6, topology="torus3d", torus_dims=(4, 6, 8)))
    assert topo.diameter_hops == 2 + 3 + 4
    assert topo.bisection_gb_per_s == pytest.approx(2 * 4 * 6 * NDR_GB_PER_S, rel=1e-12)
    a = topo.node_address(np.array([0, 1, 4, 24, 191]))
    assert a["x"].tolist() == [0, 1, 0, 0, 3] and a["y"].tolist() == [0, 0, 1, 0, 5]
    assert a["z"].tolist() == [0, 0, 0, 1, 7]
    with pytest.raises(SpecError, match="torus_dims"):
        build(cluster(100, topology="torus3d", torus_dims=(4, 4, 4)))
    assert cubic_dims(64) == (4, 4, 4) and cubic_dims(7) == (1, 1, 7) and cubic_dims(96) == (4, 4, 6)


def test_torus_span() -> None:
    topo = build(cluster(512, nics=6, topology="torus3d", torus_dims=(8, 8, 8)))
    link = NDR_GB_PER_S
    line = topo.span(4)  # 4 nodes on a line, no wrap: cut 1 link
    assert line.max_hops == 3 and line.ring_bw_fraction == 1.0
    assert line.a2a_bw_fraction == pytest.approx(1 * link / (4 * 6 * link / 2))
    ring = topo.span(8)  # a whole x ring: wrap links usable
    assert ring.max_hops == 4
    assert ring.a2a_bw_fraction == pytest.approx(2 * link / (8 * 6 * link / 2))
    full = topo.span(512)
    assert full.max_hops == topo.diameter_hops
    assert full.a2a_bw_fraction == pytest.approx(topo.bisection_gb_per_s / (512 * 6 * link / 2))


@pytest.mark.parametrize("k", [4, 8, 16])
def test_dragonfly_plus_max_size(k: int) -> None:
    groups = k * k // 4 + 1
    nodes = groups * k * k // 4
    topo = build(cluster(nodes, ports=k, topology="dragonfly+"))
    assert topo.layout["groups"] == groups and topo.layout["global_links_per_pair"] == 1
    assert topo.switches == {"leaf": groups * k // 2, "spine": groups * k // 2}
    assert topo.links["global"] == groups * (groups - 1) // 2
    assert topo.diameter_hops == 4
    global_cut = (groups // 2) * (groups - groups // 2) * NDR_GB_PER_S
    assert topo.bisection_gb_per_s == pytest.approx(min(nodes * NDR_GB_PER_S / 2, global_cut), rel=1e-12)
    with pytest.raises(SpecError, match="Dragonfly"):
        build(cluster(nodes + 1, ports=k, topology="dragonfly+"))


def test_dragonfly_plus_groups_and_span() -> None:
    topo = build(cluster(64, ports=8, topology="dragonfly+", dragonfly_groups=4))
    assert topo.nodes_per_pod == 16 and topo.layout["global_links_per_pair"] == 5
    a = topo.node_address(np.array([0, 15, 16, 63]))
    assert a["group"].tolist() == [0, 0, 1, 3] and a["leaf"].tolist() == [0, 3, 4, 15]
    s = topo.span(32)
    assert (s.leaves, s.pods, s.max_hops) == (8, 2, 4)
    # worst of: leaf (4 nodes, cross share 28/31, o = 1) and 5 global links for 16 x 16 node pairs
    assert s.a2a_bw_fraction == pytest.approx(min(1.0, 5 * 31 / (16 * 16)))
    assert topo.span(16).max_hops == 3 and topo.span(4).max_hops == 1
    with pytest.raises(SpecError, match="dragonfly_groups"):
        build(cluster(64, ports=8, topology="dragonfly+", dragonfly_groups=2))


def test_single_node_domains() -> None:
    dgx = build(specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 1}))
    assert dgx.kind == "single" and dgx.switch_count == 0 and dgx.gpus == 8
    assert dgx.scale_up.per_gpu_gb_per_s == 450 and dgx.scale_up.per_pair_gb_per_s == 450
    assert dgx.bisection_gb_per_s == pytest.approx(4 * 450) and dgx.diameter_hops == 1
    assert dgx.span(1).max_hops == 0
    mesh_node = {"gpu": "h100-sxm", "gpus": 8, "scale_up": {"kind": "infinity-fabric", "gb_per_s": 448}}
    mesh = build(specs.load(specs.ClusterSpec, {"node": mesh_node, "nodes": 1}))
    assert mesh.scale_up.per_pair_gb_per_s == pytest.approx(64.0)
    assert mesh.bisection_gb_per_s == pytest.approx(16 * 64.0) and mesh.diameter_hops == 0
    pcie_node = {"gpu": "h100-sxm", "gpus": 4, "scale_up": {"kind": "pcie", "gb_per_s": 0}}
    pcie = build(specs.load(specs.ClusterSpec, {"node": pcie_node, "nodes": 1}))
    gen = pcie.scale_up.per_gpu_gb_per_s
    assert gen == pytest.approx(pcie_x16_gb_per_s(catalog.get("gpu", "h100-sxm").pcie_gen))
    assert pcie_x16_gb_per_s(4) == pytest.approx(31.5, rel=1e-3)
    assert pcie_x16_gb_per_s(5) == pytest.approx(63.0, rel=1e-3)
