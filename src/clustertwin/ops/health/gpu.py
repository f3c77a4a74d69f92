"""What a node check knows about one GPU, whichever source (NVML or ``nvidia-smi -q``) it came from,
and the mapping of a reported product name to a catalog GPU id."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

THROTTLE_REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
"""NVML clocks-event (throttle) reason bits (``nvmlClocksEventReason*``)."""
HARMLESS_THROTTLE = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting", "sync_boost"})
"""Reasons that do not indicate a power or thermal problem."""


def throttle_names(mask: int) -> list[str]:
    """Active reason names of an NVML clocks-event bitmask."""
    return [name for name, bit in THROTTLE_REASON_BITS.items() if mask & bit]


@dataclass
class GpuInfo:
    """One GPU's identity, link, memory-health, clock, thermal and power state. None = not reported."""

    index: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: float | None = None
    memory_used_bytes: float | None = None
    memory_free_bytes: float | None = None
    """Free framebuffer memory as the driver reports it (total - used - reserved)."""
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    """Maximum generation of the link (min of GPU and host capability where both are reported)."""
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_count: int | None = None
    ecc_enabled: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    nvlink_active: list[bool] = field(default_factory=list)
    """State of each NVLink the GPU reports (True = active)."""
    pcie_tx_bytes_per_s: float | None = None
    """PCIe transmit throughput over NVML's 20 ms sample window."""
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes: float | None = None
    """NVLink data transmitted since driver load (all links), bytes; a counter."""
    nvlink_rx_bytes: float | None = None
    energy_j: float | None = None
    """Energy since driver load, J; a counter."""
    persistence_mode: bool | None = None
    """Persistence mode enabled (the driver stays loaded with no client; needed for fast job starts)."""
    mig_current: bool | None = None
    """MIG mode now."""
    mig_pending: bool | None = None
    """MIG mode after the next GPU reset."""
    reset_required: bool | None = None
    """GPU Reset Status > Reset Required: the GPU is unusable until it is reset."""
    drain_and_reset_recommended: bool | None = None
    """GPU Reset Status > Drain and Reset Recommended: it works, degraded, until drained and reset."""
    fabric_state: str | None = None
    """NVLink fabric (NVSwitch/NVL) registration: Not Supported, Not Started, In Progress, Completed."""
    fabric_status: str | None = None
    """Result of the registration (Success or an error)."""
    fabric_bandwidth: str | None = None
    """Fabric > Health > Bandwidth: Full, Degraded, N/A (R570+)."""


# Ordered: the first pattern that matches the lower-cased product name wins (specific before generic).
_NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"gb200", "gb200"),
    (r"b200", "b200"),
    (r"h200", "h200-sxm"),
    (r"h800", "h800-sxm"),
    (r"h100.*pcie|h100 pcie", "h100-pcie"),
    (r"h100", "h100-sxm"),
    (r"\bh20\b", "h20"),
    (r"a100.*80\s*gb", "a100-sxm-80gb"),
    (r"a100", "a100-sxm-40gb"),
    (r"l40s", "l40s"),
    (r"v100", "v100-sxm2-32gb"),
    (r"k80", "k80"),
    (r"mi325x", "mi325x"),
    (r"mi300x", "mi300x"),
    (r"mi250x", "mi250x"),
)


def catalog_gpu_id(product_name: str) -> str | None:
    """Catalog id for a driver-reported product name (``NVIDIA H100 80GB HBM3`` -> ``h100-sxm``), or None."""
    low = product_name.lower()
    for pattern, gpu_id in _NAME_PATTERNS:
        if re.search(pattern, low):
            return gpu_id
    return None
