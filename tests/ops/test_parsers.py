"""Parsers of real tool output formats: nvidia-smi -q (two driver generations), topo -m, ibstat,
perfquery, sysfs, kernel-log Xid lines, and the CUDA/driver compatibility table."""

from __future__ import annotations

import pytest

from clustertwin.errors import SpecError
from clustertwin.ops.health import ib
from clustertwin.ops.health.compat import compat_findings, driver_supports
from clustertwin.ops.health.gpu import catalog_gpu_id, throttle_names
from clustertwin.ops.health.smi import parse_nvidia_smi_q, parse_nvlink_status
from clustertwin.ops.health.topo import parse_topo_matrix, topo_findings
from clustertwin.ops.health.xid import parse_kernel_log, xid_findings, xid_info
from clustertwin.units import MIB
from tests.conftest import FIXTURES

OPS = FIXTURES / "ops"


def test_smi_q_h100_r550():
    r = parse_nvidia_smi_q((OPS / "nvidia-smi-q-h100.txt").read_text())
    assert (r.driver_version, r.cuda_version) == ("550.54.15", "12.4")
    g0, g1 = r.gpus
    assert g0.name == "NVIDIA H100 80GB HBM3" and catalog_gpu_id(g0.name) == "h100-sxm"
    assert g0.pci_bus_id == "00000000:18:00.0" and g0.memory_total_bytes == 81559 * MIB
    assert (g0.pcie_gen_current, g0.pcie_gen_max, g0.pcie_width_current, g0.pcie_width_max) == (5, 5, 16, 16)
    assert g0.throttle_reasons == ["gpu_idle"] and g0.power_w == pytest.approx(71.83)
    assert g1.pcie_width_current == 8 and g1.pcie_replay_count == 12
    # "Correctable" must not count the "Uncorrectable" rows
    assert (g1.ecc_volatile_corrected, g1.ecc_volatile_uncorrected) == (0, 2)
    assert (g1.ecc_aggregate_corrected, g1.ecc_aggregate_uncorrected) == (3, 2)
    assert g1.remapped_rows_pending is True and g1.remapped_rows_uncorrectable == 1
    assert g1.throttle_reasons == ["hw_slowdown", "hw_thermal_slowdown"]
    assert (g1.sm_clock_mhz, g1.sm_clock_max_mhz, g1.temperature_c) == (1155, 1980, 88)


def test_smi_q_v100_r470_old_layout():
    r = parse_nvidia_smi_q((OPS / "nvidia-smi-q-v100-r470.txt").read_text())
    (g,) = r.gpus
    assert r.driver_version == "470.82.01" and catalog_gpu_id(g.name) == "v100-sxm2-32gb"
    assert (g.ecc_volatile_corrected, g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected) == (4, 211, 3)
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (2, 3, True)
    assert g.remapped_rows_pending is None  # "Remapped Rows : N/A" on Volta
    assert g.throttle_reasons == ["sw_power_cap"] and g.power_limit_w == 300.0


def test_nvlink_status_and_throttle_bits():
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
    assert parse_nvlink_status(text) == {0: [True, False]}
    assert throttle_names(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]


def test_topo_matrix_and_findings():
    good = parse_topo_matrix((OPS / "nvidia-smi-topo-m-dgx-h100.txt").read_text())
    assert len(good.gpus) == 8 and len(good.nics) == 8 and good.nic_names["NIC3"] == "mlx5_3"
    assert good.nvlinks("GPU0", "GPU7") == 18 and good.cpu_affinity["GPU4"] == "56-111,168-223"
    assert good.numa_affinity["GPU5"] == "1" and good.nearest_nics("GPU2") == (["NIC2"], "PXB")
    assert topo_findings(good) == []
    bad = parse_topo_matrix((OPS / "nvidia-smi-topo-m-degraded.txt").read_text())
    codes = {(f.code, f.subject) for f in topo_findings(bad)}
    assert codes == {("NVLINK_MISSING", "GPU3-GPU5"), ("GPU_NIC_AFFINITY", "GPU6")}
    with pytest.raises(SpecError):
        parse_topo_matrix("not a matrix\n")


def test_ibstat_perfquery_sysfs():
    ports = ib.parse_ibstat((OPS / "ibstat.txt").read_text())
    assert [p.name for p in ports] == ["mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1", "mlx5_bond_0/1"]
    assert ports[4].link_layer == "Ethernet" and ports[0].rate_gbit_per_s == 400
    counters = ib.parse_perfquery((OPS / "perfquery-mlx5_3.txt").read_text())
    assert counters["SymbolErrorCounter"] == 4127 and "PortSelect" not in counters
    ports[3].counters.update(counters)
    codes = {(f.code, f.subject) for f in ib.ib_findings(ports)}
    assert codes == {("IB_PORT_DOWN", "mlx5_1/1"), ("IB_RATE_DEGRADED", "mlx5_2/1"), ("IB_LINK_ERRORS", "mlx5_3/1")}
    sysfs = ib.read_sysfs(OPS / "sys-class-infiniband")
    assert [(p.name, p.state, p.rate_gbit_per_s) for p in sysfs] == [
        ("mlx5_0/1", "Active", 400.0), ("mlx5_1/1", "Active", 400.0), ("mlx5_2/1", "Down", 10.0)]
    assert sysfs[1].counters["SymbolErrorCounter"] == 57
    codes = {(f.code, f.subject) for f in ib.ib_findings(sysfs)}
    assert codes == {("IB_LINK_ERRORS", "mlx5_1/1"), ("IB_PORT_DOWN", "mlx5_2/1")}


def test_kernel_log_xid():
    lines = (OPS / "logs" / "kern.log").read_text().splitlines()
    events, fell = parse_kernel_log(lines)
    assert [(e.code, e.pci_bus_id) for e in events] == [(63, "0000:2a:00"), (48, "0000:2a:00"), (94, "0000:2a:00"),
                                                        (79, "0000:9a:00")]
    assert fell == [("0000:9a:00.0", 10, lines[9].strip())]
    sev = {f.code: f.severity for f in xid_findings(events, fell, "kern.log")}
    assert sev == {"XID_63": "warning", "XID_48": "critical", "XID_94": "error", "XID_79": "critical",
                   "GPU_FELL_OFF_BUS": "critical"}
    assert "fallen off the bus" in xid_info(79).meaning and xid_info(146).severity == "critical"
    assert xid_info(9999).severity == "error"


@pytest.mark.parametrize(("driver", "cuda", "status"), [
    ("550.54.15", "12.4", "ok"), ("535.104.05", "12.4", "minor-compat"), ("470.82.01", "12.1", "too-old"),
    ("580.65.06", "13.0", "ok"), ("560.35.05", "12.7", "ok"), ("520.61.05", "11.8", "ok")])
def test_driver_cuda_compat(driver, cuda, status):
    assert driver_supports(driver, cuda).status == status


def test_compat_findings():
    assert compat_findings("470.82.01", "12.1")[0].code == "DRIVER_TOO_OLD"
    assert compat_findings("550.54.15", "12.4") == [] and compat_findings(None, "12.4") == []
