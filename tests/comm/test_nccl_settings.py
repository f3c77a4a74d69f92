"""The run's NCCL settings as model inputs: the release (version-dependent rules), NCCL_NVLS_ENABLE, and the
pipeline fills that follow NCCL's chunking (tree chains, NVLS loops)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clustertwin.comm import CommParams, collective
from clustertwin.comm.hierarchical import chain_fill_s, nvls_chunk_bytes, nvls_fill_s
from clustertwin.comm.nccl_tests import format_log, parse_log
from clustertwin.comm.nccl_version import CURRENT_VERSION, nvls_channels, parse_version
from clustertwin.comm.validation import evaluate
from clustertwin.errors import SpecError

P = CommParams()
KIB = 1024
MIB = 1024 * KIB


@pytest.mark.parametrize(("text", "expected"), [
    ("2.26.2", (2, 26, 2)), ("2.26.2-1", (2, 26, 2)), ("2.26.2+cuda12.8", (2, 26, 2)), ("v2.27", (2, 27, 0)),
    (None, CURRENT_VERSION),
])
def test_parse_version(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["2", "two.26", "2.x.1", ""])
def test_parse_version_rejects_non_releases(text):
    with pytest.raises(SpecError, match="not a release number"):
        parse_version(text)


def test_ll128_across_nodes_on_grace_needs_nccl_2_27(make_cluster):
    """tuning.cc: LL128 between nodes needs typeInter <= PATH_PXN before 2.27; a Grace GPU reaches its NIC
    through the CPU (PHB). 2.27 adds PATH_P2C with NCCL_LL128_C2C=1."""
    c = make_cluster("gb200-nvl72", 2)
    with pytest.raises(SpecError, match="protocol 'LL128' is not available"):
        collective(c, "all_reduce", 2.0**24, 144, protocol="LL128", nccl_version="2.26.2")
    assert collective(c, "all_reduce", 2.0**24, 144, protocol="LL128", nccl_version="2.27.3").protocol == "LL128"
    # one NVLink domain: no network path, LL128 on in every release
    one = make_cluster("gb200-nvl72", 1)
    assert collective(one, "all_reduce", 2.0**24, 72, protocol="LL128", nccl_version="2.25.1").protocol == "LL128"
    # x86 hosts with NICs under the GPUs' PCIe switches are not affected
    h100 = make_cluster("dgx-h100", 2)
    assert collective(h100, "all_reduce", 2.0**24, 16, protocol="LL128", nccl_version="2.18.5").protocol == "LL128"


def test_nvls_channels_by_release():
    assert nvls_channels("hopper", 1, (2, 26, 2)) == 16
    assert nvls_channels("blackwell", 1, (2, 26, 2)) == 32
    assert nvls_channels("blackwell", 1, (2, 27, 3)) == 24  # NVLS_NCHANNELS_SM100_NVL
    assert nvls_channels("blackwell", 2, (2, 27, 3)) == 32


def test_nvls_chunk_rules_follow_enqueue_cc():
    ops = 32 * 32  # 32 channels x 32 heads (a whole NVL72 rack)
    sizes = np.array([512 * MIB, 8 * 1024 * MIB, 16 * MIB, 1 * MIB])
    got = nvls_chunk_bytes(sizes, ops, P)
    # 512 MiB < 64 x 1024 x 128 KiB (8 GiB) -> 64 KiB, not < 8 x 1024 x 64 KiB (512 MiB): stays 64 KiB;
    # 8 GiB is not < 8 GiB: 128 KiB; 16 MiB -> 64 KiB -> 32 KiB (< 512 MiB) -> 16 KiB (< 2 x 1024 x 32 KiB)
    assert got.tolist() == [64 * KIB, 128 * KIB, 16 * KIB, 16 * KIB]
    # NVLSTree: 128 KiB where S < 16 ops chunk, 64 KiB where S < 4 ops chunk, 32 KiB where S < ops chunk
    tree = nvls_chunk_bytes(np.array([512 * MIB, 256 * MIB, 64 * MIB, 32 * MIB]), ops, P, tree=True, nodes=2)
    assert tree.tolist() == [128 * KIB, 64 * KIB, 64 * KIB, 32 * KIB]
    # from 4 nodes NVLSTree starts at 64 KiB (NCCL_NVLSTREE_MAX_CHUNKSIZE default)
    assert nvls_chunk_bytes(np.array([2.0**34]), ops, P, tree=True, nodes=4).tolist() == [64 * KIB]


def test_nvls_loop_fill_hand_value():
    """A 72-GPU rack at 512 MiB: loop = 1024 ops x 64 KiB = 64 MiB; fill = 2 loops / algbw."""
    algbw = 437.5
    got = nvls_fill_s(np.array([512.0 * MIB]), np.array(1024), np.array(2), np.array(False), np.array(algbw), P)
    assert got[0] == pytest.approx(P.nvls_fill_loops * 64 * MIB / (algbw * 1e9))
    # smaller than a loop: the whole message crosses the stages in turn
    small = nvls_fill_s(np.array([1.0 * MIB]), np.array(1024), np.array(2), np.array(False), np.array(algbw), P)
    assert small[0] == pytest.approx(P.nvls_fill_loops * MIB / (algbw * 1e9))


def test_tree_chain_fill_hand_value():
    """A 20-rack NVL72 tree: D = 2 (71 + 4) = 150 stages; 149 steps of 512 KiB at 25 GB/s = 3.1 ms."""
    got = chain_fill_s(np.array([2.0**29, 2.0**10]), np.array(150), P)
    assert got[0] == pytest.approx(149 * 512 * KIB / 25e9)
    assert got[1] == pytest.approx(149 * 2.0**10 / P.channels / 25e9)  # a message smaller than one step
    assert chain_fill_s(np.array([2.0**29]), np.array(0), P)[0] == 0.0


def test_twenty_rack_tree_pays_its_chain_fill(make_cluster):
    """CoreWeave's 20-rack table (NCCL 2.26.2, NVLS off): T = ~4.6 ms + S / ~212 GB/s; the model's tree."""
    c = make_cluster("gb200-nvl72", 20)
    kw = {"nccl_version": "2.26.2", "nvls": False}
    res = collective(c, "all_reduce", np.array([2.0**29, 2.0**31]), 1440, **kw)
    assert list(res.algorithm) == ["tree", "tree"] and list(res.protocol) == ["Simple", "Simple"]
    measured_us = np.array([7108.4, 14980.0])
    assert np.all(np.abs(res.time_s * 1e6 / measured_us - 1) < 0.10)
    fill = res.breakdown["fill_s"]
    assert fill[0] == pytest.approx(149 * 512 * KIB / (P.tree_stage_gb_per_s * 1e9))
    # at 512 MiB the fill is most of the time; at 2 GiB the per-channel tree cap binds
    assert list(res.breakdown["bottleneck"]) == ["fill", "protocol"]


def test_log_names_its_nccl_release():
    header = "# nccl-tests version 2.13.13 nccl-headers=22602 nccl-library=22602\n"
    body = format_log("all_reduce", np.array([1024.0]), np.array([10.0]), np.array([10.0]), 8)
    assert parse_log(header + body).nccl_version == "2.26.2"
    info = "host:1:1 [0] NCCL INFO NCCL version 2.25.1+cuda12.8\n"
    assert parse_log(info + body).nccl_version == "2.25.1"
    assert parse_log(body).nccl_version is None
    bench = "# all_reduce on 8 x NVIDIA H200, backend nccl (torch 2.13.0, NCCL 2.27.5)\n"  # node bench's header
    assert parse_log(bench + body).nccl_version == "2.27.5"
    named = format_log("all_reduce", np.array([1024.0]), np.array([10.0]), None, 8, nccl_version="2.27.3")
    assert parse_log(named).nccl_version == "2.27.3"


def test_comm_cli_takes_the_release_and_nvls(cli):
    args = ("comm", "all_reduce", "--cluster", "gb200-nvl72-576", "--gpus", "144", "-b", "512M", "-e", "512M",
            "--json")
    on = json.loads(cli(*args).stdout)["rows"][0]
    assert on["fill_us"] > 0 and on["latency_us"] > 0 and on["time_us"] > on["fill_us"] + on["latency_us"]
    off = cli(*args, "--no-nvls", "--nccl-version", "2.26.2")
    assert off.code == 0, off.stderr
    assert on["algorithm"] == "nvlstree" and json.loads(off.stdout)["rows"][0]["algorithm"] in ("ring", "tree")
    bad = cli(*args, "--nccl-version", "latest")
    assert bad.code == 2 and "not a release number" in bad.stderr
    log = cli("comm", "all_reduce", "--gpus", "8", "-b", "1M", "-e", "1M", "--nccl-version", "2.26.2",
              "--nccl-tests-log")
    assert parse_log(log.stdout).nccl_version == "2.26.2"


def test_validation_case_settings_are_checked():
    case = {"id": "x", "kind": "collective", "node": "gb200-nvl72", "nodes": 2, "op": "all_reduce",
            "bytes": 2**29, "measured": {"time_us": 1.0}}
    assert evaluate({**case, "nvls": False, "nccl_version": "2.26.2"})["algorithm"] in ("ring", "tree")
    assert evaluate(case)["algorithm"] == "nvlstree"
    with pytest.raises(SpecError, match="expected true or false"):
        evaluate({**case, "nvls": "no"})
    with pytest.raises(SpecError, match="not a release number"):
        evaluate({**case, "nccl_version": "new"})
