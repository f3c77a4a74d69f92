"""Mechanisms of issue 16: launch modes, NVLSTree forced on one node, chunked phase composition, the tree
per-channel cap, symmetric-memory kernels, and the expert-parallel all-to-all (NCCL and DeepEP)."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin.comm import DEFAULT_PARAMS, CommParams, collective, expert_all_to_all
from clustertwin.comm.alltoall import deepep_volumes, distinct
from clustertwin.comm.hierarchical import chunks, compose
from clustertwin.errors import SpecError

P = CommParams()


def test_launch_modes(make_cluster):
    c = make_cluster("dgx-h100", 1)
    mpi = collective(c, "all_reduce", 64.0, 8)
    one_process = collective(c, "all_reduce", 64.0, 8, gpus_per_process=8)
    graph = collective(c, "all_reduce", 64.0, 8, cuda_graph=True)
    assert one_process.time_s - mpi.time_s == pytest.approx(7 * P.launch_us * 1e-6, rel=1e-6)
    assert mpi.time_s - graph.time_s == pytest.approx((P.launch_us - P.graph_launch_us) * 1e-6, rel=1e-6)
    with pytest.raises(SpecError, match="gpus_per_process"):
        collective(c, "all_reduce", 64.0, 8, gpus_per_process=0)


def test_forced_nvlstree_on_one_node_runs_as_nvls(make_cluster):
    c = make_cluster("dgx-h100", 1)
    forced = collective(c, "all_reduce", 2.0**30, 8, algorithm="nvlstree")
    nvls = collective(c, "all_reduce", 2.0**30, 8, algorithm="nvls")
    assert forced.algorithm == "nvls" and forced.time_s == nvls.time_s


def test_two_phase_composition_is_sum_for_one_chunk_and_max_for_many():
    t1, t2 = np.array([3.0, 3.0]), np.array([1.0, 1.0])
    k = chunks(np.array([1.0, 1e12]), P.chunk_bytes, P.channels)
    out = compose(t1, t2, k)
    assert out[0] == pytest.approx(4.0) and out[1] == pytest.approx(3.0, rel=1e-5)


def test_tree_per_channel_cap_on_blackwell_across_three_or_more_nodes(make_cluster):
    """Blackwell tree busBw <= channels x 24 GB/s at >= 3 nodes: algbw <= 0.5 x 16 x 24 = 192 GB/s."""
    c = make_cluster("gb200-nvl72", 20)
    res = collective(c, "all_reduce", 2.0**36, 1440, algorithm="tree", protocol="Simple")
    assert res.algbw_gb_per_s <= 0.5 * P.channels * 24.0 * 1.0001
    assert res.algbw_gb_per_s > 0.9 * 0.5 * P.channels * 24.0


def test_nvls_on_a_whole_nvl72_rack_is_capped_by_the_switch_fanin(make_cluster):
    """72 local ranks exceed NCCL_MAX_NVLS_ARITY (32 heads) but NVLS all-reduce still runs (enqueue.cc
    drops only all_gather / reduce_scatter); algbw = min(link x eff x 32/33, fan-in ceiling / 72)."""
    c = make_cluster("gb200-nvl72", 1)
    big = 2.0**40  # fill and latency negligible
    rack = collective(c, "all_reduce", big, 72, algorithm="nvls")
    assert rack.algbw_gb_per_s == pytest.approx(P.nvls_fanin_gb_per_s / 72, rel=1e-3)
    eight = collective(c, "all_reduce", big, 8, algorithm="nvls")  # link-bound: 720 x 0.74 x 8/9
    assert eight.algbw_gb_per_s == pytest.approx(720 * 0.74 * 8 / 9, rel=1e-3)
    assert collective(c, "all_reduce", 2.0**30, 72).algorithm == "nvls"
    with pytest.raises(SpecError, match="not available"):
        collective(c, "all_reduce", 2.0**30, 72, algorithm="nvls", nvls=False)


def test_nvls_disabled_falls_back_to_ring_or_tree(make_cluster):
    c = make_cluster("dgx-h100", 2)
    on = collective(c, "all_reduce", 2.0**28, 16)
    off = collective(c, "all_reduce", 2.0**28, 16, nvls=False)
    assert on.algorithm == "nvlstree" and off.algorithm in ("ring", "tree")


def test_symmetric_memory_kernels_only_when_asked(make_cluster):
    c = make_cluster("dgx-b200", 1)
    plain = collective(c, "all_reduce", 32768.0, 8, cuda_graph=True)
    symm = collective(c, "all_reduce", 32768.0, 8, cuda_graph=True, symmetric_memory=True)
    assert plain.algorithm != "symmetric" and symm.algorithm == "symmetric"
    assert symm.time_s < 0.5 * plain.time_s


def test_deepep_volumes():
    assert distinct(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8))
    one = deepep_volumes(1, 8)
    assert one.rdma == 0 and one.nvlink == one.reported == pytest.approx(distinct(8, 8))
    two = deepep_volumes(2, 8)
    m = distinct(2, 8)
    assert two.reported == pytest.approx(m) and two.rdma == pytest.approx(m / 2)
    assert deepep_volumes(8, 8).reported == 4  # node-limited routing: at most 4 nodes per token


def test_expert_all_to_all_kernels(make_cluster):
    c = make_cluster("hgx-h800", 8)
    tokens = np.array([128.0, 4096.0])
    normal = expert_all_to_all(c, 64, tokens, 7168, kernel="deepep")
    low = expert_all_to_all(c, 64, tokens, 7168, kernel="deepep_ll")
    nccl = expert_all_to_all(c, 64, tokens, 7168, kernel="nccl")
    assert normal.time_s.shape == (2,) and np.all(np.diff(normal.time_s) > 0)
    assert low.time_s[0] > (P.launch_us + P.deepep_ll_overhead_us) * 1e-6  # fixed IBGDA cost
    assert normal.rdma_bytes[1] == pytest.approx(4096 * 7168 * deepep_volumes(8, 8).rdma)
    assert np.all(nccl.time_s > 0)
    combine = expert_all_to_all(c, 64, 4096.0, 7168, phase="combine")
    dispatch = expert_all_to_all(c, 64, 4096.0, 7168, phase="dispatch")
    assert isinstance(combine.time_s, float) and combine.time_s > 1.8 * dispatch.time_s  # BF16 vs FP8
    fewer = expert_all_to_all(c, 64, 4096.0, 7168, top_k=2)
    assert fewer.time_s < dispatch.time_s
    with pytest.raises(SpecError, match="did you mean 'deepep'"):
        expert_all_to_all(c, 64, 4096.0, 7168, kernel="deepepp")


def test_caches_are_keyed_by_value(make_cluster):
    """Two equal cluster specs (different objects) share the prepared candidates and the topology."""
    from clustertwin.comm import model, span

    a, b = make_cluster("dgx-h100", 4), make_cluster("dgx-h100", 4)
    assert a is not b and a == b
    collective(a, "all_reduce", 1.0, 32)
    entries = len(model._prepared_cache)
    collective(b, "all_reduce", 1.0, 32)
    assert len(model._prepared_cache) == entries
    assert span._topology(a) is span._topology(b)


def test_send_recv_channels_follow_nccl_p2p_chunking():
    """NCCL's calcP2pChunkSize on 8 ranks of an A100 NVSwitch node: 24 channels per peer -> 32, min 4 and
    max 16 for 8 ranks; parts over 16 MiB (32 x 512 KiB) double the channels: 4 up to 64 MiB, 8 at
    128 MiB, 16 from 256 MiB (the sendrecv_perf knee between 128 and 256 MiB)."""
    from clustertwin.comm import p2p

    per_peer = p2p.channels_per_peer(300 / 25)
    assert per_peer == 32
    lo, hi = p2p.channel_range(per_peer, 8)
    assert (lo, hi) == (4, 16)
    sizes = np.array([1 << 20, 64 << 20, 128 << 20, 256 << 20, 1 << 30])
    assert p2p.p2p_channels(sizes, lo, hi, 524288, False).tolist() == [4, 4, 8, 16, 16]
    assert p2p.p2p_channels(np.array([4096.0]), lo, hi, 524288, False).tolist() == [1]  # 64 KiB parts min
    assert p2p.channel_range(per_peer, 2) == (16, 32)


def test_send_recv_bandwidth_knee_on_a100(make_cluster):
    c = make_cluster("dgx-a100-80gb", 1, fabric="ib-hdr")
    r = collective(c, "send_recv", np.array([128 << 20, 256 << 20, 1 << 30], dtype=float), 8)
    per_channel = DEFAULT_PARAMS.p2p_channel_link_fraction * 20.0
    transfer = r.breakdown["transfer_s"]
    assert (128 << 20) / transfer[0] / 1e9 == pytest.approx(8 * per_channel, rel=1e-6)
    assert (1 << 30) / transfer[2] / 1e9 == pytest.approx(16 * per_channel, rel=1e-6)
    assert r.algbw_gb_per_s[1] > 1.6 * r.algbw_gb_per_s[0]
