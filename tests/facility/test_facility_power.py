"""Facility: IT power against the DGX H100 reference, optics power, racks by power and by space."""

from __future__ import annotations

import pytest

from clustertwin import catalog, specs
from clustertwin.errors import SpecError
from clustertwin.facility import NetworkInventory, assess, it_power, rack_layout, transceiver_power_w

# DGX H100 maximum system power (NVIDIA DGX H100 User Guide) and the DGX SuperPOD H100 network for
# 4 scalable units (RA Table 4: 32 leaf + 16 spine Quantum-2 QM9700 switches).
DGX_H100_KW = 10.2
SUPERPOD_4SU_SWITCHES = 32 + 16
QM9700_KW = 1.72


def _ref_inventory() -> NetworkInventory:
    # 1,024 node-leaf + 1,024 leaf-spine links, optical at both ends
    return NetworkInventory(
        switches={"leaf": 32, "spine": 16},
        switch=catalog.get("switch", "quantum-2"),
        cables=2048,
        transceivers=4096,
        node_transceivers=1024,
        port_gbit_per_s=400,
    )


def _cluster(**over) -> specs.ClusterSpec:
    data = {"node": "dgx-h100", "nodes": 4, "storage": {"read_gb_per_s": 100, "capacity_pb": 1, "power_kw_per_pb": 5}}
    data.update(over)
    return specs.load(specs.ClusterSpec, data)


def _no_network() -> NetworkInventory:
    return NetworkInventory({}, None, 0, 0, 0, 400)


def test_reference_it_power_within_15pct_of_dgx_plus_network():
    c = catalog.get("cluster", "ref-1k-h100")
    p = it_power(c, _ref_inventory())
    expected_kw = 128 * DGX_H100_KW + SUPERPOD_4SU_SWITCHES * QM9700_KW
    assert abs(p.total_kw - expected_kw) / expected_kw < 0.15
    assert p.nodes_kw == pytest.approx(128 * DGX_H100_KW)
    assert p.switches_kw == pytest.approx(48 * 1.72)
    # 3,072 switch-side 400G port ends at 8.5 W (17 W per twin-port OSFP)
    assert p.transceivers_kw == pytest.approx(3072 * 8.5 / 1000)
    assert p.total_kw == pytest.approx(p.nodes_kw + p.switches_kw + p.transceivers_kw + p.storage_kw)


def test_nic_power_is_reported_inside_node_power_not_added():
    c = _cluster()
    p = it_power(c, _no_network())
    assert p.nics_kw_within_nodes == pytest.approx(4 * 8 * c.fabric.nic_power_w / 1000)
    assert p.total_kw == pytest.approx(4 * DGX_H100_KW + 5.0)


def test_node_without_vendor_power_uses_gpu_tdp_estimate():
    c = _cluster(node={"preset": "dgx-h100", "power_kw": None})
    p = it_power(c, _no_network())
    assert p.node_kw == pytest.approx(8 * 700 / 0.65 / 1000)
    assert "estimate" in p.breakdown["nodes"]


@pytest.mark.parametrize(("gbit", "watts"), [(400, 8.5), (800, 17.0), (200, 4.25), (1, 1.0), (10, 1.0)])
def test_transceiver_power_scales_with_rate_with_a_floor(gbit, watts):
    assert transceiver_power_w(gbit) == pytest.approx(watts)


def test_transceiver_power_rejects_nonpositive_rate():
    with pytest.raises(SpecError):
        transceiver_power_w(0)


@pytest.mark.parametrize(
    ("kw_limit", "per_rack", "limited_by", "racks"),
    [(100, 5, "space", 26), (40, 3, "power", 43), (25, 2, "power", 64)],
)
def test_nodes_per_rack_is_min_of_power_and_space(kw_limit, per_rack, limited_by, racks):
    c = _cluster(nodes=128, facility={"rack_kw_limit": kw_limit})
    p = it_power(c, _no_network())
    r = rack_layout(c, p, _no_network())
    assert (r.nodes_per_rack, r.limited_by, r.compute_racks) == (per_rack, limited_by, racks)
    assert r.kw_per_compute_rack == pytest.approx(per_rack * DGX_H100_KW)
    assert r.warnings == ()


def test_rack_scale_node_gets_its_own_rack():
    c = _cluster(node={"preset": "dgx-h100", "rack_units": 48, "power_kw": 120, "gpus": 72},
                 nodes=8, facility={"rack_kw_limit": 130})
    r = rack_layout(c, it_power(c, _no_network()), _no_network())
    assert (r.nodes_per_rack, r.compute_racks, r.limited_by) == (1, 8, "rack-scale node")
    assert r.kw_per_compute_rack == pytest.approx(120)


def test_node_over_rack_limit_warns_and_takes_a_rack():
    c = _cluster(node={"preset": "dgx-h100", "power_kw": 120}, nodes=3, facility={"rack_kw_limit": 40})
    r = rack_layout(c, it_power(c, _no_network()), _no_network())
    assert r.nodes_per_rack == 1 and r.compute_racks == 3
    assert any("rack_kw_limit" in w for w in r.warnings)


def test_network_and_storage_racks_by_space_and_power():
    c = catalog.get("cluster", "ref-1k-h100")
    net = _ref_inventory()
    r = rack_layout(c, it_power(c, net), net)
    # 48 x 1U switches in 42U racks -> 2; 10 PB x 4 U/PB = 40 U -> 1
    assert (r.network_racks, r.storage_racks) == (2, 1)
    assert r.total_racks == r.compute_racks + 3


def test_partial_rack_when_fewer_nodes_than_a_rack_holds():
    c = _cluster(nodes=1, facility={"rack_kw_limit": 100})
    r = rack_layout(c, it_power(c, _no_network()), _no_network())
    assert r.nodes_per_rack == 1 and r.compute_racks == 1
    assert r.kw_per_compute_rack == pytest.approx(DGX_H100_KW)


@pytest.mark.parametrize(
    "bad",
    [
        {"switches": {"leaf": -1}},
        {"cables": -3},
        {"transceivers": 4, "node_transceivers": 8},
        {"port_gbit_per_s": 0},
        {"switch": None},
    ],
)
def test_inventory_rejects_bad_counts(bad):
    args = {"switches": {"leaf": 2}, "switch": catalog.get("switch", "quantum-2"), "cables": 8,
            "transceivers": 16, "node_transceivers": 8, "port_gbit_per_s": 400}
    args.update(bad)
    with pytest.raises(SpecError):
        NetworkInventory(**args)


def test_assess_chains_power_racks_cooling_energy_cost():
    c = catalog.get("cluster", "ref-1k-h100")
    rep = assess(c, _ref_inventory())
    assert rep.energy.it_kw == pytest.approx(rep.power.total_kw)
    assert rep.energy.facility_kw == pytest.approx(rep.power.total_kw * 1.15)
    assert rep.cooling.applied == "liquid"  # 5 DGX (51 kW) per 100 kW rack
    d = rep.to_dict()
    assert d["power"]["it_kw"] == pytest.approx(rep.power.total_kw)
    assert set(d) == {"power", "racks", "cooling", "energy", "capex", "tco", "warnings"}
