"""Prometheus exporter for GPU health, and the alert rules that go with it.

Metric names follow dcgm-exporter's (``DCGM_FI_DEV_*``, default port 9400, labels ``gpu, UUID, device,
modelName, Hostname``) so that existing dashboards work; values come from NVML (:class:`NvmlBackend`).
Units as dcgm-exporter: clocks MHz, memory MiB, power W, energy mJ, temperature °C, utilisation %.
Xid events are counted per code in ``clustertwin_xid_events_total`` (dcgm's ``DCGM_FI_DEV_XID_ERRORS``
holds only the last Xid value).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from clustertwin.ops.gpu import THROTTLE_REASON_BITS, GpuInfo
from clustertwin.ops.nvml import GpuBackend
from clustertwin.safety import one_line
from clustertwin.units import MIB

DEFAULT_PORT = 9400
"""dcgm-exporter's port, so scrape configs carry over."""
LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")
XID_METRIC = "clustertwin_xid_events_total"
MJ_PER_J = 1000.0

# (metric, help, GpuInfo attribute, scale) for gauges
_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "utilization_gpu_pct", 1.0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "utilization_memory_pct", 1.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory_used_bytes", 1.0 / MIB),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w", 1.0),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Enforced power limit (in W).", "power_limit_w", 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c", 1.0),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz", 1.0),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "mem_clock_mhz", 1.0),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "Current PCIe link generation.", "pcie_gen_current", 1.0),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "Current PCIe link width (lanes).", "pcie_width_current", 1.0),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "PCIe transmit throughput (in B/s).", "pcie_tx_bytes_per_s", 1.0),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "PCIe receive throughput (in B/s).", "pcie_rx_bytes_per_s", 1.0),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "Row remap pending (1 = reset needed).", "remapped_rows_pending", 1.0),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Row remapping failure (1 = failed).", "remapped_rows_failure", 1.0),
)
# monotonic counters, exposed under dcgm-exporter's exact names (prometheus-client would append "_total" to
# a counter family's samples, breaking those names; PromQL rate()/increase() work on them either way)
_COUNTERS: tuple[tuple[str, str, str, float], ...] = (
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Corrected ECC errors since the last reset.", "ecc_volatile_corrected", 1.0),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Uncorrected ECC errors since the last reset.", "ecc_volatile_uncorrected",
     1.0),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Corrected ECC errors, lifetime.", "ecc_aggregate_corrected", 1.0),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Uncorrected ECC errors, lifetime.", "ecc_aggregate_uncorrected", 1.0),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Rows remapped for correctable errors.", "remapped_rows_correctable",
     1.0),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Rows remapped for uncorrectable errors.",
     "remapped_rows_uncorrectable", 1.0),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "PCIe replays since reset.", "pcie_replay_count", 1.0),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Energy since driver load (in mJ).", "energy_j", MJ_PER_J),
    ("DCGM_FI_DEV_NVLINK_TX_BYTES", "NVLink data transmitted, all links (in B).", "nvlink_tx_bytes", 1.0),
    ("DCGM_FI_DEV_NVLINK_RX_BYTES", "NVLink data received, all links (in B).", "nvlink_rx_bytes", 1.0),
)
THROTTLE_METRIC = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
NVLINK_DOWN_METRIC = "clustertwin_nvlink_links_down"
GPU_COUNT_METRIC = "clustertwin_gpus"


def _labels(g: GpuInfo, hostname: str) -> list[str]:
    # label values on one line (prometheus_client escapes LF, quotes and backslashes; the rest is ours)
    return [str(g.index), one_line(g.uuid or ""), f"nvidia{g.index}", one_line(g.name), one_line(hostname)]


class GpuCollector(Collector):
    """Reads the backend at every scrape (no cached state: the scrape is the sample)."""

    def __init__(self, backend: GpuBackend, hostname: str) -> None:
        self.backend = backend
        self.hostname = hostname

    def collect(self) -> Iterator[Any]:
        gpus = self.backend.gpus()
        count = GaugeMetricFamily(GPU_COUNT_METRIC, "GPUs visible to the driver.", labels=["Hostname"])
        count.add_metric([one_line(self.hostname)], float(len(gpus)))
        yield count
        for name, doc, attr, scale in _GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=list(LABELS))
            for g in gpus:
                v = getattr(g, attr)
                if v is not None:
                    fam.add_metric(_labels(g, self.hostname), float(v) * scale)
            yield fam
        for name, doc, attr, scale in _COUNTERS:
            fam = GaugeMetricFamily(name, doc + " Monotonic counter.", labels=list(LABELS))
            for g in gpus:
                v = getattr(g, attr)
                if v is not None:
                    fam.add_metric(_labels(g, self.hostname), float(v) * scale)
            yield fam
        thr = GaugeMetricFamily(THROTTLE_METRIC, "Clocks event (throttle) reasons bitmask (NVML bits).",
                                labels=list(LABELS))
        down = GaugeMetricFamily(NVLINK_DOWN_METRIC, "NVLinks reported inactive.", labels=list(LABELS))
        for g in gpus:
            thr.add_metric(_labels(g, self.hostname),
                           float(sum(THROTTLE_REASON_BITS.get(r, 0) for r in g.throttle_reasons)))
            if g.nvlink_active:
                down.add_metric(_labels(g, self.hostname), float(g.nvlink_active.count(False)))
        yield thr
        yield down
        xid = CounterMetricFamily(XID_METRIC.removesuffix("_total"), "Xid events seen by the exporter, by code.",
                                  labels=["gpu", "xid", "Hostname"])
        for (gpu, code), n in sorted(self.backend.xid_counts().items()):
            xid.add_metric([str(gpu), str(code), one_line(self.hostname)], float(n))
        yield xid


def registry_for(backend: GpuBackend, hostname: str) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(GpuCollector(backend, hostname))
    return reg


def start(backend: GpuBackend, hostname: str, port: int = DEFAULT_PORT, addr: str = "0.0.0.0") -> tuple[Any, Any]:
    """Serve ``/metrics`` in a background thread; returns (server, thread) from prometheus-client."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=addr, registry=registry_for(backend, hostname))


CRITICAL_XIDS = "48|62|64|74|79|95|119|120|140|158"
"""Xids whose NVIDIA action is reset/drain/RMA (see ops/xid.py)."""
TEMP_ALERT_C = 85


def alert_rules() -> dict[str, Any]:
    """Prometheus alerting rules over the exporter's metrics (``groups`` document)."""
    def rule(name: str, expr: str, for_: str, severity: str, summary: str) -> dict[str, Any]:
        return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
                "annotations": {"summary": summary}}

    return {"groups": [{"name": "clustertwin-gpu", "rules": [
        rule("GpuXidCritical", f'increase({XID_METRIC}{{xid=~"{CRITICAL_XIDS}"}}[10m]) > 0', "0m", "critical",
             "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} raised Xid {{ $labels.xid }}: drain the node"),
        rule("GpuXidAny", f"increase({XID_METRIC}[10m]) > 0", "0m", "warning",
             "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} raised Xid {{ $labels.xid }}"),
        rule("GpuUncorrectableEcc", "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0", "0m", "critical",
             "uncorrectable ECC errors on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}"),
        rule("GpuRowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", "0m", "critical",
             "row remapping failed on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}: RMA"),
        rule("GpuRowRemapPending", "DCGM_FI_DEV_ROW_REMAP_PENDING > 0", "15m", "warning",
             "GPU {{ $labels.gpu }} of {{ $labels.Hostname }} needs a reset to apply a row remap"),
        rule("GpuHot", f"DCGM_FI_DEV_GPU_TEMP > {TEMP_ALERT_C}", "5m", "warning",
             "GPU {{ $labels.gpu }} of {{ $labels.Hostname }} above " + f"{TEMP_ALERT_C} C"),
        rule("GpuThermalOrPowerBrake",
             f"(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS % {2 * THROTTLE_REASON_BITS['hw_slowdown']}) >= "
             f"{THROTTLE_REASON_BITS['hw_slowdown']}", "5m", "warning",
             "hardware slowdown (thermal or power brake) on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}"),
        rule("GpuPcieReplays", "rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[15m]) > 0", "15m", "warning",
             "PCIe replays rising on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}"),
        rule("GpuNvlinkDown", f"{NVLINK_DOWN_METRIC} > 0", "5m", "critical",
             "NVLinks down on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}"),
        rule("GpuMissing", f"{GPU_COUNT_METRIC} < max_over_time({GPU_COUNT_METRIC}[1d])", "5m", "critical",
             "{{ $labels.Hostname }} lost a GPU (fallen off the bus?)"),
        rule("GpuExporterDown", 'up{job=~".*gpu.*|.*clustertwin.*"} == 0', "5m", "warning",
             "GPU exporter on {{ $labels.instance }} is not scraped"),
    ]}]}


def alert_rules_yaml() -> str:
    return yaml.safe_dump(alert_rules(), sort_keys=False, width=120)
