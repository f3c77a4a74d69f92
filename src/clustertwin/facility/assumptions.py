"""Named facility assumptions: cooling thresholds, PUE defaults, optics power, cost lifetimes.

Every figure has a source or says that it is an estimate. Functions in :mod:`clustertwin.facility`
take these as keyword defaults so that a caller can override any of them.
"""

from __future__ import annotations

# --- cooling thresholds (kW per rack) -------------------------------------------------------------

AIR_MAINSTREAM_MAX_KW_PER_RACK = 15.0
"""Upper end of what mainstream air-cooled data halls handle, kW/rack (secondary data-centre
industry surveys: "mainstream data centres 10-15 kW/rack; traditional 5-15 kW"; estimate)."""

AIR_RDHX_MAX_KW_PER_RACK = 40.0
"""Upper end of air cooling assisted by rear-door heat exchangers, kW/rack. Sources: air with perfect
containment tops out near 41 kW/rack (aidatacenterguide.com ch. 5.3); passive RDHx ~10-35 kW, active
~40-75 kW (yobitel RDHx note, HPE Motivair door QuickSpecs 14-75 kW). 40 kW is the conservative bound
beyond which direct-to-chip liquid cooling is recommended."""

# --- PUE defaults -----------------------------------------------------------------------------------

PUE_AIR = 1.4
"""Default PUE of an air-cooled hall (FacilitySpec docs; the Uptime 2023 global average is 1.58,
a modern air-cooled hall does better; estimate)."""

PUE_AIR_RDHX = 1.4
"""Default PUE with rear-door heat exchangers: the air default (the chillers still serve the doors;
estimate)."""

PUE_LIQUID = 1.15
"""Default PUE of a direct-liquid-cooled hall (FacilitySpec docs; liquid-cooled AI target < 1.25 and
Germany's EnEfG <= 1.2 for new sites, Energieeffizienzgesetz 2023 section 11)."""

# --- network optics ---------------------------------------------------------------------------------

TRANSCEIVER_W_PER_GBIT = 17.0 / 800.0
"""Optical transceiver power per Gbit/s of port rate, W: NVIDIA twin-port 2x400G OSFP (MMS4X00-NS) is
17 W maximum for 800 Gbit/s (NVIDIA MMS4X00-NS specifications), i.e. 8.5 W per 400G port end. Other
rates are scaled linearly (estimate)."""

TRANSCEIVER_MIN_W = 1.0
"""Floor on one transceiver's power, W: SFP/SFP+ optics for 1-10 GbE draw about 1 W (SFF-8431 power
class; estimate)."""

# --- cost -------------------------------------------------------------------------------------------

STORAGE_USD_PER_PB = 250_000.0
"""Capex of shared storage per usable PB when the storage spec names no price, USD (estimate: all-flash
parallel file systems sell for roughly $150-400 per usable TB in 2024-25 quotes; the midpoint-low value).
Used with confidence ``estimate``."""

CABLE_USD = 200.0
"""Price of one fibre or copper cable between two ports, USD (estimate: MPO-12 single-mode patch
cables and DAC cables list at roughly $100-400 for data-hall lengths)."""

HARDWARE_LIFETIME_YEARS = 4.0
"""Straight-line depreciation of servers, network and storage, years (estimate: GPU servers are
typically depreciated over 4-6 years; 4 reflects the pace of accelerator generations)."""

FACILITY_LIFETIME_YEARS = 15.0
"""Depreciation of the facility build-out (power and cooling plant), years (estimate: mechanical and
electrical plant is typically depreciated over 15-20 years)."""

SUPPORT_FRACTION_PER_YEAR = 0.20
"""Hardware support contract per year as a fraction of the server price (public DGX H100
price reports: "~$199k list + ~20%/yr support"; estimate)."""

STORAGE_GB_PER_S_PER_GPU_GUIDANCE = 1.0
"""Shared-storage read/write bandwidth per GPU below which training input/checkpoints may stall, GB/s
(DDN: "usual minimum requirement is 1 GB/s per GPU for both read and write", hardware_catalog storage)."""
