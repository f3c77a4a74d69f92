"""Prometheus alerting rules over the exporter's metrics (``clustertwin exporter --rules FILE``).

Hardware faults alert on their level, not only on a rise: a GPU that already has uncorrectable ECC errors,
a pending or failed row remap, or a critical Xid when the exporter starts (or when Prometheus first scrapes
it) fires at once; ``increase()`` alone would stay silent, because a counter first seen at a non-zero value
has no increase. Volatile ECC counters and the Xid state reset with the GPU (or the exporter), so the alerts
clear after the repair. ``promtool check rules`` and ``promtool test rules`` run over this file in CI.
"""

from __future__ import annotations

from typing import Any

import yaml

from clustertwin.ops.health.gpu import THROTTLE_REASON_BITS

XID_METRIC = "clustertwin_xid_events_total"
XID_LAST_METRIC = "DCGM_FI_DEV_XID_ERRORS"
NVLINK_DOWN_METRIC = "clustertwin_nvlink_links_down"
GPU_COUNT_METRIC = "clustertwin_gpus"
CRITICAL_XIDS = "48|62|64|74|79|95|119|120|140|158"
"""Xids whose NVIDIA action is reset/drain/RMA (see ops/health/xid.py)."""
TEMP_ALERT_C = 85
NEW_WINDOW = "10m"
"""Window in which a counter series that appeared (or rose) counts as new."""


def _new(metric: str, selector: str = "") -> str:
    """A counter that rose within the window, or a series that appeared with a non-zero value."""
    m = f"{metric}{selector}"
    return f"(increase({m}[{NEW_WINDOW}]) > 0) or ({m} > 0 unless {m} offset {NEW_WINDOW})"


def alert_rules() -> dict[str, Any]:
    """The ``groups`` document."""
    def rule(name: str, expr: str, for_: str, severity: str, summary: str) -> dict[str, Any]:
        return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
                "annotations": {"summary": summary}}

    on = "GPU {{ $labels.gpu }} of {{ $labels.Hostname }}"
    return {"groups": [{"name": "clustertwin-gpu", "rules": [
        rule("GpuXidCritical", f'{XID_METRIC}{{xid=~"{CRITICAL_XIDS}"}} > 0', "0m", "critical",
             f"{on} raised Xid {{{{ $labels.xid }}}} (job {{{{ $labels.hpc_job }}}}): drain the node"),
        rule("GpuXidNew", _new(XID_METRIC), "0m", "warning", f"{on} raised Xid {{{{ $labels.xid }}}}"),
        rule("GpuLastXidCritical", " or ".join(f"{XID_LAST_METRIC} == {x}" for x in CRITICAL_XIDS.split("|")),
             "0m", "critical",
             f"{on}: last Xid {{{{ $value }}}} needs a reset or RMA"),
        rule("GpuUncorrectableEcc", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0", "0m", "critical",
             f"{on} has {{{{ $value }}}} uncorrectable ECC errors since its last reset: drain and reset it"),
        rule("GpuUncorrectableEccNew", _new("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), "0m", "critical",
             f"new uncorrectable ECC errors on {on} (job {{{{ $labels.hpc_job }}}}{{{{ $labels.pod }}}})"),
        rule("GpuRowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", "0m", "critical",
             f"row remapping failed on {on}: RMA"),
        rule("GpuRowRemapPending", "DCGM_FI_DEV_ROW_REMAP_PENDING > 0", "15m", "warning",
             f"{on} needs a reset to apply a row remap"),
        rule("GpuHot", f"DCGM_FI_DEV_GPU_TEMP > {TEMP_ALERT_C}", "5m", "warning", f"{on} above {TEMP_ALERT_C} C"),
        rule("GpuThermalOrPowerBrake",
             f"(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS % {2 * THROTTLE_REASON_BITS['hw_slowdown']}) >= "
             f"{THROTTLE_REASON_BITS['hw_slowdown']}", "5m", "warning",
             f"hardware slowdown (thermal or power brake) on {on}"),
        rule("GpuPcieReplays", "rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[15m]) > 0", "15m", "warning",
             f"PCIe replays rising on {on}"),
        rule("GpuNvlinkDown", f"{NVLINK_DOWN_METRIC} > 0", "5m", "critical", f"NVLinks down on {on}"),
        rule("GpuMissing", f"{GPU_COUNT_METRIC} < max_over_time({GPU_COUNT_METRIC}[1d])", "5m", "critical",
             "{{ $labels.Hostname }} lost a GPU (fallen off the bus?)"),
        rule("GpuExporterDown", 'up{job=~".*gpu.*|.*clustertwin.*"} == 0', "5m", "warning",
             "GPU exporter on {{ $labels.instance }} is not scraped"),
    ]}]}


def alert_rules_yaml() -> str:
    return yaml.safe_dump(alert_rules(), sort_keys=False, width=120)
