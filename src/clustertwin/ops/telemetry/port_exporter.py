"""Network port counters for the Prometheus exporter, under node-exporter's names so that existing dashboards and
rules work: InfiniBand sysfs counters as ``node_infiniband_*`` (node_exporter's infiniband collector: labels
``device``, ``port``; data counters in bytes = 4 x the 32-bit-word counters), RoCE NIC statistics from
``ethtool -S`` as ``node_ethtool_<stat>`` (node_exporter's ethtool collector: label ``device``), and the RDMA
``hw_counters`` (CNP/ECN, out_of_sequence), which node_exporter does not export, as
``clustertwin_rdma_<counter>_total``. Every one is a monotonic counter; rates and the thresholds of
:mod:`clustertwin.ops.health.port_counters` belong in the queries (``rate(node_ethtool_rx_discards_phy[5m]) > 0``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from clustertwin.errors import SpecError
from clustertwin.inputs import RowDamage
from clustertwin.ops.health.ib import SYSFS_IB_ROOT
from clustertwin.ops.health.port_counters import parse_counters
from clustertwin.safety import one_line

IB_SYSFS_METRICS: dict[str, tuple[str, str, int]] = {
    "link_downed": ("link_downed_total", "Number of times the link failed to recover from an error state and "
                    "went down", 1),
    "link_error_recovery": ("link_error_recovery_total", "Number of times the link successfully recovered from "
                            "an error state", 1),
    "port_rcv_constraint_errors": ("port_constraint_errors_received_total", "Number of packets received on the "
                                   "switch physical port that are discarded", 1),
    "port_xmit_constraint_errors": ("port_constraint_errors_transmitted_total", "Number of packets not "
                                    "transmitted from the switch physical port", 1),
    "port_rcv_data": ("port_data_received_bytes_total", "Number of data octets received on all links", 4),
    "port_xmit_data": ("port_data_transmitted_bytes_total", "Number of data octets transmitted on all links", 4),
    "port_rcv_discards": ("port_discards_received_total", "Number of inbound packets discarded by the port "
                          "because the port is down or congested", 1),
    "port_xmit_discards": ("port_discards_transmitted_total", "Number of outbound packets discarded by the port "
                           "because the port is down or congested", 1),
    "port_rcv_errors": ("port_errors_received_total", "Number of packets containing an error that were received "
                        "on this port", 1),
    "port_rcv_packets": ("port_packets_received_total", "Number of packets received on all VLs by this port "
                         "(including errors)", 1),
    "port_xmit_packets": ("port_packets_transmitted_total", "Number of packets transmitted on all VLs from this "
                          "port (including errors)", 1),
    "port_xmit_wait": ("port_transmit_wait_total", "Number of ticks during which the port had data to transmit "
                       "but no data was sent during the entire tick", 1),
    "port_rcv_remote_physical_errors": ("port_receive_remote_physical_errors_total", "Number of packets marked "
                                        "with the EBP (End of Bad Packet) delimiter received on the port.", 1),
    "port_rcv_switch_relay_errors": ("port_receive_switch_relay_errors_total", "Number of packets that could not "
                                     "be forwarded by the switch.", 1),
    "symbol_error": ("symbol_error_total", "Number of minor link errors detected on one or more physical lanes.", 1),
    "VL15_dropped": ("vl15_dropped_total", "Number of incoming VL15 packets dropped due to resource limitations.", 1),
    "local_link_integrity_errors": ("local_link_integrity_errors_total", "Number of times the count of local "
                                    "physical errors exceeded the threshold", 1),
    "excessive_buffer_overrun_errors": ("excessive_buffer_overrun_errors_total", "Number of times consecutive "
                                        "flow control update periods had buffer overruns", 1),
}
"""sysfs counter file -> (node_infiniband_ family, help, scale); names and help as node_exporter's
infiniband collector (the last two are this project's, in the same style)."""
_METRIC_NAME_RE = re.compile(r"[^a-zA-Z0-9_]")


def ethtool_metric(stat: str) -> str:
    """node_exporter's ethtool name: ``node_ethtool_`` + the statistic with non-name characters as ``_``."""
    return "node_ethtool_" + _METRIC_NAME_RE.sub("_", stat)


def _counter(name: str, doc: str, labels: list[str]) -> Metric:
    m = Metric(name, doc, "counter")
    m.name = name  # keep the exact name (see exporter.exposition)
    m._labelnames = labels  # type: ignore[attr-defined]
    return m


def run_ethtool(iface: str) -> str | None:
    """``ethtool -S IFACE`` output, None when ethtool is missing or fails."""
    exe = shutil.which("ethtool")
    if exe is None:
        return None
    try:
        p = subprocess.run([exe, "-S", iface], capture_output=True, text=True, errors="replace", timeout=10,
                           check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


class PortCollector(Collector):
    """Reads the sysfs counters and ``ethtool -S`` at every scrape."""

    def __init__(self, ib_root: Path = SYSFS_IB_ROOT, ethtool: dict[str, Callable[[], str | None]] | None = None,
                 hostname: str = "") -> None:
        self.ib_root = ib_root
        self.ethtool = ethtool or {}
        self.hostname = hostname
        self.damage = RowDamage()
        """Counter lines that did not parse, over all scrapes (counted, never exported)."""

    def _ib(self) -> Iterator[tuple[str, str, str, str, float]]:
        """(sysfs counter, device, port, dir, value) of every readable counter."""
        if not self.ib_root.is_dir():
            return
        for hca in sorted(self.ib_root.iterdir()):
            for pdir in sorted((hca / "ports").glob("*")) if (hca / "ports").is_dir() else []:
                for sub in ("counters", "hw_counters"):
                    for f in sorted((pdir / sub).glob("*")) if (pdir / sub).is_dir() else []:
                        try:
                            text = f.read_text().strip()
                        except OSError:
                            continue
                        if text.isdigit():
                            yield f.name, hca.name, pdir.name, sub, float(text)
                        elif text and not text.startswith("N/A"):
                            self.damage.add("bad number", 0)

    def collect(self) -> Iterator[Any]:
        ib: dict[str, Metric] = {}
        rdma: dict[str, Metric] = {}
        for counter, dev, port, sub, value in self._ib():
            labels = {"device": one_line(dev), "port": one_line(port)}
            if sub == "counters" and counter in IB_SYSFS_METRICS:
                fam, doc, scale = IB_SYSFS_METRICS[counter]
                name = f"node_infiniband_{fam}"
                ib.setdefault(name, _counter(name, doc, ["device", "port"])).add_sample(name, labels, value * scale)
            elif sub == "hw_counters":
                name = f"clustertwin_rdma_{_METRIC_NAME_RE.sub('_', counter)}_total"
                rdma.setdefault(name, _counter(name, f"RDMA hw_counters/{counter} (mlx5).", ["device", "port"]))
                rdma[name].add_sample(name, labels, value)
        yield from ib.values()
        yield from rdma.values()
        eth: dict[str, Metric] = {}
        for iface, read in sorted(self.ethtool.items()):
            text = read()
            if not text:
                continue
            try:
                sample = parse_counters(text, f"ethtool -S {iface}", self.damage)
            except SpecError:  # not ethtool output: skipped for this scrape, counted
                self.damage.add("unreadable", 0)
                continue
            for stat, v in sample.values.items():
                name = ethtool_metric(stat)
                eth.setdefault(name, _counter(name, f"Network interface {stat}", ["device"]))
                eth[name].add_sample(name, {"device": one_line(iface)}, float(v))
        yield from eth.values()


def ethtool_readers(files: dict[str, Path] | None = None, ifaces: list[str] | None = None) -> dict[str,
                                                                                                  Callable[[], str | None]]:
    """Readers per interface: a saved ``ethtool -S`` file (read at each scrape) or the live command."""
    out: dict[str, Callable[[], str | None]] = {}
    for iface, path in (files or {}).items():
        def read(p: Path = path) -> str | None:
            try:
                return p.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None
        out[iface] = read
    for iface in ifaces or []:
        out.setdefault(iface, lambda i=iface: run_ethtool(i))
    return out
