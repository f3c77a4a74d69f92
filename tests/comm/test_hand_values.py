"""Hand-computed α-β values for every collective at n = 2 and n = 1,024 on the reference cluster.

ref-1k-h100: 128 x DGX H100 (NVLink 450 GB/s per direction, 8 x NDR 400G), non-blocking rail-optimised.
  NVLink per GPU  B = 450 x 0.80 (nvlink_efficiency)            = 360 GB/s
  one NDR NIC     N = 400/8 x 0.94 (achievable_fraction)         = 47 GB/s; node: 8 N = 376 GB/s
NCCL table (µs): base ring/tree Simple 8.4, LL ring 6.6, tree 6.8; NVLink ring/Simple 3.4, tree/Simple 4.0,
tree/LL 0.6; net ring/Simple 14, ring/LL 2.7, tree/Simple 14, tree/LL 5.0; net post overhead 1 µs (x3
Simple); ring/Simple multi-node all-reduce plateau x1.4. 1 GiB is above the tree correction range.
"""

from __future__ import annotations

import pytest

from clustertwin.comm import DEFAULT_PARAMS, collective

GIB = 2**30
B_NV = 450 * 0.80
NIC = 400 / 8 * 0.94
NODE_NET = 8 * NIC
P = DEFAULT_PARAMS
L = P.launch_us  # launch, one GPU per process, no graph
H = P.nvlink_hop_us_simple  # one NVLink step, Simple
SYNC = max(H, P.ring_sync_us)  # a step of a multi-node ring
# one network step with Simple: 2 NICs + switch hops (rail-optimised, 3 hops max across the spine) + proxy
NET = 2 * P.nic_latency_us + 3 * 0.150 + P.proxy_step_us_simple
CHUNKS = GIB / (P.chunk_bytes * P.channels)
# a Simple tree stores and forwards whole 512 KiB steps along its D = 2 (ppn - 1 + log2 nodes) stages:
# (D - 1) steps of fill at tree_stage_gb_per_s per channel
STEP_S = P.chunk_bytes / (P.tree_stage_gb_per_s * 1e9)


def t(lat_us: float, algbw_gb_per_s: float, size: float = GIB) -> float:
    return lat_us * 1e-6 + size / (algbw_gb_per_s * 1e9)


def tree_1024() -> float:
    """Tree: NVLink chain (B/2) and network tree (2 S per node: 376/2), both x0.92, pipelined in
    GIB / (512 KiB x 16) chunks, plus the chain fill of D - 1 = 2 (7 + 7) - 1 = 27 steps; latency 2 (7
    NVLink + 7 network steps)."""
    intra = GIB / (B_NV / 2 * 0.92 * 1e9)
    inter = GIB / (NODE_NET / 2 * 0.92 * 1e9)
    fill = 27 * STEP_S
    return (L + 2 * (7 * H + 7 * NET)) * 1e-6 + max(intra, inter) + min(intra, inter) / CHUNKS + fill


F_AR_1024 = 2 * 1023 / 1024
F_AG_1024 = 1023 / 1024

CASES = [
    # (op, gpus, algorithm, expected time at 1 GiB with Simple)
    ("all_reduce", 2, "ring", t(L + 2 * H, B_NV / 1.0)),
    ("all_reduce", 2, "tree", t(L + 2 * (1 * H), B_NV / 2 * 0.92) + 1 * STEP_S),  # D = 2: one step of fill
    ("all_gather", 2, "ring", t(L + 1 * H, B_NV / 0.5)),
    ("reduce_scatter", 2, "ring", t(L + 1 * H, B_NV / 0.5)),
    ("broadcast", 2, "ring", t(L + 1 * H, B_NV)),
    ("reduce", 2, "ring", t(L + 1 * H, B_NV)),
    ("all_to_all", 2, "direct", t(L + H, B_NV * 2 / 1)),
    ("send_recv", 2, "direct", t(L + H, B_NV)),
    # 1,024 GPUs = 128 nodes x 8: ring steps 2046 (254 network), NVLink-bound (360 < 376)
    ("all_reduce", 1024, "ring", t(L + (2046 - 254) * SYNC + 254 * NET, B_NV / F_AR_1024)),
    ("all_reduce", 1024, "tree", tree_1024()),
    ("all_gather", 1024, "ring", t(L + (1023 - 127) * SYNC + 127 * NET, B_NV / F_AG_1024)),
    ("reduce_scatter", 1024, "ring", t(L + (1023 - 127) * SYNC + 127 * NET, B_NV / F_AG_1024)),
    # broadcast chain: 1023 hops of which 127 cross nodes
    ("broadcast", 1024, "ring", t(L + (1023 - 127) * H + 127 * NET, B_NV)),
    ("reduce", 1024, "ring", t(L + (1023 - 127) * H + 127 * NET, B_NV)),
    # all-to-all: one NIC per GPU for the 1016 remote peers, 1016 network posts x 3 µs
    ("all_to_all", 1024, "direct", t(L + NET + 1016 * 3.0, NIC * 1024 / 1016)),
    ("send_recv", 1024, "direct", t(L + NET, NIC)),
]


@pytest.mark.parametrize(("op", "gpus", "algorithm", "expected_s"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_simple_protocol_time(ref_cluster, op, gpus, algorithm, expected_s):
    res = collective(ref_cluster, op, GIB, gpus, algorithm=algorithm, protocol="Simple")
    assert res.time_s == pytest.approx(expected_s, rel=1e-9)
    assert res.algorithm == algorithm and res.protocol == "Simple"
    assert res.algbw_gb_per_s == pytest.approx(GIB / expected_s / 1e9, rel=1e-9)


def test_busbw_definitions(ref_cluster):
    ar = collective(ref_cluster, "all_reduce", GIB, 1024, algorithm="ring", protocol="Simple")
    assert ar.busbw_gb_per_s == pytest.approx(ar.algbw_gb_per_s * F_AR_1024)
    ag = collective(ref_cluster, "all_gather", GIB, 1024, algorithm="ring", protocol="Simple")
    assert ag.busbw_gb_per_s == pytest.approx(ag.algbw_gb_per_s * F_AG_1024)
    bc = collective(ref_cluster, "broadcast", GIB, 1024, algorithm="ring", protocol="Simple")
    assert bc.busbw_gb_per_s == pytest.approx(bc.algbw_gb_per_s)


def test_small_message_latencies_ll(ref_cluster):
    """8 B with LL: tree = launch + 2 (7 NVLink LL steps + 7 network LL steps); the ring pays 1792 steps at
    the multi-node ring floor and 254 network steps. Tree LL bandwidth is capped at llMax/2 (Intel host,
    3+ nodes: 20.4/2 GB/s)."""
    net_ll = 2 * P.nic_latency_us + 3 * 0.150 + P.proxy_step_us_ll
    tree = collective(ref_cluster, "all_reduce", 8, 1024, algorithm="tree", protocol="LL")
    ring = collective(ref_cluster, "all_reduce", 8, 1024, algorithm="ring", protocol="LL")
    tree_lat = L + 2 * (7 * P.nvlink_hop_us_ll + 7 * net_ll)
    ring_lat = L + 1792 * max(P.nvlink_hop_us_ll, P.ring_sync_us) + 254 * net_ll
    assert tree.time_s == pytest.approx(tree_lat * 1e-6 + 8 / (20.4 / 2 * 1e9), rel=1e-9)  # LL: no pipeline fill
    assert ring.time_s == pytest.approx(ring_lat * 1e-6 + 8 / (20.4 / F_AR_1024 * 1e9), rel=1e-9)


def test_two_ranks_on_two_nodes_use_one_nic(ref_cluster):
    """2 GPUs, one per node (TP = 8 elsewhere): the group gets 1/8 of the 8 NICs = 47 GB/s; both ring steps
    are network steps."""
    res = collective(ref_cluster, "all_reduce", GIB, 2, ranks_per_node=1, algorithm="ring", protocol="Simple")
    net_one_leaf = NET - 2 * 0.150  # nodes 0 and 1 share a leaf: one switch hop
    assert res.time_s == pytest.approx(t(L + 2 * net_one_leaf, NIC / 1.0), rel=1e-9)
    assert res.nodes == 2 and res.ranks_per_node == 1
