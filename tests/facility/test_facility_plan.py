"""Facility through ``plan()`` on edge designs: reference, rack-scale NVL72, a switchless torus, one
node with no scale-up, and a slow Ethernet fabric."""

from __future__ import annotations

import pytest

from clustertwin import catalog, specs
from clustertwin.plan import inventory, plan
from clustertwin.topology import build

DGX_H100_KW = 10.2
REFERENCE_NETWORK_KW = 48 * 1.72 + 3072 * 8.5 / 1000  # SuperPOD 4 SU switches + switch-side optics


def _load(data: dict) -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, data)


def test_reference_plan_it_power_and_network_parts():
    p = plan(catalog.get("cluster", "ref-1k-h100"))
    f = p.facility
    expected = 128 * DGX_H100_KW + REFERENCE_NETWORK_KW
    assert abs(f.power.total_kw - expected) / expected < 0.15
    assert f.power.nodes_kw == pytest.approx(128 * DGX_H100_KW)
    assert f.power.network_kw == pytest.approx(REFERENCE_NETWORK_KW, rel=0.05)
    assert p.network.switch_count == 48
    assert f.tco.usd_per_gpu_hour > 0
    assert p.compute.peak("fp64").total_pflops == pytest.approx(1024 * 33.5 / 1000)


def test_rail_optimised_node_links_are_node_side_optics():
    c = catalog.get("cluster", "ref-1k-h100")
    net = inventory(c, build(c))
    # 1,024 node-leaf + 1,024 leaf-spine optical links: one module per link end
    assert net.transceivers == 4096
    assert net.node_transceivers == 1024 and net.switch_transceivers == 3072


def test_nvl72_rack_scale_node_is_liquid_one_per_rack():
    c = _load({"node": "gb200-nvl72", "nodes": 1, "network": {"fabric": "ib-ndr", "topology": "single"},
               "facility": {"rack_kw_limit": 130}})
    f = plan(c).facility
    assert f.racks.nodes_per_rack == 1 and f.racks.compute_racks == 1
    assert f.cooling.recommended == "liquid"
    assert f.power.node_kw == pytest.approx(120.0)


def test_nvl72_over_default_rack_limit_warns():
    c = _load({"node": "gb200-nvl72", "nodes": 1, "network": {"fabric": "ib-ndr", "topology": "single"}})
    p = plan(c)
    assert any("rack_kw_limit" in w for w in p.warnings)


def test_torus_has_no_switch_power_and_node_side_optics_only():
    c = _load({"node": "dgx-h100", "nodes": 64, "network": {"fabric": "ib-ndr", "topology": "torus3d"}})
    p = plan(c)
    assert p.network.switch_count == 0
    assert p.facility.power.switches_kw == 0 and p.facility.power.transceivers_kw == 0
    assert p.facility.power.total_kw == pytest.approx(64 * DGX_H100_KW + p.facility.power.storage_kw)
    assert p.facility.capex.usd("switches") == 0.0


def test_single_k80_node_without_scale_up_plans_on_air():
    c = _load({"node": "k80-4", "nodes": 1, "network": {"fabric": "eth-10g", "topology": "single"},
               "storage": {"preset": "nfs"}, "facility": {"cooling": "auto"}})
    p = plan(c)
    assert p.network.switch_count == 0
    assert p.facility.cooling.applied == "air"
    assert p.facility.cooling.pue == pytest.approx(1.4)
    assert p.compute.peak("fp8").per_gpu_tflops is None  # K80 has no FP8
    assert p.facility.racks.kw_per_compute_rack < 15.0


def test_512_gpus_on_1gbe_injection_and_cost():
    c = _load({"node": {"preset": "dgx-a100-80gb", "nics": {"count": 1, "gbit_per_s": 1}}, "nodes": 64,
               "network": {"fabric": "eth-1g", "topology": "fat-tree"}, "facility": {"rack_kw_limit": 15}})
    p = plan(c)
    assert p.network.injection_gb_per_s_per_gpu == pytest.approx(0.125 / 8)
    assert p.facility.racks.nodes_per_rack == 2 and p.facility.racks.limited_by == "power"
    assert p.facility.cooling.recommended == "air"
