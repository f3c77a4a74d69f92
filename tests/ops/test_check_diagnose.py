"""node check on saved outputs and on this machine; diagnose over the fixture logs (findings and the
--json schema); bad input exits 2."""

from __future__ import annotations

import json

from clustertwin.ops.diagnosis.diagnose import diagnose
from clustertwin.ops.health.check import check_node
from tests.conftest import FIXTURES

OPS = FIXTURES / "ops"


def test_check_saved_outputs():
    r = check_node(smi_q=OPS / "nvidia-smi-q-h100.txt", topo=OPS / "nvidia-smi-topo-m-degraded.txt",
                   kernel_log=OPS / "logs" / "kern.log", ibstat=OPS / "ibstat.txt",
                   perfquery={"mlx5_3": OPS / "perfquery-mlx5_3.txt"}, expect_node="dgx-h100", live=False)
    got = {(f.severity, f.code, f.subject) for f in r.findings}
    for want in [("critical", "ECC_UNCORRECTED", "GPU 1"), ("critical", "GPU_COUNT", None),
                 ("warning", "PCIE_WIDTH_DEGRADED", "GPU 1"), ("warning", "ROW_REMAP_PENDING", "GPU 1"),
                 ("warning", "CLOCKS_THROTTLED", "GPU 1"), ("warning", "GPU_HOT", "GPU 1"),
                 ("warning", "PCIE_REPLAYS", "GPU 1"), ("error", "NVLINK_MISSING", "GPU3-GPU5"),
                 ("critical", "XID_79", "0000:9a:00"), ("critical", "GPU_FELL_OFF_BUS", "0000:9a:00.0"),
                 ("error", "IB_PORT_DOWN", "mlx5_1/1"), ("warning", "IB_LINK_ERRORS", "mlx5_3/1")]:
        assert want in got, want
    assert not any(f.subject == "GPU 0" for f in r.findings)  # the healthy idle GPU
    ranks = [("critical", "error", "warning", "info").index(f.severity) for f in r.findings]
    assert ranks == sorted(ranks) and r.worst == "critical"
    assert r.gpu_catalog_ids == ["h100-sxm", "h100-sxm"] and r.driver_version == "550.54.15"
    v100 = check_node(smi_q=OPS / "nvidia-smi-q-v100-r470.txt", live=False)
    codes = {f.code for f in v100.findings}
    assert {"PAGE_RETIREMENT_PENDING", "ECC_UNCORRECTED_HISTORY", "CLOCKS_THROTTLED"} <= codes


def test_node_check_live_cli(cli):
    res = cli("node", "check", "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["host"]["logical_cpus"] >= 1 and data["host"]["memory_total_bytes"] > 0
    if not data["gpus"]:
        assert any(f["code"] == "NO_GPU" for f in data["findings"])
    text = cli("node", "check")
    assert text.code == 0 and ("no NVIDIA GPU" in text.stdout or data["gpus"])


def test_node_check_bad_input(cli):
    res = cli("node", "check", "--smi-q", str(OPS / "missing.txt"), "--offline")
    assert res.code == 2 and "missing.txt" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert cli("node", "check", "--perfquery", "mlx5_0", "--offline").code == 2
    assert cli("node", "check", "--node", "dgx-h10", "--offline").code == 2


def test_diagnose_fixture_logs():
    r = diagnose([OPS / "logs"])
    by_code = {f.code: f for f in r.findings}
    assert {"NCCL_TIMEOUT", "IB_COMPLETION_ERROR", "NCCL_COMM_ERROR", "NCCL_NVLS", "CUDA_OOM", "XID_48", "XID_63",
            "XID_79", "XID_94", "GPU_FELL_OFF_BUS", "DRIVER_MISMATCH", "IB_LINK_DOWN_EVENT", "INPUT_PIPELINE_STALL",
            "DIST_TEARDOWN", "MALFORMED_LINES"} <= set(by_code)
    t = by_code["NCCL_TIMEOUT"]
    assert t.severity == "error" and "ALLREDUCE" in t.title and "1873" in t.title and "1,2" in t.title
    assert [e.line for e in t.evidence] == [4, 9]
    assert "12" in by_code["IB_COMPLETION_ERROR"].title and "10.0.1.12" in by_code["IB_COMPLETION_ERROR"].title
    stall = by_code["INPUT_PIPELINE_STALL"]
    assert "5 of 8 samples" in stall.title and stall.evidence[0].line == 4
    assert "2 malformed" in by_code["MALFORMED_LINES"].title  # truncated Xid line + 'N/A' metric row
    assert r.files_read == 6 and r.lines_read > 40
    sev = [("critical", "error", "warning", "info").index(f.severity) for f in r.findings]
    assert sev == sorted(sev)


def test_diagnose_oom_advice():
    new = diagnose([OPS / "logs" / "oom-rank0.log"]).findings[0]
    assert new.code == "CUDA_OOM" and "GPU 0" in new.title and "20 MiB" in new.title
    assert "expandable_segments" in new.action  # 2.41 GiB reserved-unallocated > 20 MiB requested
    old = diagnose([OPS / "logs" / "oom-old-torch.log"]).findings[0]
    assert old.code == "CUDA_OOM" and "GPU 3" in old.title and "recompute" in old.action


def test_diagnose_cli_json_schema(cli, tmp_path):
    res = cli("diagnose", str(OPS / "logs"), "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert set(data) == {"findings", "files_read", "lines_read", "files_skipped"}
    for f in data["findings"]:
        assert {"severity", "code", "title", "evidence", "action"} <= set(f)
        assert f["severity"] in ("critical", "error", "warning", "info")
        for e in f["evidence"]:
            assert set(e) == {"file", "line", "text"}
    clean = tmp_path / "ok.log"
    clean.write_text("step 1 | loss 2.0\n")
    res = cli("diagnose", str(clean), "--json")
    assert res.code == 0 and json.loads(res.stdout) == {"findings": [], "files_read": 1, "lines_read": 1,
                                                        "files_skipped": 0}
    assert cli("diagnose", str(tmp_path / "nope.log")).code == 2
