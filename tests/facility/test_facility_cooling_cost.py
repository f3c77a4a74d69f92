"""Facility: cooling thresholds, PUE defaults, energy, capex by component and TCO."""

from __future__ import annotations

import pytest

from clustertwin import catalog, specs
from clustertwin.errors import SpecError
from clustertwin.facility import (
    NetworkInventory,
    annual_energy,
    capex,
    choose_cooling,
    recommend_cooling,
    tco,
)
from clustertwin.facility.assumptions import PUE_AIR, PUE_LIQUID


def _cluster(**over) -> specs.ClusterSpec:
    data = {"node": "dgx-h100", "nodes": 4}
    data.update(over)
    return specs.load(specs.ClusterSpec, data)


@pytest.mark.parametrize(
    ("kw", "node_cooling", "expected"),
    [
        (10.2, "any", "air"),
        (15.0, "any", "air"),
        (20.4, "air", "air+rdhx"),
        (40.0, "any", "air+rdhx"),
        (51.0, "air", "liquid"),
        (5.0, "liquid", "liquid"),
        (120.0, "liquid", "liquid"),
    ],
)
def test_cooling_thresholds(kw, node_cooling, expected):
    choice, reason = recommend_cooling(kw, node_cooling)
    assert choice == expected
    assert reason


def test_auto_cooling_takes_recommendation_and_its_default_pue():
    air = choose_cooling(_cluster(facility={"cooling": "auto"}), 10.2)
    assert (air.applied, air.pue) == ("air", PUE_AIR)
    liquid = choose_cooling(_cluster(facility={"cooling": "auto"}), 60.0)
    assert (liquid.applied, liquid.pue) == ("liquid", PUE_LIQUID)
    assert "default" in liquid.pue_source


def test_declared_pue_wins_and_declared_air_against_density_warns():
    c = _cluster(facility={"cooling": "air", "pue": 1.3})
    choice = choose_cooling(c, 51.0)
    assert choice.applied == "air" and choice.recommended == "liquid"
    assert choice.pue == 1.3 and choice.pue_source == "facility.pue"
    assert len(choice.warnings) == 1 and "liquid" in choice.warnings[0]


def test_liquid_node_forces_liquid_even_at_low_density():
    c = _cluster(node={"preset": "dgx-h100", "cooling": "liquid"})
    assert choose_cooling(c, 10.2).recommended == "liquid"


def test_annual_energy_cost_and_carbon_by_hand():
    c = _cluster(facility={"utilization": 0.5, "usd_per_kwh": 0.1, "carbon_kg_per_kwh": 0.4})
    e = annual_energy(c, it_kw=1000.0, pue=1.2)
    assert e.facility_kw == pytest.approx(1200.0)
    assert e.annual_mwh == pytest.approx(1200 * 0.5 * 8760 / 1000)  # 5,256 MWh
    assert e.annual_energy_usd == pytest.approx(525_600.0)
    assert e.annual_co2_t == pytest.approx(2102.4)


def _net(switches: int = 2, price: float | None = 30000.0) -> NetworkInventory:
    sw = catalog.get("switch", "quantum-2").model_copy(update={"price_usd": price})
    return NetworkInventory({"leaf": switches} if switches else {}, sw if switches else None,
                            cables=10, transceivers=20, node_transceivers=10, port_gbit_per_s=400)


def test_capex_from_node_price_includes_nics():
    c = _cluster()
    cost = capex(c, _net(), it_kw=50.0)
    assert cost.usd("compute") == pytest.approx(4 * 199_000)
    assert cost.usd("nics") == 0.0
    assert cost.usd("switches") == pytest.approx(2 * 30_000)
    assert cost.usd("cables") == pytest.approx(10 * 200)
    assert cost.usd("facility") == pytest.approx(50.0 * c.facility.usd_per_kw_capex)
    assert all(i.source for i in cost.items)
    priced = [i.usd for i in cost.items if i.usd is not None]
    assert cost.total_usd == pytest.approx(sum(priced))


def test_capex_without_node_price_falls_back_to_gpu_price_and_prices_nics():
    c = _cluster(node={"preset": "dgx-h100", "price_usd": None},
                 network={"fabric": {"preset": "ib-ndr", "nic_usd": 1500.0}})
    cost = capex(c, _net(), it_kw=50.0)
    assert cost.usd("compute") == pytest.approx(32 * c.node.gpu.price_usd)
    assert "lower bound" in next(i.basis for i in cost.items if i.component == "compute")
    assert cost.usd("nics") == pytest.approx(32 * 1500.0)


def test_missing_price_makes_capex_incomplete_not_zero():
    cost = capex(_cluster(), _net(price=None), it_kw=50.0)
    assert cost.usd("switches") is None
    assert not cost.complete and "switches" in cost.missing


def test_no_switches_cost_nothing():
    cost = capex(_cluster(), _net(switches=0), it_kw=50.0)
    assert cost.usd("switches") == 0.0


def test_tco_and_usd_per_gpu_hour_by_hand():
    cost = capex(_cluster(), _net(), it_kw=50.0)
    t = tco(cost, energy_usd_per_year=100_000.0, gpus=32, hardware_lifetime_years=4,
            facility_lifetime_years=10, support_fraction_per_year=0.2)
    hardware = cost.total_usd - cost.usd("facility")
    assert t.hardware_depreciation_usd_per_year == pytest.approx(hardware / 4)
    assert t.facility_depreciation_usd_per_year == pytest.approx(cost.usd("facility") / 10)
    assert t.support_usd_per_year == pytest.approx(0.2 * 4 * 199_000)
    expected = hardware / 4 + cost.usd("facility") / 10 + 0.2 * 4 * 199_000 + 100_000
    assert t.total_usd_per_year == pytest.approx(expected)
    assert t.usd_per_gpu_hour == pytest.approx(expected / (32 * 8760))


@pytest.mark.parametrize("kw", [{"gpus": 0}, {"hardware_lifetime_years": 0}, {"energy_usd_per_year": -1.0}])
def test_tco_rejects_bad_input(kw):
    args = {"energy_usd_per_year": 1.0, "gpus": 8}
    args.update(kw)
    cost = capex(_cluster(), _net(), it_kw=1.0)
    with pytest.raises(SpecError):
        tco(cost, **args)
