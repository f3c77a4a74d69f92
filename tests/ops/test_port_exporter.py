"""Port counters in the exporter: node_exporter's names (node_infiniband_*, node_ethtool_*), typed counter,
data words scaled to bytes; RDMA hw_counters as clustertwin_rdma_*_total; served without NVML (--ports-only)."""

from __future__ import annotations

import json

from clustertwin.ops.telemetry import exporter as ex
from clustertwin.ops.telemetry.port_exporter import PortCollector, ethtool_metric, ethtool_readers
from tests.conftest import FIXTURES

IB = FIXTURES / "ops" / "sys-class-infiniband"
ROCE = FIXTURES / "ops" / "install" / "pass" / "sys-class-infiniband"
ETH = FIXTURES / "ops" / "counters" / "ethtool-S-ens1f0np0-after-loss.txt"


def samples(collector):
    return {(s["name"], tuple(sorted(s["labels"].items()))): (s["type"], s["value"])
            for s in ex.snapshot(None, "n1", extra=(collector,))}


def test_infiniband_names_and_scale():
    got = samples(PortCollector(IB))
    raw = int((IB / "mlx5_1" / "ports" / "1" / "counters" / "symbol_error").read_text())
    assert got[("node_infiniband_symbol_error_total", (("device", "mlx5_1"), ("port", "1")))] == ("counter", raw)
    words = int((IB / "mlx5_0" / "ports" / "1" / "counters" / "port_xmit_data").read_text())
    key = ("node_infiniband_port_data_transmitted_bytes_total", (("device", "mlx5_0"), ("port", "1")))
    assert got[key] == ("counter", 4 * words)


def test_ethtool_and_rdma_hw_counters():
    got = samples(PortCollector(ROCE, ethtool_readers({"ens1f0np0": ETH})))
    assert got[("node_ethtool_rx_discards_phy", (("device", "ens1f0np0"),))] == ("counter", 38411)
    assert got[("clustertwin_rdma_np_cnp_sent_total", (("device", "mlx5_0"), ("port", "1")))] == ("counter", 77210)
    assert ethtool_metric("rx-prio3.pause") == "node_ethtool_rx_prio3_pause"


def test_exposition_keeps_exact_counter_names():
    text = ex.exposition(ex.registry_for(None, "n1", extra=(PortCollector(ROCE, ethtool_readers({"e": ETH})),)))
    body = text.decode()
    assert "# TYPE node_ethtool_rx_discards_phy counter\n" in body
    assert 'node_ethtool_rx_discards_phy{device="e"} 38411.0' in body
    assert "node_infiniband_link_downed_total_total" not in body


def test_broken_ethtool_text_is_counted_not_exported(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("garbage\n")
    c = PortCollector(tmp_path / "none", ethtool_readers({"e": bad}))
    assert samples(c) == {} and c.damage.total == 1


def test_cli_ports_only(cli):
    res = cli("exporter", "--ports-only", "--sysfs-ib", str(IB), "--ethtool", f"ens1f0np0={ETH}", "--json")
    assert res.code == 0, res.stderr
    names = {s["name"] for s in json.loads(res.stdout)["samples"]}
    assert {"node_ethtool_rx_discards_phy", "node_infiniband_link_downed_total"} <= names
    assert cli("exporter", "--ports-only", "--ethtool", "noequals", "--json").code == 2
