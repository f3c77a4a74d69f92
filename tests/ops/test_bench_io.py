"""Storage through fio (real fio, JSON output) and host memory through a multi-threaded STREAM triad; each
result names the tool. fio comes from the Debian package (installed by .ci/run): without it the fio test skips
locally and fails in CI."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from clustertwin.errors import SpecError
from clustertwin.ops.perf import bench_io
from clustertwin.units import MIB


@pytest.fixture(scope="module")
def fio() -> None:
    if shutil.which("fio") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run fio (apt-get install fio)")
        pytest.skip("fio not installed")


def test_fio_storage_measures_and_says_so(fio, tmp_path):
    st = bench_io.fio_storage(tmp_path, 16 * MIB, iodepth=8, ssd_id="pm9a3", runtime_s=1)
    assert st.tool.startswith("fio-") and "QD8" in st.tool
    assert st.seq_write_gb_per_s > 0.01 and st.seq_read_gb_per_s > 0.01 and st.rand_read_iops > 100
    assert st.expected["rand_read_iops"] > 0
    assert not list(tmp_path.iterdir())  # the test file is removed


def test_fio_json_parsing_sums_jobs():
    doc = {"fio version": "fio-3.33", "jobs": [{"read": {"bw_bytes": 1e9, "iops": 250000.0},
                                                "write": {"bw_bytes": 0, "iops": 0}},
                                               {"read": {"bw_bytes": 2e9, "iops": 500000.0},
                                                "write": {"bw_bytes": 0, "iops": 0}}]}
    assert bench_io.parse_fio(json.loads(json.dumps(doc)), "read") == (3e9, 750000.0)
    with pytest.raises(SpecError):
        bench_io.parse_fio({"jobs": []}, "read")


def test_stream_triad_threads_and_label():
    r = bench_io.stream_triad(12 * MIB, threads=2, use_torch=False)
    assert r.tool == "STREAM triad, numpy two-pass, 2 threads" and r.gb_per_s > 0.2
    pytest.importorskip("torch")
    t = bench_io.stream_triad(12 * MIB, threads=2)
    assert t.tool == "STREAM triad, torch.add fused, 2 threads" and t.gb_per_s > 0.2
    with pytest.raises(SpecError):
        bench_io.stream_triad(1024)


def test_node_bench_cli_names_the_tools(cli):
    res = cli("node", "bench", "--skip", "gemm", "--skip", "collectives", "--memory-mib", "6", "--storage-mib", "16",
              "--iodepth", "2", "--json")
    assert res.code == 0, res.stderr
    d = json.loads(res.stdout)
    assert [m["tool"].split(",")[0] for m in d["memory"]] == ["numpy copyto", "STREAM triad"]
    assert cli("node", "bench", "--skip", "gemm", "--storage-tool", "dd").code == 2


def test_python_storage_fallback_is_labelled(tmp_path):
    from clustertwin.ops.perf import bench_storage

    st = bench_storage.storage(tmp_path, 8 * MIB, iodepth=2, rand_seconds=0.2)
    assert st.tool.startswith("python") and "fio not installed" in st.tool
