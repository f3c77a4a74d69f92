"""Prometheus exporter for GPU health, and the alert rules that go with it.

Metric names follow dcgm-exporter's (``DCGM_FI_DEV_*``, default port 9400, labels ``gpu, UUID, device,
modelName, Hostname``) so that existing dashboards work; values come from NVML (:class:`NvmlBackend`).
Units as dcgm-exporter: clocks MHz, memory MiB, power W, energy mJ, temperature °C, utilisation %.
Counters are typed ``counter`` under dcgm-exporter's exact names (which do not end in ``_total``, so the
exposition is written here rather than by prometheus-client, whose text format appends ``_total`` to every
counter's TYPE line). ``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding the last Xid code of each GPU, as
dcgm-exporter does; ``clustertwin_xid_events_total`` counts the events per code. Series carry the job that
owns the GPU: ``hpc_job`` from a dcgm-exporter style job-mapping directory (one file per GPU index holding the
Slurm job id, written by a prolog) or ``SLURM_JOB_ID``, and ``pod``/``namespace``/``container`` from the
Kubernetes downward API variables (``POD_NAME``, ``POD_NAMESPACE``, ``CONTAINER_NAME``). The environment names
the job only when the exporter runs inside it (a sidecar container, or started by the job's step); a node
daemon (a DaemonSet, a systemd unit) should use the mapping directory, because its own environment names the
daemon, not the job.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from clustertwin.ops.health.gpu import THROTTLE_REASON_BITS, GpuInfo
from clustertwin.ops.health.nvml import GpuBackend
from clustertwin.ops.telemetry.alerts import (  # noqa: F401 (alert_rules* re-exported)
    GPU_COUNT_METRIC,
    NVLINK_DOWN_METRIC,
    XID_LAST_METRIC,
    XID_METRIC,
    alert_rules,
    alert_rules_yaml,
)
from clustertwin.safety import one_line
from clustertwin.units import MIB

DEFAULT_PORT = 9400
"""dcgm-exporter's port, so scrape configs carry over."""
LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")
MJ_PER_J = 1000.0

# (metric, help, GpuInfo attribute, scale) for gauges
_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "utilization_gpu_pct", 1.0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "utilization_memory_pct", 1.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory_used_bytes", 1.0 / MIB),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "memory_free_bytes", 1.0 / MIB),
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
# monotonic counters, typed counter under dcgm-exporter's exact names
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
JOB_LABELS = ("hpc_job", "pod", "namespace", "container")
"""Labels naming the job that owns a GPU (empty when unknown)."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus text exposition format 0.0.4."""


def job_labels(environ: Mapping[str, str] | None = None, job_map_dir: Path | None = None,
               gpu_indices: list[int] | tuple[int, ...] = ()) -> dict[int, dict[str, str]]:
    """GPU index -> {hpc_job, pod, namespace, container}: a job-mapping file ``<dir>/<gpu index>`` (its first
    line, as dcgm-exporter's ``--hpc-job-mapping-dir``), else ``SLURM_JOB_ID``; Kubernetes from the downward-API
    variables ``POD_NAME``, ``POD_NAMESPACE``, ``CONTAINER_NAME``."""
    env = os.environ if environ is None else environ
    out = {}
    for i in gpu_indices:
        job = env.get("SLURM_JOB_ID", "")
        if job_map_dir is not None:
            f = job_map_dir / str(i)
            try:
                lines = f.read_text(encoding="utf-8", errors="replace").split()
                job = lines[0] if lines else ""
            except OSError:
                job = ""
        out[i] = {"hpc_job": job, "pod": env.get("POD_NAME", ""), "namespace": env.get("POD_NAMESPACE", ""),
                  "container": env.get("CONTAINER_NAME", "")}
    return out


def _counter(name: str, doc: str, labels: list[str]) -> Metric:
    """A counter family whose samples keep ``name`` exactly (see the module docstring)."""
    m = Metric(name, doc, "counter")
    m.name = name  # Metric strips a lower-case "_total"; the exposition below prints this name as is
    m._labelnames = labels  # type: ignore[attr-defined]
    return m


class GpuCollector(Collector):
    """Reads the backend at every scrape (no cached state: the scrape is the sample)."""

    def __init__(self, backend: GpuBackend, hostname: str, environ: Mapping[str, str] | None = None,
                 job_map_dir: Path | None = None) -> None:
        self.backend = backend
        self.hostname = hostname
        self.environ = environ
        self.job_map_dir = job_map_dir

    def collect(self) -> Iterator[Any]:
        gpus = self.backend.gpus()
        jobs = job_labels(self.environ, self.job_map_dir, [g.index for g in gpus])
        names = [*LABELS, *JOB_LABELS]

        def labels(g: GpuInfo) -> dict[str, str]:
            # label values on one line (the exposition escapes LF, quotes and backslashes; the rest is ours)
            base = dict(zip(LABELS, [str(g.index), one_line(g.uuid or ""), f"nvidia{g.index}", one_line(g.name),
                                     one_line(self.hostname)], strict=True))
            return {**base, **{k: one_line(v) for k, v in jobs[g.index].items()}}

        count = GaugeMetricFamily(GPU_COUNT_METRIC, "GPUs visible to the driver.", labels=["Hostname"])
        count.add_metric([one_line(self.hostname)], float(len(gpus)))
        yield count
        for name, doc, attr, scale in _GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=names)
            for g in gpus:
                v = _attr(g, attr)
                if v is not None:
                    fam.add_sample(name, labels(g), float(v) * scale)
            yield fam
        for name, doc, attr, scale in _COUNTERS:
            fam = _counter(name, doc, names)
            for g in gpus:
                v = getattr(g, attr)
                if v is not None:
                    fam.add_sample(name, labels(g), float(v) * scale)
            yield fam
        thr = GaugeMetricFamily(THROTTLE_METRIC, "Clocks event (throttle) reasons bitmask (NVML bits).", labels=names)
        down = GaugeMetricFamily(NVLINK_DOWN_METRIC, "NVLinks reported inactive.", labels=names)
        for g in gpus:
            thr.add_sample(THROTTLE_METRIC, labels(g),
                           float(sum(THROTTLE_REASON_BITS.get(r, 0) for r in g.throttle_reasons)))
            if g.nvlink_active:
                down.add_sample(NVLINK_DOWN_METRIC, labels(g), float(g.nvlink_active.count(False)))
        yield thr
        yield down
        last = getattr(self.backend, "xid_last", lambda: {})()
        xl = GaugeMetricFamily(XID_LAST_METRIC, "Value of the last XID error encountered.", labels=names)
        for g in gpus:
            xl.add_sample(XID_LAST_METRIC, labels(g), float(last.get(g.index, 0)))
        yield xl
        xid = _counter(XID_METRIC, "Xid events seen by the exporter, by code.", ["gpu", "xid", "Hostname"])
        for (gpu, code), n in sorted(self.backend.xid_counts().items()):
            xid.add_sample(XID_METRIC, {"gpu": str(gpu), "xid": str(code), "Hostname": one_line(self.hostname)},
                           float(n))
        yield xid


def _attr(g: GpuInfo, attr: str) -> float | None:
    if attr == "memory_free_bytes" and g.memory_free_bytes is None and g.memory_total_bytes is not None \
            and g.memory_used_bytes is not None:
        return g.memory_total_bytes - g.memory_used_bytes
    v = getattr(g, attr)
    return None if v is None else float(v)


def registry_for(backend: GpuBackend | None, hostname: str, environ: Mapping[str, str] | None = None,
                 job_map_dir: Path | None = None, extra: tuple[Collector, ...] = ()) -> CollectorRegistry:
    """The GPU collector (none when ``backend`` is None) and ``extra`` collectors (network port counters,
    :class:`clustertwin.ops.telemetry.port_exporter.PortCollector`)."""
    reg = CollectorRegistry(auto_describe=False)
    if backend is not None:
        reg.register(GpuCollector(backend, hostname, environ, job_map_dir))
    for c in extra:
        reg.register(c)
    return reg


def _escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def exposition(registry: CollectorRegistry) -> bytes:
    """Prometheus text format 0.0.4 of every family, names exactly as collected (counters included)."""
    out: list[str] = []
    for fam in registry.collect():
        if not fam.samples:
            continue
        name = fam.samples[0].name if fam.type == "counter" else fam.name
        doc = fam.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n")
        out.append(f"# TYPE {name} {fam.type if fam.type in ('counter', 'gauge') else 'untyped'}\n")
        for s in fam.samples:
            lab = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(s.labels.items()))
            out.append(f"{s.name}{{{lab}}} {floatToGoString(s.value)}\n" if lab
                       else f"{s.name} {floatToGoString(s.value)}\n")
    return "".join(out).encode("utf-8")


def start(backend: GpuBackend | None, hostname: str, port: int = DEFAULT_PORT, addr: str = "0.0.0.0",
          environ: Mapping[str, str] | None = None, job_map_dir: Path | None = None,
          extra: tuple[Collector, ...] = ()) -> tuple[Any, Any]:
    """Serve ``/metrics`` in a background thread; returns (server, thread)."""
    registry = registry_for(backend, hostname, environ, job_map_dir, extra)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = exposition(registry)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="clustertwin-exporter", daemon=True)
    thread.start()
    return server, thread


def snapshot(backend: GpuBackend | None, hostname: str, environ: Mapping[str, str] | None = None,
             job_map_dir: Path | None = None, extra: tuple[Collector, ...] = ()) -> list[dict[str, Any]]:
    """One scrape as JSON-ready records ``{name, type, labels, value}``."""
    reg = registry_for(backend, hostname, environ, job_map_dir, extra)
    return [{"name": s.name, "type": fam.type, "labels": dict(s.labels), "value": s.value}
            for fam in reg.collect() for s in fam.samples]

