"""Cooling choice, PUE, facility power and annual energy.

Cooling is recommended from the densest compute rack (kW/rack):
``<= AIR_MAINSTREAM_MAX_KW_PER_RACK`` (15 kW) air; ``<= AIR_RDHX_MAX_KW_PER_RACK`` (40 kW) air with
rear-door heat exchangers (``air+rdhx``); above that direct-to-chip ``liquid``. A node that requires
liquid (``node.cooling == "liquid"``, e.g. GB200 NVL72) forces liquid. Sources in
:mod:`clustertwin.facility.assumptions`.

Energy: ``facility_kw = it_kw x PUE``; ``annual_mwh = facility_kw x utilization x 8760 h / 1000``;
``annual_energy_usd = annual_mwh x 1000 x usd_per_kwh``; ``annual_co2_t = annual_mwh x carbon_kg_per_kwh``
(MWh x kg/kWh = t).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.facility.assumptions import (
    AIR_MAINSTREAM_MAX_KW_PER_RACK,
    AIR_RDHX_MAX_KW_PER_RACK,
    PUE_AIR,
    PUE_AIR_RDHX,
    PUE_LIQUID,
)
from clustertwin.specs import ClusterSpec
from clustertwin.units import YEAR_H

KWH_PER_MWH = 1000.0

DEFAULT_PUE: dict[str, float] = {"air": PUE_AIR, "air+rdhx": PUE_AIR_RDHX, "liquid": PUE_LIQUID}
"""Default PUE by cooling (see assumptions)."""


@dataclass(frozen=True)
class CoolingChoice:
    """Recommended and applied cooling, and the PUE that follows."""

    recommended: str
    """air, air+rdhx or liquid."""
    applied: str
    """The cooling the plan uses: facility.cooling, or the recommendation when that is ``auto``."""
    reason: str
    pue: float
    pue_source: str
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "recommended": self.recommended,
            "applied": self.applied,
            "reason": self.reason,
            "pue": self.pue,
            "pue_source": self.pue_source,
            "warnings": list(self.warnings),
        }


def recommend_cooling(
    kw_per_rack: float,
    node_cooling: str = "any",
    *,
    air_max_kw: float = AIR_MAINSTREAM_MAX_KW_PER_RACK,
    rdhx_max_kw: float = AIR_RDHX_MAX_KW_PER_RACK,
) -> tuple[str, str]:
    """(cooling, reason) for a rack of ``kw_per_rack`` kW holding nodes that need ``node_cooling``."""
    if node_cooling == "liquid":
        return "liquid", "the node requires liquid cooling"
    if kw_per_rack > rdhx_max_kw:
        return "liquid", f"{kw_per_rack:.1f} kW/rack > {rdhx_max_kw:g} kW air+rear-door limit"
    if kw_per_rack > air_max_kw:
        return "air+rdhx", f"{air_max_kw:g} < {kw_per_rack:.1f} kW/rack <= {rdhx_max_kw:g} kW"
    return "air", f"{kw_per_rack:.1f} kW/rack <= {air_max_kw:g} kW mainstream air limit"


def choose_cooling(cluster: ClusterSpec, kw_per_rack: float) -> CoolingChoice:
    """Cooling for ``cluster`` whose densest compute rack draws ``kw_per_rack`` kW, and its PUE."""
    recommended, reason = recommend_cooling(kw_per_rack, cluster.node.cooling)
    fac = cluster.facility
    warnings: list[str] = []
    if fac.cooling == "auto":
        applied = recommended
    else:
        applied = fac.cooling
        if fac.cooling == "air" and recommended != "air":
            need = "rear-door heat exchangers" if recommended == "air+rdhx" else "liquid cooling"
            warnings.append(f"facility.cooling is air but {reason}: {need} recommended")
    if fac.pue is not None:
        pue, pue_source = fac.pue, "facility.pue"
    else:
        pue, pue_source = DEFAULT_PUE[applied], f"{applied} default, estimate"
    return CoolingChoice(recommended, applied, reason, pue, pue_source, tuple(warnings))


@dataclass(frozen=True)
class Energy:
    """Facility power and a year's energy, cost and carbon."""

    it_kw: float
    pue: float
    facility_kw: float
    utilization: float
    annual_mwh: float
    annual_energy_usd: float
    annual_co2_t: float
    usd_per_kwh: float

    def to_dict(self) -> dict[str, float]:
        return {
            "it_kw": self.it_kw,
            "pue": self.pue,
            "facility_kw": self.facility_kw,
            "utilization": self.utilization,
            "annual_mwh": self.annual_mwh,
            "annual_energy_usd": self.annual_energy_usd,
            "annual_co2_t": self.annual_co2_t,
            "usd_per_kwh": self.usd_per_kwh,
        }


def annual_energy(cluster: ClusterSpec, it_kw: float, pue: float) -> Energy:
    """Facility power, annual energy, cost and carbon (formulas in the module docstring)."""
    fac = cluster.facility
    facility_kw = it_kw * pue
    annual_mwh = facility_kw * fac.utilization * YEAR_H / KWH_PER_MWH
    return Energy(
        it_kw=it_kw,
        pue=pue,
        facility_kw=facility_kw,
        utilization=fac.utilization,
        annual_mwh=annual_mwh,
        annual_energy_usd=annual_mwh * KWH_PER_MWH * fac.usd_per_kwh,
        annual_co2_t=annual_mwh * fac.carbon_kg_per_kwh,
        usd_per_kwh=fac.usd_per_kwh,
    )
