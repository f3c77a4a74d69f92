"""Real benchmarks on this machine: a two-process gloo all_reduce on loopback printed like nccl-tests,
CPU GEMM, host memory and storage; the calibration they imply changes a training estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustertwin import specs, train
from clustertwin.cli.common import load_calibration, load_cluster, load_model
from clustertwin.errors import SpecError
from clustertwin.ops.calibration.calibrate import calibration_from_bench, write_calibration
from clustertwin.ops.perf import bench as bm
from clustertwin.ops.perf import bench_collectives as bc
from clustertwin.ops.perf import bench_storage
from clustertwin.units import KIB, MIB

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def gloo_all_reduce() -> bm.CollectiveResult:
    res, skipped = bc.collectives(["all_reduce"], bc.sweep_sizes(4 * KIB, 1 * MIB, 4), world_size=2, backend="gloo")
    assert not skipped
    return res[0]


def test_gloo_all_reduce_table(gloo_all_reduce):
    r = gloo_all_reduce
    sizes = [row.size_bytes for row in r.rows]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes) == 5
    assert all(row.busbw_gb_per_s > 0 and row.time_us > 0 for row in r.rows)
    assert all(row.wrong == 0 for row in r.rows)
    for row in r.rows:  # nccl-tests: busbw = algbw x 2(n-1)/n = algbw for n = 2; count = size / 4
        assert row.busbw_gb_per_s == pytest.approx(row.algbw_gb_per_s) and row.count == row.size_bytes // 4
    text = bc.format_nccl_tests(r)
    assert "# Avg bus bandwidth    :" in text and "# Out of bounds values : 0 OK" in text
    assert "(B)" in text and "(GB/s)" in text


def test_calibration_changes_training_estimate(gloo_all_reduce, tmp_path):
    gemm, _ = bm.gemm(["fp32"], n=256)
    report = bm.BenchReport(device="cpu", gpu_catalog_id=None, gemm=gemm, collectives=[gloo_all_reduce])
    cal = calibration_from_bench(report)
    assert cal.comm == {}  # gloo has no counterpart in the collective model
    if gemm[0].peak_tflops is None:
        pytest.skip("no host peak estimate for this CPU (no SIMD flags or clock)")
    assert 0 < cal.train["gemm_efficiency"] <= 1
    path = tmp_path / "cal.yaml"
    write_calibration(cal, str(path))
    loaded = load_calibration(path)
    assert loaded.train == cal.train and "node bench" in (loaded.source or "")
    model, cluster = load_model("llama3-8b"), load_cluster("ref-1k-h100")
    layout = specs.ParallelismSpec(tp=1, pp=1, dp=8, global_batch=64)
    base = train.estimate(model, cluster, layout)
    calibrated = train.estimate(model, cluster, layout, calibration=loaded)
    assert calibrated.step_time_s != pytest.approx(base.step_time_s, rel=1e-6)


def test_cpu_gemm_memory_storage(tmp_path):
    gemm, skipped = bm.gemm(["fp32", "tf32"], n=256)
    assert [g.precision for g in gemm] == ["fp32"] and gemm[0].tflops > 0
    assert any("tf32" in s for s in skipped)
    mem = bm.host_memory_bandwidth(8 * MIB)
    assert mem.gb_per_s > 0 and mem.where == "host"
    dev, reason = bm.device_memory_bandwidth()
    import torch

    if not torch.cuda.is_available():
        assert dev is None and "no GPU" in reason
    st = bench_storage.storage(tmp_path, 8 * MIB, iodepth=2, ssd_id="pm9a3", rand_seconds=0.2)
    assert st.seq_write_gb_per_s > 0 and st.seq_read_gb_per_s > 0 and st.rand_read_iops > 0
    assert st.expected["rand_read_iops"] == 900000 and list(tmp_path.iterdir()) == []


def test_bench_bad_input(cli, tmp_path):
    assert cli("node", "bench", "--skip", "gpu").code == 2
    assert cli("node", "bench", "--skip", "gemm", "--skip", "collectives", "--skip", "memory", "--storage",
               str(tmp_path / "missing")).code == 2
    with pytest.raises(SpecError, match="precision"):
        bm.gemm(["fp7"], n=8)


def test_dist_bench_under_launcher_env(monkeypatch):
    """The multi-node stage's module, run as torchrun would start a single rank (env:// rendezvous)."""
    from clustertwin.ops.perf import dist_bench

    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(bc.free_port()), "RANK": "0", "WORLD_SIZE": "1",
                 "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    res = dist_bench.run("all_reduce", bc.sweep_sizes(4 * KIB, 64 * KIB, 4), backend="gloo")
    assert res is not None and res.world_size == 1 and [r.size_bytes for r in res.rows] == [4096, 16384, 65536]
    assert all(r.wrong == 0 and r.algbw_gb_per_s > 0 for r in res.rows)


def _uneven_worker(rank: int, init_method: str, out_dir: str) -> None:
    """Rank 1 is slower per call; both ranks must still issue the same number of all_reduce calls."""
    import time as _time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    try:
        x = torch.ones(1024)

        def call() -> None:
            if rank == 1:
                _time.sleep(0.002)
            dist.all_reduce(x)

        t = bm.timed_collective(call, lambda: None, dist, torch, torch.device("cpu"))
        (Path(out_dir) / f"rank{rank}").write_text(str(t))
    finally:
        dist.destroy_process_group()


def test_collective_timing_agrees_on_the_repeat_count_across_ranks(tmp_path):
    """Per-rank clocks differ; a repeat count decided locally would desynchronise the ranks (gloo aborts)."""
    import torch.multiprocessing as mp

    mp.start_processes(_uneven_worker, args=(f"tcp://127.0.0.1:{bc.free_port()}", str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    times = [float((tmp_path / f"rank{r}").read_text()) for r in (0, 1)]
    assert all(t >= 0.002 for t in times)  # every call waited for the slow rank
