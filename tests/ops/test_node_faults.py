"""node check on recorded ``nvidia-smi -q`` (R570 layout, HGX H200 with faults), ``dcgmi diag -j`` and ``lsmod``
outputs: GPU Reset Status, NVLink fabric state and health, persistence and MIG modes with their severities;
``--offline`` reads nothing live; the DCGM-style GPU levels run on a GPU and are skipped without one; the
compatibility matrix and the multi-node inventory."""

from __future__ import annotations

import json

import pytest

from clustertwin.ops.diagnosis.diag import gpu_levels, parse_dcgmi_json
from clustertwin.ops.health.check import check_node
from clustertwin.ops.health.compat import stack_findings
from clustertwin.ops.health.smi import parse_nvidia_smi_q
from tests.conftest import FIXTURES

OPS = FIXTURES / "ops"
FAULTS = OPS / "nvidia-smi-q-h200-faults.txt"


def test_smi_parser_reads_reset_fabric_persistence_and_mig():
    rep = parse_nvidia_smi_q(FAULTS.read_text())
    assert rep.driver_version == "570.124.06" and rep.cuda_version == "12.8" and len(rep.gpus) == 4
    g0, g1, g2, g3 = rep.gpus
    assert (g0.reset_required, g0.drain_and_reset_recommended, g0.persistence_mode, g0.mig_current) == \
        (False, False, True, False)
    assert (g0.fabric_state, g0.fabric_status, g0.fabric_bandwidth) == ("Completed", "Success", "Full")
    assert g1.reset_required is True
    assert g2.drain_and_reset_recommended is True and g2.fabric_bandwidth == "Degraded" and not g2.persistence_mode
    assert g3.mig_current is True and g3.mig_pending is True
    assert (g3.fabric_state, g3.fabric_status, g3.fabric_bandwidth) == ("In Progress", None, None)


def test_node_check_reports_reset_fabric_and_mig_with_severity():
    r = check_node(smi_q=FAULTS, live=False)
    got = {(f.severity, f.code, f.subject) for f in r.findings}
    assert got == {
        ("critical", "GPU_RESET_REQUIRED", "GPU 1"),
        ("error", "GPU_DRAIN_AND_RESET", "GPU 2"),
        ("error", "FABRIC_DEGRADED", "GPU 2"),
        ("error", "FABRIC_NOT_READY", "GPU 3"),
        ("warning", "PERSISTENCE_MODE_OFF", "GPU 2"),
        ("warning", "MIG_ENABLED", "GPU 3"),
    }
    assert r.worst == "critical" and r.findings[0].code == "GPU_RESET_REQUIRED"
    assert not any(f.subject == "GPU 0" for f in r.findings)


def test_mig_change_pending_is_flagged():
    text = FAULTS.read_text()
    i = text.index("    MIG Mode\n        Current                           : Enabled")
    text = text[:i] + text[i:].replace("Pending                           : Enabled",
                                       "Pending                           : Disabled", 1)
    g3 = parse_nvidia_smi_q(text).gpus[3]
    from clustertwin.ops.health.gpu_health import gpu_findings
    codes = {f.code: f.severity for f in gpu_findings([g3], "smi")}
    assert codes["MIG_CHANGE_PENDING"] == "warning"


def test_offline_reads_only_the_given_files(cli):
    res = cli("node", "check", "--offline", "--smi-q", str(FAULTS), "--json")
    assert res.code == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["host"] is None  # no live host facts
    assert len(d["gpus"]) == 4 and d["worst"] == "critical"
    text = cli("node", "check", "--offline", "--smi-q", str(FAULTS))
    assert text.code == 0 and "not read" in text.stdout and "critical" in text.stdout


def test_peermem_from_saved_lsmod(tmp_path):
    lsmod = tmp_path / "lsmod.txt"
    lsmod.write_text("Module                  Size  Used by\nnvidia_uvm           4911104  0\n"
                     "nvidia              54501376  2 nvidia_uvm\nmlx5_ib               491520  0\n", encoding="utf-8")
    r = check_node(smi_q=FAULTS, live=False, modules=lsmod)
    assert ("warning", "PEERMEM_NOT_LOADED") in {(f.severity, f.code) for f in r.findings}
    lsmod.write_text(lsmod.read_text() + "nvidia_peermem         16384  0\n", encoding="utf-8")
    r = check_node(smi_q=FAULTS, live=False, modules=lsmod)
    assert "PEERMEM_NOT_LOADED" not in {f.code for f in r.findings}


def test_dcgmi_json_merges_failures_and_warnings(cli):
    recs, found = parse_dcgmi_json((OPS / "dcgmi-diag-r2.json").read_text())
    assert len(recs) == 15
    assert {(f.severity, f.code, f.subject) for f in found} == {("error", "DCGM_FAIL", "GPU 1"),
                                                                 ("warning", "DCGM_WARN", "GPU 1")}
    assert "x4 of x16" in next(f for f in found if f.code == "DCGM_FAIL").evidence[0].text
    res = cli("node", "check", "--offline", "--smi-q", str(FAULTS), "--dcgmi-json", str(OPS / "dcgmi-diag-r2.json"),
              "--level", "2", "--json")
    d = json.loads(res.stdout)
    assert {"DCGM_FAIL", "DCGM_WARN"} <= {f["code"] for f in d["findings"]}
    assert any("--offline" in s for s in d["diag"]["skipped"])
    bad = parse_dcgmi_json("Error: unable to connect to host engine")[1]
    assert bad[0].code == "DCGMI_UNPARSED"


def test_gpu_levels_skip_without_a_gpu_and_run_with_one():
    torch = pytest.importorskip("torch")
    res = gpu_levels(3, {}, stress_s=2.0)
    if not torch.cuda.is_available():
        assert res.skipped and "no GPU" in res.skipped[0] and not res.memtest
        return
    n = torch.cuda.device_count()
    assert len(res.memtest) == n and all(m["mismatches"] == 0 and m["bytes_tested"] > 0 for m in res.memtest.values())
    assert all(bw["h2d_gb_per_s"] > 1.0 for bw in res.h2d.values())
    assert all(s["tflops"] > 1.0 for s in res.stress.values())


@pytest.mark.gpu
def test_level_2_on_a_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    res = gpu_levels(2, {0: 63.0})
    assert res.h2d[0]["h2d_gb_per_s"] > 5.0 and res.memtest[0]["mismatches"] == 0


def test_compat_flags_a_cuda_12_8_wheel_on_a_volta_era_driver():
    found = {(f.severity, f.code) for f in stack_findings("470.82.01", "2.8.0+cu128", "12.8", ["v100-sxm2-32gb"])}
    assert ("error", "DRIVER_TOO_OLD") in found  # 12.8 needs >= 570.26; R470 is below the 525 floor
    assert ("error", "WHEEL_ARCH_UNSUPPORTED") in found  # cu128 wheels of 2.8 dropped sm_70
    assert stack_findings("570.124.06", "2.8.0+cu128", "12.8", ["h200-sxm"]) == []
    # CUDA 13 drops Volta altogether; Blackwell needs NCCL >= 2.25
    assert "CUDA_ARCH_UNSUPPORTED" in {f.code for f in stack_findings("580.65.06", None, "13.0", ["v100-sxm2-32gb"])}
    assert "NCCL_ARCH_UNSUPPORTED" in {f.code for f in stack_findings("570.124.06", "2.6.0", "12.8", ["b200"])}


def test_inventory_flags_skew_across_nodes(tmp_path, cli):
    res = cli("node", "check", "--inventory", str(OPS / "inventory"), "--json")
    assert res.code == 0, res.stderr
    d = json.loads(res.stdout)
    assert len(d["nodes"]) == 4 and len(d["unreadable"]) == 1  # broken.json counted, not dropped
    codes = {f["code"]: f["severity"] for f in d["findings"]}
    assert codes["SKEW_NCCL"] == "error" and codes["SKEW_TORCH"] == "error" and codes["SKEW_DRIVER"] == "warning"
    assert codes["WHEEL_ARCH_UNSUPPORTED"] == "error" and codes["INVENTORY_UNREADABLE"] == "warning"
    # two nodes that differ only in the driver
    for name in ("gpu-a01", "gpu-a03"):
        doc = json.loads((OPS / "inventory" / f"{name}.json").read_text())
        doc["host"].update(torch_version="2.6.0+cu124", torch_cuda_version="12.4", nccl_version="2.21.5")
        (tmp_path / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")
    two = json.loads(cli("node", "check", "--inventory", str(tmp_path), "--json").stdout)
    skew = [f for f in two["findings"] if f["code"].startswith("SKEW_")]
    assert [f["code"] for f in skew] == ["SKEW_DRIVER"]
    assert "550.54.15: 1 node(s) (gpu-a01)" in json.dumps(skew[0]["evidence"])
    assert cli("node", "check", "--inventory", str(tmp_path / "nope")).code == 2


def test_rocm_and_cann_against_the_accelerator(tmp_path):
    from clustertwin.ops.health.compat import accelerator_findings
    from clustertwin.ops.health.host import accelerator_stacks

    assert [f.code for f in accelerator_findings(["mi300x"], rocm="5.7.1")] == ["ROCM_GPU_UNSUPPORTED"]
    assert accelerator_findings(["mi300x"], rocm="6.2.4") == []
    assert [f.code for f in accelerator_findings(["mi50"], rocm="6.1")] == ["ROCM_GPU_UNSUPPORTED"]  # left after 5.7
    assert [f.code for f in accelerator_findings(["ascend-910b"], cann="6.3.RC2")] == ["CANN_NPU_UNSUPPORTED"]
    assert accelerator_findings(["ascend-910b"], cann="8.0.RC2") == []
    rocm = tmp_path / "version"
    rocm.write_text("6.2.4-117\n", encoding="utf-8")
    info = tmp_path / "aarch64-linux"
    info.mkdir()
    (info / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=8.0.RC2\n",
                                                       encoding="utf-8")
    assert accelerator_stacks(rocm, str(tmp_path / "*" / "ascend_toolkit_install.info")) == ("6.2.4", "8.0.RC2")
    assert accelerator_stacks(tmp_path / "missing", str(tmp_path / "none*")) == (None, None)
