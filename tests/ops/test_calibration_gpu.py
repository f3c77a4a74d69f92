"""A calibration records the device it was measured on and is refused (exit 2, one line) for a cluster
of another GPU unless ``--force``: a CPU host's GEMM efficiency must not silently apply to H100 estimates."""

from __future__ import annotations

import json

import pytest
import yaml

from clustertwin import specs
from clustertwin.errors import SpecError
from clustertwin.ops.calibration.calibrate import calibration_from_bench, write_calibration
from clustertwin.ops.perf import bench as bm
from tests.conftest import FIXTURES

TRAIN = ("train", "estimate", "-c", "ref-1k-h100", "-g", "8", "-b", "8", "--json")


def test_node_bench_records_the_device() -> None:
    cpu = calibration_from_bench(bm.BenchReport(device="cpu (AMD EPYC)", gpu_catalog_id=None))
    assert cpu.gpu == "cpu"
    gpu = calibration_from_bench(bm.BenchReport(device="cuda:0 (NVIDIA H100 80GB HBM3)", gpu_catalog_id="h100-sxm"))
    assert gpu.gpu == "h100-sxm"
    odd = calibration_from_bench(bm.BenchReport(device="cuda:0 (Some New GPU)", gpu_catalog_id=None))
    assert odd.gpu == "cuda:0 (Some New GPU)"


def test_check_gpu() -> None:
    cal = specs.Calibration(train={"gemm_efficiency": 0.2}, gpu="cpu")
    with pytest.raises(SpecError, match="measured on 'cpu' but the cluster's GPU is 'h100-sxm'"):
        cal.check_gpu("h100-sxm")
    cal.check_gpu("h100-sxm", force=True)
    cal.check_gpu("cpu")
    specs.Calibration(train={"gemm_efficiency": 0.2}).check_gpu("h100-sxm")  # unrecorded: hand-written


def test_cpu_calibration_is_refused_for_h100_unless_forced(cli, tmp_path) -> None:
    path = tmp_path / "cpu.yaml"
    write_calibration(specs.Calibration(train={"gemm_efficiency": 0.2}, gpu="cpu", source="node bench"), str(path))
    assert yaml.safe_load(path.read_text())["gpu"] == "cpu"
    base = json.loads(cli(*TRAIN).stdout)["mfu"]
    for cmd in (TRAIN, ("train", "search", "-g", "8", "-b", "8"), ("train", "scale", "-g", "8", "-b", "8"),
                ("comm", "all_reduce", "-c", "ref-1k-h100", "--gpus", "8")):
        r = cli(*cmd, "--calibration", str(path))
        assert r.code == 2 and r.stderr.count("\n") == 1, (cmd, r.stderr)
        assert "measured on 'cpu'" in r.stderr and "h100-sxm" in r.stderr and "--force" in r.stderr
    r = cli(*TRAIN, "--calibration", str(path), "--force")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["mfu"] < 0.5 * base  # what it would silently have done


def test_nccl_tests_calibration_records_the_clusters_gpu(cli, tmp_path) -> None:
    out = tmp_path / "cal.yaml"
    r = cli("calibrate", "--nccl-tests", str(FIXTURES / "nccl_tests" / "gcp_a3mega_2node_all_reduce_perf.log"),
            "-c", str(FIXTURES / "nccl_tests" / "gcp-a3mega-2vm.yaml"), "-o", str(out), "--json")
    assert r.code == 0, r.stderr
    assert yaml.safe_load(out.read_text())["gpu"] == "h100-sxm"
    r = cli("comm", "all_reduce", "-c", "ref-1k-h100", "--gpus", "8", "--calibration", str(out), "--json")
    assert r.code == 0, r.stderr
    r = cli("comm", "all_reduce", "-c", "dragonfly-16k-mi300x", "--gpus", "8", "--calibration", str(out))
    assert r.code == 2 and "'mi300x'" in r.stderr
