"""Explicit placement: span of arbitrary node sets, placement physics, validation and the CLI option."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clustertwin import specs
from clustertwin.comm import OPS, collective, nodes_placement
from clustertwin.comm.placement import explicit_placement, index_ranges, parse_index_list
from clustertwin.errors import SpecError
from clustertwin.topology import build

SIZES = 2.0 ** np.arange(3, 35)  # 8 B .. 16 GiB


def _fat_tree_2to1(make_cluster) -> specs.ClusterSpec:
    """40 DGX H100 on a 2:1 oversubscribed two-tier NDR fat-tree: 5 nodes per leaf."""
    return make_cluster("dgx-h100", 40, topology="fat-tree", oversubscription=2)


@pytest.mark.parametrize(("nodes", "network"), [
    (128, {"topology": "rail-optimized"}),
    (200, {"topology": "fat-tree", "oversubscription": 2}),
    (2000, {"topology": "fat-tree", "tiers": 3, "oversubscription": 1.5}),
    (300, {"topology": "dragonfly+"}),
    (60, {"topology": "torus3d"}),
    (1, {"topology": "single"}),
])
def test_span_of_contiguous_nodes_equals_span(make_cluster, nodes, network):
    topo = build(make_cluster("dgx-h100", nodes, **network))
    picks = (1, 2, 3, 5, 7, nodes // 3, nodes // 2, nodes - 1, nodes)
    for n in sorted({min(max(k, 1), nodes) for k in picks}):
        a, b = topo.span(n), topo.span_of(np.arange(n))
        assert (a.nodes, a.leaves, a.pods, a.max_hops) == (b.nodes, b.leaves, b.pods, b.max_hops), n
        assert b.ring_bw_fraction == pytest.approx(a.ring_bw_fraction), n
        assert b.a2a_bw_fraction == pytest.approx(a.a2a_bw_fraction), n


def test_span_of_scattered_nodes(make_cluster):
    topo = build(_fat_tree_2to1(make_cluster))
    assert topo.nodes_per_leaf == 5 and topo.oversubscription == pytest.approx(2.0)
    same_leaf = topo.span_of(np.array([0, 1, 2, 3]))
    two_leaves = topo.span_of(np.array([0, 1, 5, 6]))
    assert (same_leaf.leaves, same_leaf.max_hops, same_leaf.ring_bw_fraction) == (1, 1, 1.0)
    assert (two_leaves.leaves, two_leaves.max_hops, two_leaves.ring_bw_fraction) == (2, 3, 0.5)
    # all-to-all: 3 of 5 nodes on leaf 0 with 1 on leaf 1: o_leaf = 2 x 3/5 = 1.2, c = 1/3 -> 1/0.4 > 1;
    # a full leaf (5 nodes) plus 5 more: o_leaf = 2, c = 5/9 -> 0.9
    assert topo.span_of(np.array([0, 1, 2, 5])).a2a_bw_fraction == 1.0
    assert topo.span_of(np.arange(10)).a2a_bw_fraction == pytest.approx(1.0 / (2.0 * 5 / 9))
    assert topo.span_of(np.array([3, 1, 1, 3])).nodes == 2  # a set: duplicates count once
    with pytest.raises(SpecError, match="out of range"):
        topo.span_of(np.array([0, 40]))


def test_span_of_torus_uses_cyclic_extent(make_cluster):
    topo = build(make_cluster("dgx-h100", 512, topology="torus3d", torus_dims=(8, 8, 8)))
    ends = topo.span_of(np.array([0, 7]))  # x = 0 and x = 7 are wrap-around neighbours
    assert ends.max_hops == 1 and ends.a2a_bw_fraction == pytest.approx(topo.span(2).a2a_bw_fraction)
    spread = topo.span_of(np.array([0, 4]))  # opposite sides of an x ring: extent 5, 4 hops
    assert spread.max_hops == 4


@pytest.mark.parametrize(("gpus", "ranks_per_node"), [(16, None), (64, None), (1024, None), (12, None),
                                                      (32, 2), (128, 1)])
@pytest.mark.parametrize("op", OPS)
def test_contiguous_placement_is_identical(ref_cluster, op, gpus, ranks_per_node):
    g = ref_cluster.node.gpus
    ppn = min(gpus, g) if ranks_per_node is None else ranks_per_node
    nodes = -(-gpus // ppn)
    where = nodes_placement(ref_cluster, np.arange(nodes), ppn)[:gpus]
    a = collective(ref_cluster, op, SIZES, gpus, ranks_per_node=ranks_per_node)
    b = collective(ref_cluster, op, SIZES, gpus, placement=where)
    np.testing.assert_array_equal(a.time_s, b.time_s)
    np.testing.assert_array_equal(a.busbw_gb_per_s, b.busbw_gb_per_s)
    np.testing.assert_array_equal(a.algorithm, b.algorithm)
    np.testing.assert_array_equal(a.protocol, b.protocol)
    assert (a.nodes, a.ranks_per_node) == (b.nodes, b.ranks_per_node)
    assert a.placement is not None and b.placement is not None
    assert a.placement.kind == "contiguous" and b.placement.kind == "explicit"
    assert a.placement.span == b.placement.span
    # rank order does not matter (NCCL orders rings by topology)
    c = collective(ref_cluster, op, float(SIZES[-4]), gpus, placement=where[::-1])
    assert c.time_s == pytest.approx(float(a.time_s[-4]))


def test_sixteen_gpus_two_nodes_vs_sixteen_nodes(ref_cluster):
    packed = collective(ref_cluster, "all_reduce", SIZES, 16, placement=np.arange(16))
    spread_idx = np.arange(16) * ref_cluster.node.gpus  # GPU 0 of nodes 0..15
    spread = collective(ref_cluster, "all_reduce", SIZES, 16, placement=spread_idx)
    assert (packed.nodes, packed.ranks_per_node) == (2, 8)
    assert (spread.nodes, spread.ranks_per_node) == (16, 1)
    # large: one NIC per GPU instead of NVLink + 8 NICs per node -> far lower busbw
    nic = float(spread.breakdown["nic_gb_per_s"])
    assert spread.busbw_gb_per_s[-1] <= nic * 1.0001
    assert packed.busbw_gb_per_s[-1] > 5 * spread.busbw_gb_per_s[-1]
    # ring latency: 2(m-1) of the 2(n-1) steps cross the network: 30 network steps instead of 2
    ring_p = collective(ref_cluster, "all_reduce", 8.0, 16, placement=np.arange(16), algorithm="ring",
                        protocol="LL")
    ring_s = collective(ref_cluster, "all_reduce", 8.0, 16, placement=spread_idx, algorithm="ring",
                        protocol="LL")
    assert ring_s.time_s > ring_p.time_s + 28 * 2.0e-6
    assert np.all(spread.time_s >= packed.time_s)


def test_scattered_over_leaves_of_oversubscribed_fabric(make_cluster):
    c = _fat_tree_2to1(make_cluster)
    one_leaf = nodes_placement(c, [0, 1, 2, 3], 8)
    two_leaves = nodes_placement(c, [0, 1, 5, 6], 8)
    big = 2.0 ** np.arange(30, 35)
    inside = collective(c, "all_reduce", big, 32, placement=one_leaf, algorithm="ring")
    across = collective(c, "all_reduce", big, 32, placement=two_leaves, algorithm="ring")
    contiguous = collective(c, "all_reduce", big, 32, algorithm="ring")
    np.testing.assert_array_equal(inside.busbw_gb_per_s, contiguous.busbw_gb_per_s)
    assert across.placement is not None and across.placement.span.leaves == 2
    assert np.all(across.busbw_gb_per_s < 0.6 * inside.busbw_gb_per_s)
    # spine-limited: the network bound is half the leaf-local one
    assert float(across.breakdown["net_gb_per_s"]) <= 0.5 * float(inside.breakdown["net_gb_per_s"]) + 1e-9
    assert set(across.breakdown["bottleneck"]) == {"network"}
    # the tuner's choice also suffers
    assert collective(c, "all_reduce", 2.0**33, 32, placement=two_leaves).busbw_gb_per_s < \
        collective(c, "all_reduce", 2.0**33, 32, placement=one_leaf).busbw_gb_per_s


def test_uneven_placement_uses_busiest_node(ref_cluster):
    where = np.concatenate([np.arange(8), [8, 9]])  # 8 GPUs on node 0, 2 on node 1
    res = collective(ref_cluster, "all_gather", 2.0**26, 10, placement=where)
    assert (res.nodes, res.ranks_per_node) == (2, 8)
    assert res.placement is not None and res.placement.min_ranks_per_node == 2
    assert res.placement.gpu_ranges == "0-9"
    assert res.to_dict()["placement"]["nodes"] == 2


@pytest.mark.parametrize(("where", "gpus", "match"), [
    ([0, 1, 1, 2], 4, "GPU 1 appears more than once"),
    ([0, 1, 2, 1024], 4, "outside 0..1023"),
    ([-1, 0], 2, "outside"),
    ([0, 1, 2], 4, "lists 3 GPUs but the group has gpus=4"),
    ([], 0, "gpus must be >= 1"),
    ([0.5, 1.0], 2, "integer GPU indices"),
    (["a", "b"], 2, "integer GPU indices"),
    ([[0, 1], [2, 3]], 4, "1-D"),
])
def test_invalid_placement_is_spec_error(ref_cluster, where, gpus, match):
    with pytest.raises(SpecError, match=match):
        collective(ref_cluster, "all_reduce", 1024.0, gpus, placement=where)


def test_placement_contradicting_ranks_per_node(ref_cluster):
    with pytest.raises(SpecError, match="contradicts the placement"):
        collective(ref_cluster, "all_reduce", 1024.0, 16, placement=np.arange(16), ranks_per_node=4)
    ok = collective(ref_cluster, "all_reduce", 1024.0, 16, placement=np.arange(16), ranks_per_node=8)
    assert ok.ranks_per_node == 8
    with pytest.raises(SpecError, match="ranks_per_node"):
        nodes_placement(ref_cluster, [0, 1], 9)
    with pytest.raises(SpecError, match="node index out of range"):
        nodes_placement(ref_cluster, [0, 128], 8)


def test_parse_and_format_ranges():
    np.testing.assert_array_equal(parse_index_list("0-3, 8 10-11", 16), [0, 1, 2, 3, 8, 10, 11])
    assert index_ranges(np.array([71, 64, 65, 66, 67, 68, 69, 70, 3])) == "3,64-71"
    for text, match in [("", "empty"), ("0-x", "bad GPU range"), ("5-2", "end before start"),
                        ("0-16", "outside 0..15")]:
        with pytest.raises(SpecError, match=match):
            parse_index_list(text, 16)


def test_explicit_placement_summary_is_cached_and_valid(ref_cluster):
    where = np.arange(8, 24)
    a = explicit_placement(ref_cluster, where, 16)
    assert a is explicit_placement(ref_cluster, where.copy(), 16)
    assert (a.nodes, a.ranks_per_node, a.gpu_ranges, a.span.leaves) == (2, 8, "8-23", 1)
    with pytest.raises(SpecError):
        explicit_placement(ref_cluster, where, 15)


def test_cli_placement_json_and_table(cli, tmp_path):
    r = cli("comm", "all_reduce", "--placement", "0-7,512-519", "-b", "1M", "-e", "1G", "-f", "32", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["gpus"] == 16 and data["nodes"] == 2
    pl = data["placement"]
    assert pl["kind"] == "explicit" and pl["gpu_ranges"] == "0-7,512-519"
    assert pl["leaves"] == 2 and pl["max_hops"] == 3
    contiguous = json.loads(cli("comm", "all_reduce", "--gpus", "16", "-b", "1M", "-e", "1G", "-f", "32",
                                "--json").stdout)
    assert contiguous["placement"]["kind"] == "contiguous" and contiguous["placement"]["leaves"] == 1
    f = tmp_path / "where.txt"
    f.write_text("0\n8\n16\n24\n")
    r = cli("comm", "all_gather", "--placement", str(f), "-e", "64K", "--json")
    data = json.loads(r.stdout)
    assert (data["gpus"], data["nodes"], data["ranks_per_node"]) == (4, 4, 1)
    r = cli("comm", "all_reduce", "--placement", "nodes:0,5", "--ranks-per-node", "4", "-e", "64K", "--json")
    data = json.loads(r.stdout)
    assert data["placement"]["gpu_ranges"] == "0-3,40-43" and data["ranks_per_node"] == 4
    r = cli("comm", "all_reduce", "--placement", "0-7,64-71", "-b", "1G", "-e", "1G")
    assert r.code == 0 and "GPUs 0-7,64-71" in r.stdout
    assert len(data["rows"]) == 14  # 8 B .. 64 KiB


@pytest.mark.parametrize("args", [
    ["--placement", "0-7,7"],
    ["--placement", "0-7", "--gpus", "16"],
    ["--placement", "0-8192"],
    ["--placement", "0-3,x"],
    ["--placement", "nodes:0-200"],
    ["--placement", "0-15", "--ranks-per-node", "2"],
])
def test_cli_bad_placement_exits_2_with_one_line(cli, args):
    r = cli("comm", "all_reduce", *args)
    assert r.code == 2
    assert r.stderr.strip().startswith("error:") and len(r.stderr.strip().splitlines()) == 1


def test_net_fraction_lowers_network_bandwidth_only():
    """``net_fraction`` (concurrent groups on the same links) caps the span fractions: it slows a
    multi-node ring, leaves one node alone, and 1 equals the default."""
    import pytest as _pytest

    from clustertwin import catalog
    from clustertwin.comm import collective
    from clustertwin.errors import SpecError as _SpecError

    c = catalog.get("cluster", "ref-1k-h100")
    big = 2.0**30
    free = collective(c, "all_reduce", big, 64).time_s
    assert collective(c, "all_reduce", big, 64, net_fraction=1.0).time_s == free
    slow = collective(c, "all_reduce", big, 64, net_fraction=0.25).time_s
    assert 2.0 * free < slow < 4.5 * free
    assert collective(c, "all_reduce", big, 8, net_fraction=0.25).time_s == collective(c, "all_reduce", big, 8).time_s
    with _pytest.raises(_SpecError, match="net_fraction"):
        collective(c, "all_reduce", big, 64, net_fraction=0.0)
