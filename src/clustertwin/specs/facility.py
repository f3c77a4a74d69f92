"""Facility: racks, cooling, PUE and energy price."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from clustertwin.specs.base import NonNegFloat, PositiveFloat, Spec


class FacilitySpec(Spec):
    """Data-centre assumptions."""

    cooling: Literal["air", "liquid", "auto"] = "auto"
    """Cooling: air, liquid (direct-to-chip), auto (chosen from kW per rack)."""
    pue: Annotated[float, Field(ge=1.0, le=3.0)] | None = None
    """Power usage effectiveness; defaults by cooling (air 1.4, liquid 1.15; Uptime 2023 average 1.58)."""
    rack_kw_limit: PositiveFloat = 40.0
    """Power a rack may draw, kW (air racks 10-15 kW mainstream, AI racks 40-80 kW, NVL72 ~120 kW)."""
    rack_units: Annotated[int, Field(ge=10, le=60)] = 42
    """Usable rack height, U."""
    usd_per_kwh: NonNegFloat = 0.08
    """Electricity price, USD/kWh."""
    utilization: Annotated[float, Field(gt=0, le=1)] = 0.8
    """Average IT load as a fraction of maximum power, for annual energy."""
    usd_per_kw_capex: NonNegFloat = 10000.0
    """Facility build-out cost per kW of IT capacity, USD (estimate)."""
    carbon_kg_per_kwh: NonNegFloat = 0.4
    """Grid carbon intensity, kg CO2e/kWh."""
