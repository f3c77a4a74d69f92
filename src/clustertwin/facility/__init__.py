"""Facility: IT power, racks, cooling choice, PUE, energy, capex and TCO of a cluster.

:func:`assess` takes a cluster spec and the network's countable parts (:class:`NetworkInventory`, built
from a topology by :func:`clustertwin.plan.inventory`, or given explicitly) and returns a
:class:`FacilityReport`. Each step is a pure function of its inputs with a documented formula:
:mod:`~clustertwin.facility.power`, :mod:`~clustertwin.facility.racks`,
:mod:`~clustertwin.facility.cooling`, :mod:`~clustertwin.facility.cost`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustertwin.facility.cooling import (
    CoolingChoice,
    Energy,
    annual_energy,
    choose_cooling,
    recommend_cooling,
)
from clustertwin.facility.cost import TCO, Capex, CapexItem, capex, tco
from clustertwin.facility.power import ITPower, NetworkInventory, it_power, transceiver_power_w
from clustertwin.facility.racks import RackLayout, rack_layout
from clustertwin.specs import ClusterSpec

__all__ = [
    "TCO",
    "Capex",
    "CapexItem",
    "CoolingChoice",
    "Energy",
    "FacilityReport",
    "ITPower",
    "NetworkInventory",
    "RackLayout",
    "annual_energy",
    "assess",
    "capex",
    "choose_cooling",
    "it_power",
    "rack_layout",
    "recommend_cooling",
    "tco",
    "transceiver_power_w",
]


@dataclass(frozen=True)
class FacilityReport:
    """Power, racks, cooling, energy and cost of one cluster."""

    power: ITPower
    racks: RackLayout
    cooling: CoolingChoice
    energy: Energy
    capex: Capex
    tco: TCO

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.racks.warnings + self.cooling.warnings

    @property
    def breakdown(self) -> dict[str, Any]:
        """What each figure is made of (power components, rack limits)."""
        return {"power": dict(self.power.breakdown), "racks": dict(self.racks.breakdown),
                "tco": dict(self.tco.breakdown)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "power": self.power.to_dict(),
            "racks": self.racks.to_dict(),
            "cooling": self.cooling.to_dict(),
            "energy": self.energy.to_dict(),
            "capex": self.capex.to_dict(),
            "tco": self.tco.to_dict(),
            "warnings": list(self.warnings),
        }


def assess(cluster: ClusterSpec, net: NetworkInventory) -> FacilityReport:
    """Facility report: IT power -> racks -> cooling and PUE -> energy -> capex -> TCO."""
    power = it_power(cluster, net)
    racks = rack_layout(cluster, power, net)
    cooling = choose_cooling(cluster, racks.kw_per_compute_rack)
    energy = annual_energy(cluster, power.total_kw, cooling.pue)
    cost = capex(cluster, net, power.total_kw)
    yearly = tco(cost, energy.annual_energy_usd, cluster.total_gpus)
    return FacilityReport(power, racks, cooling, energy, cost, yearly)
