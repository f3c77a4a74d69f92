"""Properties of the collective model: monotonic busbw, latency vs bandwidth regimes, algorithm choice,
hardware effects (NVLS, meshes, PCIe, RoCE vs IB, shared NICs), errors and calibration."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin import specs
from clustertwin.comm import ALGORITHMS, OPS, CommParams, collective
from clustertwin.errors import SpecError

SIZES = 2.0 ** np.arange(3, 35)  # 8 B .. 16 GiB
A100_4NIC = {"gpu": "a100-sxm-80gb", "gpus": 8, "scale_up": {"kind": "nvswitch", "gb_per_s": 300},
             "nics": {"count": 4, "gbit_per_s": 200}}


GROUPS = [("dgx-h100", 256, 2048), ("dgx-h100", 4, 32), ("dgx-a100-80gb", 2, 16), ("mi300x-8", 4, 32),
          ("k80-4", 4, 16), ("dgx-h100", 1, 8), ("dgx-b200", 64, 512)]


@pytest.mark.parametrize(("node", "nodes", "gpus"), GROUPS)
@pytest.mark.parametrize("op", OPS)
def test_busbw_non_decreasing_per_algorithm(make_cluster, node, nodes, gpus, op):
    c = make_cluster(node, nodes)
    default = collective(c, op, SIZES, gpus)
    algos = set(default.algorithm) | {"ring", "direct"}
    for algo in sorted(algos & set(ALGORITHMS)):
        try:
            res = collective(c, op, SIZES, gpus, algorithm=algo)
        except SpecError:
            continue
        bus = res.busbw_gb_per_s
        # non-decreasing within one protocol; where NCCL's tuner switches protocol (its latency table is not
        # the physical one) a dip of at most 20% is allowed, as real nccl-tests sweeps show
        same = res.protocol[1:] == res.protocol[:-1]
        assert np.all(np.where(same, np.diff(bus) >= -1e-9 * bus[1:], bus[1:] >= 0.8 * bus[:-1])), (algo, bus)
        assert np.all(np.isfinite(res.time_s)) and np.all(res.time_s > 0)


@pytest.mark.parametrize("op", OPS)
def test_small_latency_bound_large_bandwidth_bound(ref_cluster, op):
    res = collective(ref_cluster, op, np.array([8.0, 8 * 2.0**30]), 1024)
    lat, xfer = res.breakdown["latency_s"], res.breakdown["transfer_s"]
    assert xfer[0] < 0.01 * lat[0]  # 8 B: time = α terms
    assert res.time_s[0] == pytest.approx(lat[0], rel=0.01)
    assert xfer[1] > 0.5 * res.time_s[1]  # 8 GiB: bandwidth term dominates
    assert res.breakdown["bottleneck"][0] == "latency"
    assert res.breakdown["bottleneck"][1] != "latency"


@pytest.mark.parametrize("gpus", [1024, 2048, 8192])
def test_tree_beats_ring_for_small_messages_at_scale(make_cluster, gpus):
    c = make_cluster("dgx-h100", gpus // 8)
    small = 2.0 ** np.arange(3, 17)  # 8 B .. 64 KiB
    tree = collective(c, "all_reduce", small, gpus, algorithm="tree")
    ring = collective(c, "all_reduce", small, gpus, algorithm="ring")
    assert np.all(tree.time_s < ring.time_s / 5)
    assert set(collective(c, "all_reduce", small, gpus).algorithm) == {"tree"}


@pytest.mark.parametrize("node", ["dgx-h100", "dgx-h200"])
def test_nvls_wins_intra_node_large_all_reduce(make_cluster, node):
    c = make_cluster(node, 1)
    big = 2.0 ** np.arange(27, 34)  # 128 MiB .. 8 GiB
    res = collective(c, "all_reduce", big, 8)
    assert set(res.algorithm) == {"nvls"}
    ring = collective(c, "all_reduce", big, 8, algorithm="ring")
    assert np.all(res.time_s < ring.time_s)
    # NVLS algbw = 450 x 0.8 x 0.85 x 8/9 (S (1 + 1/n) per NVSwitch port direction)
    assert res.algbw_gb_per_s[-1] == pytest.approx(450 * 0.8 * 0.85 * 8 / 9, rel=0.01)


def test_no_nvls_on_ampere(make_cluster):
    c = make_cluster("dgx-a100-80gb", 1)
    with pytest.raises(SpecError, match="not available"):
        collective(c, "all_reduce", 2.0**30, 8, algorithm="nvls")


def test_two_node_a100_default_is_ring_and_tree_can_exceed_the_network(make_cluster):
    """NCCL's tuner sizes ring and tree by the NVLink graph on <= 2 nodes and picks the ring for large
    messages; the ring is then limited by 4 HDR NICs (4 x 25 x 0.80 = 80 GB/s). A forced tree moves only S
    per node over the network on 2 nodes, so its busbw exceeds the NIC rate (nccl-tests#196, #290)."""
    c = make_cluster(A100_4NIC, 2, fabric="ib-hdr")
    res = collective(c, "all_reduce", 8 * 2.0**30, 16)
    assert res.algorithm == "ring"
    assert res.busbw_gb_per_s == pytest.approx(80.0, rel=0.01)
    tree = collective(c, "all_reduce", 8 * 2.0**30, 16, algorithm="tree")
    assert tree.busbw_gb_per_s > 1.5 * 80.0


def test_concurrent_groups_share_nics(ref_cluster):
    """TP = 8 x DP = 128: each DP group has 1 rank per node and 1/8 of the NICs (47 GB/s)."""
    size = 2.0**36  # 64 GiB: the ring's α terms (NCCL's ~5-9 ms at 128 nodes) are < 5%
    full = collective(ref_cluster, "all_reduce", size, 1024, algorithm="ring")
    dp = collective(ref_cluster, "all_reduce", size, 128, ranks_per_node=1, algorithm="ring")
    assert dp.nodes == 128
    assert dp.busbw_gb_per_s < 47.0
    assert dp.busbw_gb_per_s == pytest.approx(47.0, rel=0.05)
    assert full.busbw_gb_per_s > 6 * dp.busbw_gb_per_s
    half = collective(ref_cluster, "all_reduce", size, 512, ranks_per_node=4, algorithm="ring")
    assert half.busbw_gb_per_s == pytest.approx(4 * 47.0, rel=0.05)


def test_all_to_all_cannot_aggregate_nics(make_cluster):
    """nccl-tests#267: all-to-all runs at single-NIC speed per GPU even with 8 NICs per node."""
    c = make_cluster("dgx-h100", 16)
    a2a = collective(c, "all_to_all", 2.0**32, 128)
    assert a2a.busbw_gb_per_s < 47.0 * 128 / 120 + 1e-9
    assert a2a.breakdown["bottleneck"] == "network"


def test_mesh_ring_uses_the_links_of_its_ranks(make_cluster):
    """MI300X: 7 x 64 GB/s Infinity Fabric links; 2 ranks use one link, 8 ranks all seven."""
    c = make_cluster("mi300x-8", 1, fabric="roce-400g")
    two = collective(c, "all_reduce", 2.0**32, 2, algorithm="ring", protocol="Simple")
    eight = collective(c, "all_reduce", 2.0**32, 8, algorithm="ring", protocol="Simple")
    eff = CommParams().mesh_efficiency  # 0.71: RCCL's measured 8-GPU asymptote (comm/params.py)
    assert two.busbw_gb_per_s == pytest.approx(448 / 7 * eff, rel=0.01)
    assert eight.busbw_gb_per_s == pytest.approx(448 * eff, rel=0.01)
    sr = collective(c, "send_recv", 2.0**32, 8)
    assert sr.busbw_gb_per_s == pytest.approx(448 / 7 * eff, rel=0.01)


def test_pcie_node_uses_pcie_bandwidth_and_latency(make_cluster):
    c = make_cluster("k80-4", 1, fabric="eth-10g")
    res = collective(c, "all_reduce", 2.0**30, 4, algorithm="ring", protocol="Simple")
    assert res.busbw_gb_per_s == pytest.approx(12 * 0.76, rel=0.01)  # node declares 12 GB/s PCIe
    small = collective(c, "all_reduce", 8.0, 4, algorithm="ring", protocol="Simple")
    p = CommParams()
    assert small.time_s == pytest.approx((p.launch_us + 6 * p.pcie_hop_us_simple) * 1e-6, rel=0.01)  # 6 PCIe steps


def test_roce_congestion_beyond_one_leaf(make_cluster):
    """Same hardware on IB and RoCE: within one leaf equal; across leaves RoCE pays congestion_penalty."""
    ib = make_cluster("dgx-h100", 128, fabric="ib-ndr")
    roce = make_cluster("dgx-h100", 128, fabric="roce-400g")
    one_leaf_ib = collective(ib, "all_reduce", 2.0**32, 16, ranks_per_node=1, algorithm="ring")
    one_leaf_roce = collective(roce, "all_reduce", 2.0**32, 16, ranks_per_node=1, algorithm="ring")
    assert one_leaf_ib.breakdown["leaves"] == 1
    assert one_leaf_roce.busbw_gb_per_s == pytest.approx(one_leaf_ib.busbw_gb_per_s, rel=1e-3)
    many_ib = collective(ib, "all_reduce", 2.0**32, 1024, ranks_per_node=8, algorithm="ring")
    many_roce = collective(roce, "all_reduce", 2.0**32, 1024, ranks_per_node=8, algorithm="ring")
    assert many_ib.breakdown["leaves"] > 1
    assert many_roce.busbw_gb_per_s < many_ib.busbw_gb_per_s


def test_oversubscribed_spine_slows_cross_leaf_rings(make_cluster):
    flat = make_cluster("dgx-h100", 128, topology="fat-tree")
    over = make_cluster("dgx-h100", 128, topology="fat-tree", oversubscription=2.0)
    a = collective(flat, "all_reduce", 2.0**35, 1024, algorithm="ring")  # large: the ring's α is small beside it
    b = collective(over, "all_reduce", 2.0**35, 1024, algorithm="ring")
    assert b.busbw_gb_per_s < 0.6 * a.busbw_gb_per_s


def test_collnet_only_when_forced_and_sharp(make_cluster, ref_cluster):
    default = collective(ref_cluster, "all_reduce", SIZES, 1024)
    assert "collnet" not in set(default.algorithm)
    sharp = collective(ref_cluster, "all_reduce", 2.0**32, 1024, algorithm="collnet")
    assert sharp.algorithm == "collnet"
    no_sharp = make_cluster("dgx-h100", 16, fabric="roce-400g")
    with pytest.raises(SpecError, match="not available"):
        collective(no_sharp, "all_reduce", 2.0**32, 128, algorithm="collnet")


def test_pat_for_one_rank_per_node(ref_cluster):
    res = collective(ref_cluster, "all_gather", 2.0**20, 128, ranks_per_node=1, algorithm="pat")
    assert res.algorithm == "pat"
    with pytest.raises(SpecError, match="not available"):
        collective(ref_cluster, "all_gather", 2.0**20, 1024, algorithm="pat")


def test_scalar_in_scalar_out_and_arrays(ref_cluster):
    s = collective(ref_cluster, "all_reduce", 1e6, 64)
    assert isinstance(s.time_s, float) and isinstance(s.algorithm, str) and isinstance(s.busbw_gb_per_s, float)
    assert isinstance(s.breakdown["latency_s"], float)
    a = collective(ref_cluster, "all_reduce", np.array([1e6, 2e6]), 64)
    assert a.time_s.shape == (2,) and a.algorithm.shape == (2,)
    assert a.time_s[0] == pytest.approx(s.time_s)
    assert s.to_dict()["op"] == "all_reduce"


def test_one_gpu_costs_nothing(ref_cluster):
    res = collective(ref_cluster, "all_reduce", 1e9, 1)
    assert res.time_s == 0.0 and res.busbw_gb_per_s == 0.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"op": "alreduce"}, "did you mean 'all_reduce'"),
    ({"algorithm": "rign"}, "did you mean 'ring'"),
    ({"protocol": "ll129"}, "did you mean 'll128'"),
    ({"gpus": 4096}, "exceeds the cluster"),
    ({"gpus": 0}, ">= 1"),
    ({"ranks_per_node": 9}, "between 1 and 8"),
    ({"nbytes": -1.0}, ">= 0"),
    ({"op": "all_gather", "algorithm": "tree"}, "not available"),
])
def test_bad_input_raises_spec_error(ref_cluster, kwargs, message):
    args = {"op": "all_reduce", "nbytes": 1e6, "gpus": 64, **kwargs}
    with pytest.raises(SpecError, match=message):
        collective(ref_cluster, args.pop("op"), args.pop("nbytes"), args.pop("gpus"), **args)


def test_params_overrides_and_calibration(ref_cluster):
    with pytest.raises(SpecError, match="did you mean 'nvlink_efficiency'"):
        CommParams().with_overrides({"nvlink_eficiency": 0.7})
    with pytest.raises(SpecError):
        CommParams().with_overrides({"nvlink_efficiency": 1.5})
    base = collective(ref_cluster, "all_reduce", 2.0**32, 8, algorithm="ring")
    cal = specs.Calibration(comm={"nvlink_efficiency": 0.7})
    slower = collective(ref_cluster, "all_reduce", 2.0**32, 8, algorithm="ring", calibration=cal)
    assert slower.busbw_gb_per_s == pytest.approx(base.busbw_gb_per_s * 0.7 / 0.8, rel=0.01)
    p = CommParams(proxy_step_us_ll=5.0)
    assert collective(ref_cluster, "all_reduce", 8.0, 1024, params=p).time_s > \
        collective(ref_cluster, "all_reduce", 8.0, 1024).time_s


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("gpus", "ppn"), [(2, None), (16, None), (128, 1), (1024, None)])
def test_scalar_path_matches_vector_path(ref_cluster, op, gpus, ppn):
    sizes = 2.0 ** np.arange(0, 36, 3)
    vec = collective(ref_cluster, op, sizes, gpus, ranks_per_node=ppn)
    for i, s in enumerate(sizes):
        one = collective(ref_cluster, op, float(s), gpus, ranks_per_node=ppn)
        assert one.time_s == pytest.approx(vec.time_s[i], rel=1e-12)
        assert (one.algorithm, one.protocol) == (vec.algorithm[i], vec.protocol[i])
        assert one.breakdown["bottleneck"] == vec.breakdown["bottleneck"][i]
