"""The exporter served on a loopback port and scraped over HTTP; alert rules reference exported metrics.
Without a GPU a fake backend object stands in for NVML (tests only)."""

from __future__ import annotations

import re
import urllib.request

import yaml

from clustertwin.ops.health.gpu import GpuInfo
from clustertwin.ops.health.nvml import NvmlBackend, NvmlUnavailable
from clustertwin.ops.telemetry import exporter as ex
from clustertwin.units import GIB


class FakeBackend:
    """Two GPUs in the shape NvmlBackend returns; GPU 1 hot, throttled, with a DBE and an Xid 79."""

    def driver_version(self) -> str:
        return "550.54.15"

    def cuda_driver_version(self) -> str:
        return "12.4"

    def gpus(self) -> list[GpuInfo]:
        base = dict(name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB, pcie_gen_current=5, pcie_width_current=16,
                    power_limit_w=700.0, sm_clock_mhz=1980.0, mem_clock_mhz=2619.0, ecc_volatile_corrected=0,
                    remapped_rows_pending=False, remapped_rows_failure=False, nvlink_active=[True] * 18,
                    pcie_replay_count=0, energy_j=1.5e6)
        return [GpuInfo(index=0, uuid="GPU-aaaa", memory_used_bytes=10 * GIB, utilization_gpu_pct=97.0,
                        temperature_c=61.0, power_w=650.0, ecc_volatile_uncorrected=0, **base),
                GpuInfo(index=1, uuid="GPU-bbbb", memory_used_bytes=2 * GIB, utilization_gpu_pct=3.0,
                        temperature_c=91.0, power_w=120.0, ecc_volatile_uncorrected=2,
                        throttle_reasons=["hw_slowdown", "hw_thermal_slowdown"], **base)]

    def xid_counts(self) -> dict[tuple[int, int], int]:
        return {(1, 79): 1, (1, 48): 2}

    def xid_last(self) -> dict[int, int]:
        return {1: 79}


def _backend():
    try:
        return NvmlBackend()
    except NvmlUnavailable:
        return FakeBackend()


def _value(text: str, metric: str, gpu: str) -> float:
    m = re.search(rf'^{metric}{{[^}}]*gpu="{gpu}"[^}}]*}} (\S+)$', text, re.MULTILINE)
    assert m, f"{metric} gpu={gpu} missing"
    return float(m.group(1))


def test_exporter_scrape_over_http():
    backend = _backend()
    server, thread = ex.start(backend, "node017", port=0, addr="127.0.0.1", environ={})
    try:
        port = server.server_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert resp.status == 200
            body = resp.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=5)
    n = len(backend.gpus())
    assert re.search(rf'^clustertwin_gpus{{Hostname="node017"}} {float(n)}$', body, re.MULTILINE)
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP",
                   "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"):
        assert f"# TYPE {metric} gauge" in body
    if isinstance(backend, FakeBackend):
        assert _value(body, "DCGM_FI_DEV_GPU_TEMP", "1") == 91.0
        assert _value(body, "DCGM_FI_DEV_FB_USED", "0") == 10 * 1024
        assert _value(body, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "1") == 2.0
        assert _value(body, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "1") == 0x8 + 0x40
        assert _value(body, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0") == 1.5e9
        assert 'clustertwin_xid_events_total{Hostname="node017",gpu="1",xid="79"} 1.0' in body
        assert "# TYPE clustertwin_xid_events_total counter" in body
        for counter in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
            assert f"# TYPE {counter} counter" in body  # dcgm-exporter's names, typed counter
        assert "# TYPE DCGM_FI_DEV_XID_ERRORS gauge" in body
        assert _value(body, "DCGM_FI_DEV_XID_ERRORS", "1") == 79.0 and _value(body, "DCGM_FI_DEV_XID_ERRORS", "0") == 0
        assert _value(body, "DCGM_FI_DEV_FB_FREE", "0") == 70 * 1024
        assert _value(body, "clustertwin_nvlink_links_down", "0") == 0.0


def test_alert_rules_reference_exported_metrics(cli, tmp_path):
    out = tmp_path / "rules.yml"
    res = cli("exporter", "--rules", str(out))
    assert res.code == 0, res.stderr
    doc = yaml.safe_load(out.read_text())
    rules = doc["groups"][0]["rules"]
    exported = {m for m, *_ in ex._GAUGES} | {m for m, *_ in ex._COUNTERS} | {
        ex.XID_METRIC, ex.XID_LAST_METRIC, ex.THROTTLE_METRIC, ex.NVLINK_DOWN_METRIC, ex.GPU_COUNT_METRIC, "up"}
    for r in rules:
        assert {"alert", "expr", "for", "labels", "annotations"} <= set(r)
        names = set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)(?=[{\[ ]|$)", r["expr"])) - {
            "increase", "rate", "max_over_time", "job", "or", "unless", "offset", "and", "on"}
        assert names and names <= exported, (r["alert"], names - exported)


def test_exporter_without_nvml_is_bad_input(cli):
    try:
        NvmlBackend().close()
    except NvmlUnavailable:
        res = cli("exporter", "--port", "19400", "--addr", "127.0.0.1")
        assert res.code == 2 and "cannot export GPU metrics" in res.stderr
    assert cli("exporter", "--port", "70000").code == 2
