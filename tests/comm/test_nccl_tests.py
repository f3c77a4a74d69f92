"""nccl-tests logs: a real published log parses row for row; malformed and #wrong rows are counted;
a synthetic log from perturbed parameters is fitted back within 5%; `calibrate --nccl-tests` writes a
Calibration that `comm` accepts."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from tests.conftest import FIXTURES

from clustertwin.comm import CommParams, collective
from clustertwin.comm.nccl_tests import fit, format_log, parse_log, ranks_per_node

GCP_LOG = FIXTURES / "nccl_tests" / "gcp_a3mega_2node_all_reduce_perf.log"
SIZES = 2.0 ** np.arange(3, 34, 1)  # 8 B .. 8 GiB
TRUE = {"nvlink_efficiency": 0.72, "launch_us": 6.3, "nvlink_hop_us_ll": 0.75}


def test_published_log_parses_every_row():
    log = parse_log(GCP_LOG.read_text(), GCP_LOG.name)
    assert (log.op, log.ranks, log.hosts, log.gpus_per_process, log.cuda_graph) == ("all_reduce", 16, 2, 1, False)
    assert len(log.rows) == 31 and log.blocks == 62
    assert log.wrong_rows == 0 and log.malformed == []
    first, last = log.rows[0], log.rows[-1]
    assert (first.size_bytes, first.out_of_place.time_us, first.in_place.time_us) == (8, 135.8, 123.5)
    assert (last.size_bytes, last.out_of_place.busbw_gb_per_s, last.in_place.busbw_gb_per_s) == (
        8589934592, 338.82, 337.35)


def test_malformed_and_wrong_rows_are_counted():
    text = GCP_LOG.read_text().replace(
        "        2048           512     float     sum      -1    125.8    0.02    0.03      0",
        "        2048           512     float     sum      -1    125.8    0.02    0.03      7")
    text += "    4096 1024 float sum -1 garbage\n"
    log = parse_log(text, "all_reduce_perf.log")
    assert log.wrong_rows == 1
    assert len(log.malformed) == 1 and "garbage" in log.malformed[0]


def test_log_without_in_place_block_and_without_redop_root():
    text = ("# Collective test starting: all_gather_perf\n"
            "   1048576  32768  float  25.10  41.78  36.56  N/A\n"
            "   2097152  65536  float  30.20  69.44  60.76  N/A\n")
    log = parse_log(text)
    assert log.op == "all_gather" and len(log.rows) == 2
    assert log.rows[0].in_place is None and log.rows[0].out_of_place.wrong is None


def _synthetic(cluster, op: str, params: CommParams) -> str:
    t = np.asarray(collective(cluster, op, SIZES, 8, params=params).time_s) * 1e6
    return format_log(op, SIZES, t, t * 1.01, 8)


def test_round_trip_recovers_perturbed_parameters(ref_cluster):
    truth = CommParams().model_copy(update=TRUE)
    logs = [parse_log(_synthetic(ref_cluster, op, truth), f"{op}.log") for op in ("all_reduce", "all_gather")]
    assert all(lg.blocks == 2 * SIZES.size for lg in logs)
    res = fit(ref_cluster, logs)
    assert set(res.params) == set(TRUE)
    for name, value in TRUE.items():
        assert res.params[name] == pytest.approx(value, rel=0.05), name
    assert res.median_abs_error_after < 0.02 < res.median_abs_error_before


def test_calibrate_cli_writes_a_calibration_comm_accepts(cli, tmp_path, ref_cluster):
    truth = CommParams().model_copy(update=TRUE)
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(_synthetic(ref_cluster, "all_reduce", truth))
    out = tmp_path / "cal.yaml"
    r = cli("calibrate", "--nccl-tests", str(log), "--cluster", "ref-1k-h100", "-o", str(out), "--json")
    assert r.code == 0, r.stderr
    cal = yaml.safe_load(out.read_text())
    assert set(cal["comm"]) == set(TRUE) and "nccl-tests" in cal["source"]
    r2 = cli("comm", "all_reduce", "--cluster", "ref-1k-h100", "--gpus", "8", "--calibration", str(out), "--json")
    assert r2.code == 0, r2.stderr


def test_calibrate_cli_errors_are_one_line(cli, tmp_path):
    r = cli("calibrate", "--nccl-tests", str(tmp_path / "missing.log"))
    assert r.code == 2 and "not found" in r.stderr
    bad = tmp_path / "x.log"
    bad.write_text("hello\n")
    r = cli("calibrate", "--nccl-tests", str(bad))
    assert r.code == 2 and "cannot tell which collective" in r.stderr


def test_comm_prints_an_nccl_tests_log_that_reads_back(cli):
    r = cli("comm", "all_gather", "--cluster", "ref-1k-h100", "--gpus", "16", "-b", "1K", "-e", "1G",
            "--nccl-tests-log")
    assert r.code == 0, r.stderr
    log = parse_log(r.stdout)
    assert log.op == "all_gather" and log.ranks == 16 and log.hosts == 2 and log.blocks == 2 * len(log.rows)


def test_node_bench_format_reads_back_with_both_blocks():
    """`node bench` prints torch's in-place all_reduce in the in-place block (N/A out-of-place) and both
    blocks of all_gather; the reader counts exactly the timings that were measured."""
    from clustertwin.ops.perf import bench as bm
    from clustertwin.ops.perf import bench_collectives as bc

    rows = [bm.CollectiveRow(4096, 1024, 20.0, 0.2, 0.2, 0), bm.CollectiveRow(8192, 2048, 30.0, 0.27, 0.27, 0)]
    ar = bm.CollectiveResult("all_reduce", "gloo", 2, "2 CPU processes", rows, "torch", "in-place")
    log = parse_log(bc.format_nccl_tests(ar))
    assert log.op == "all_reduce" and log.blocks == 2
    assert log.rows[0].out_of_place is None and log.rows[0].in_place.time_us == 20.0
    both = [bm.CollectiveRow(4096, 1024, 20.0, 0.2, 0.1, 0, 18.0, 0)]
    ag = bm.CollectiveResult("all_gather", "gloo", 2, "2 CPU processes", both, "torch")
    log = parse_log(bc.format_nccl_tests(ag))
    assert log.blocks == 2 and log.rows[0].in_place.time_us == 18.0 and log.rows[0].out_of_place.time_us == 20.0


def test_calibrating_on_the_published_log_lowers_its_error():
    """The real GCP A3 Mega log (2 hosts, TCPXO): the fit picks the network-side terms (no scale-up
    efficiency from a multi-host log) and at least halves the median time error."""

    from clustertwin import specs

    cluster = specs.load(specs.ClusterSpec, str(GCP_LOG.parent / "gcp-a3mega-2vm.yaml"), kind="cluster")
    res = fit(cluster, [parse_log(GCP_LOG.read_text(), GCP_LOG.name)])
    assert "nvlink_efficiency" not in res.params and "network_efficiency" in res.params
    assert res.blocks_used == 62
    assert res.median_abs_error_after < 0.5 * res.median_abs_error_before


def test_round_trip_on_an_nvl72_rack_fits_the_nvls_fanin(make_cluster):
    """A whole-rack log (72 ranks, 18 trays counted as hosts, as nccl-tests prints them) pins the NVLS fan-in
    ceiling; the trays map onto the one 72-GPU NVLink domain (ranks_per_node)."""
    rack = make_cluster("gb200-nvl72", 1)
    truth = CommParams(nvls_fanin_gb_per_s=25000.0)
    sizes = 2.0 ** np.arange(20, 34)
    t = np.asarray(collective(rack, "all_reduce", sizes, 72, params=truth).time_s) * 1e6
    log = parse_log(format_log("all_reduce", sizes, t, t, 72, hosts=18), "all_reduce_perf.log")
    assert log.hosts == 18 and ranks_per_node(rack, log) == 72
    res = fit(rack, [log])
    assert "nvls_fanin_gb_per_s" in res.params
    assert res.params["nvls_fanin_gb_per_s"] == pytest.approx(25000.0, rel=0.05)
    assert res.median_abs_error_after < 0.02


def test_ranks_per_node_of_ordinary_hosts_is_ranks_over_hosts(ref_cluster):
    log = parse_log(format_log("all_reduce", np.array([1024.0]), np.array([10.0]), None, 16, hosts=4))
    assert ranks_per_node(ref_cluster, log) == 4


def test_round_trip_across_nvl72_racks_fits_the_tree_stage_rate(make_cluster):
    """Two racks with NVLS off (the log says so, as NCCL_DEBUG=INFO prints it): the tree's 144-stage chain
    fill pins ``tree_stage_gb_per_s``."""
    racks = make_cluster("gb200-nvl72", 2)
    truth = CommParams(tree_stage_gb_per_s=15.0)
    sizes = 2.0 ** np.arange(20, 35)
    t = np.asarray(collective(racks, "all_reduce", sizes, 144, params=truth, nvls=False,
                              nccl_version="2.26.2").time_s) * 1e6
    text = ("host:1:1 [0] NCCL INFO NCCL version 2.26.2+cuda12.8\n"
            "host:1:1 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.\n"
            + format_log("all_reduce", sizes, t, t, 144, hosts=36))
    log = parse_log(text, "all_reduce_perf.log")
    assert not log.nvls and log.nccl_version == "2.26.2" and ranks_per_node(racks, log) == 72
    res = fit(racks, [log])
    assert res.params["tree_stage_gb_per_s"] == pytest.approx(15.0, rel=0.05)
    assert res.median_abs_error_after < 0.02
