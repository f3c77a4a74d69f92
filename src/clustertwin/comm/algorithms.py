"""NCCL's algorithms and protocols as candidates: each with the tuner's latency (to choose) and the
physical latency and link bandwidths (to time).

Every (algorithm, protocol) candidate carries

* ``tuner_us``: NCCL's own latency estimate (``tuning.cc``, :mod:`.constants`), used only to reproduce
  NCCL's choice: ring ``base + (nsteps - nInter) intra + nInter inter``; tree ``base + 2 ((ppn-1) intra +
  log2(nodes) inter)``; NVLS ``intra (+ inter)``; NVLSTree ``intra + 2 log2(nodes) inter``;
* ``latency_us``: the physical latency of the same pattern from :mod:`.latency` (launch + steps);
* per-link algorithm bandwidths (GB/s) ``intra_algbw`` (scale-up), ``inter_algbw`` (network) and a
  protocol cap ``cap_algbw``; ring LL x0.5 capped at NCCL's llMax, LL128 x0.92 capped at ``channels x``
  the per-channel LL128 rate, tree x0.92 (LL /3.8, LL128 x7/9 on one node, x120/128 across nodes),
  NVLS ``B x eff x ppn/(ppn+1)`` (ld_reduce sends S and receives S/ppn, multimem.st the reverse);
* ``phased``: the two link classes are separate pipeline phases (tree, NVLSTree, CollNet: scale-up
  reduce, network tree, scale-up broadcast), composed by :func:`clustertwin.comm.hierarchical.compose`
  with chunking; a ring's step uses both links at once and is bounded by the slower one.

all_to_all is in :mod:`.alltoall`.
"""

from __future__ import annotations

import math
from dataclasses import replace

from clustertwin.comm import alltoall, p2p
from clustertwin.comm import constants as C
from clustertwin.comm.candidate import Candidate, Ctx, inf_if, ring_protocol
from clustertwin.comm.latency import step_latency
from clustertwin.comm.links import MESH_KINDS, NVLINK_KINDS, generation, links
from clustertwin.comm.nccl_version import CURRENT_VERSION, ll128_across_nodes, nvls_channels
from clustertwin.comm.params import CommParams
from clustertwin.comm.placement import Placement, contiguous_placement
from clustertwin.comm.result import busbw_factor
from clustertwin.specs.cluster import ClusterSpec

NVLS_MAX_ARITY = 32
"""Most NVLS heads per node (NCCL ``NCCL_MAX_NVLS_ARITY`` in device.h; search.cc ``maxChannels =
min(NCCL_MAX_NVLS_ARITY, GPUs)``). A larger NVLink domain (a whole NVL72 rack) still runs NVLS
all-reduce (enqueue.cc only drops NVLS all_gather / reduce_scatter above it), with 32 heads."""
RDMA_FABRICS = frozenset({"infiniband", "roce"})
"""Fabrics with GPUDirect RDMA; over TCP sockets (``ethernet``) or PSM2 (``omnipath``) LL128 is off."""
PRE_LL128_ARCHS = frozenset({"kepler", "maxwell", "pascal"})
"""Architectures below compute capability 7.0, where NCCL disables LL128."""

__all__ = ["MESH_KINDS", "Candidate", "Ctx", "candidates", "context"]


def context(cluster: ClusterSpec, op: str, n: int, ppn: int, p: CommParams, pl: Placement | None,
            gpus_per_process: int = 1, cuda_graph: bool = False, symmetric: bool = False,
            net_fraction: float | None = None, net_hops: int | None = None,
            version: tuple[int, int, int] = CURRENT_VERSION, nvls_enable: bool = True) -> Ctx:
    """Links, protocol availability, NCCL's llMax and the step latencies of one group.

    ``net_fraction``: the share of injection bandwidth the group keeps when other groups load the same
    links in the same phase (:func:`clustertwin.topology.group_bandwidth`); the span's ring and
    all-to-all fractions become ``min(span fraction, net_fraction)``. ``net_hops``: the switch hops of
    the group where the job's placement puts it; it replaces the span's ``max_hops`` (network step latency)."""
    pl = pl if pl is not None else contiguous_placement(cluster, n, ppn)
    nodes, span = pl.nodes, pl.span
    if net_hops and nodes > 1:
        span = replace(span, max_hops=int(net_hops))
    if net_fraction is not None and net_fraction < 1.0:
        span = replace(span, ring_bw_fraction=min(span.ring_bw_fraction, net_fraction),
                       a2a_bw_fraction=min(span.a2a_bw_fraction, net_fraction))
    lk = links(cluster, ppn, span, p)
    gen = generation(cluster)
    node = cluster.node
    fabric = cluster.fabric
    intra_nvlink = node.scale_up.kind in NVLINK_KINDS and node.scale_up_gb_per_s > 0
    ll128 = ((intra_nvlink or ppn == 1) and (nodes == 1 or fabric.kind in RDMA_FABRICS)
             and node.gpu.arch.strip().lower() not in PRE_LL128_ARCHS
             and (nodes == 1 or ll128_across_nodes(node, version)))
    net = cluster.net
    sharp = bool(fabric.sharp if net.sharp is None else net.sharp)
    nvls = nvls_enable and node.scale_up.kind == "nvswitch" and node.gpu.nvls and ppn >= 2
    vendor = (node.cpu.vendor if node.cpu is not None else "intel").lower()
    vendor = "amd" if vendor == "amd" else "intel"
    if nodes == 1:
        ll_max = C.LL_MAX_GB_PER_S_SINGLE_NODE[gen]
    else:
        ll_max = C.LL_MAX_GB_PER_S_MULTI_NODE[vendor][0 if nodes == 2 else 1]
    overhead = p.net_overhead_us_amd if vendor == "amd" else p.net_overhead_us_intel
    extra = max(0.0, fabric.hop_latency_us - p.reference_hop_latency_us)
    steps = step_latency(p, lk.intra_hop, nodes > 1, span.max_hops, fabric.switch_latency_ns,
                         fabric.hop_latency_us, gpus_per_process, cuda_graph, gen == "blackwell")
    return Ctx(cluster, op, n, ppn, nodes, span, lk, p, pl, gen, ll128, sharp, nvls, ll_max, overhead, extra,
               steps, symmetric and nodes == 1 and lk.intra_hop == C.NVLINK, version)


def _log2i(x: int) -> int:
    return max(int(x).bit_length() - 1, 0)


def tree_volume(nodes: int) -> float:
    """Bytes each node sends (and receives) over the network per byte of all-reduce in NCCL's double
    binary tree: 2 nodes -> 1, 3 -> 1.5, >= 4 -> 2 (interior with two children in one tree, leaf in the
    other)."""
    if nodes <= 1:
        return 0.0
    return {2: 1.0, 3: 1.5}.get(nodes, 2.0)


def _ring_tuner_us(cx: Ctx, proto: str, nsteps: int, ninter: int) -> float:
    intra = cx.hw(cx.links.intra_hop, "ring", proto)
    if cx.nodes > 1:
        overhead = cx.net_overhead_us * (cx.p.simple_net_overhead_factor if proto == "Simple" else 1.0)
        intra = max(intra, overhead)
    inter = cx.inter("tree" if cx.ppn == 1 else "ring", proto)
    return cx.base("ring", proto) + (nsteps - ninter) * intra + ninter * inter


def _ring_us(cx: Ctx, proto: str, nsteps: int, ninter: int) -> float:
    s = cx.steps
    return s.launch_us + (nsteps - ninter) * max(s.intra(proto), s.ring_floor_us) + ninter * s.net(proto)


def _ring_family(cx: Ctx) -> list[Candidate]:
    op, n, nodes, lk = cx.op, cx.n, cx.nodes, cx.links
    multi, local = nodes > 1, cx.ppn > 1
    f = busbw_factor(op, n)
    nsteps = 2 * (n - 1) if op == "all_reduce" else n - 1
    ninter = (2 * (nodes - 1) if op == "all_reduce" else nodes - 1) if multi else 0
    if cx.ppn == 1:
        ninter = nsteps
    out = []
    for proto in cx.protocols():
        mult, cap = ring_protocol(cx, proto, f)
        out.append(Candidate(
            "ring", proto, _ring_tuner_us(cx, proto, nsteps, ninter), _ring_us(cx, proto, nsteps, ninter),
            inf_if(local, lk.intra_ring_gb_per_s * mult / f), inf_if(multi, lk.ring_net_gb_per_s * mult / f),
            cap, tuner_intra_only=nodes <= 2 and local,
            plateau=op == "all_reduce" and proto == "Simple" and multi and cx.gen != "volta"))
    return out


def _tree(cx: Ctx) -> list[Candidate]:
    ppn, nodes, lk, p, s = cx.ppn, cx.nodes, cx.links, cx.p, cx.steps
    multi, local = nodes > 1, ppn > 1
    vol = tree_volume(nodes)
    per_ch = C.PER_CHANNEL_TREE_GB_PER_S.get(cx.gen)
    ch_cap = 0.5 * p.channels * per_ch[min(nodes, 3) - 1] if per_ch else math.inf
    out = []
    for proto in cx.protocols():
        eff, cap = p.tree_efficiency, ch_cap
        if proto == "LL":
            eff *= p.tree_ll_factor
            cap = min(cap, 0.5 * cx.ll_max)  # NCCL caps tree LL busBw (= 2 x tree algBw) at llMax
        elif proto == "LL128":
            eff *= p.tree_ll128_factor_single_node if nodes == 1 else p.tree_ll128_factor_multi_node
        tuner = cx.base("tree", proto) + 2 * ((ppn - 1) * cx.hw(lk.intra_hop, "tree", proto)
                                              + _log2i(nodes) * cx.inter("tree", proto))
        phys = s.launch_us + 2 * ((ppn - 1) * s.intra(proto) + _log2i(nodes) * s.net(proto))
        out.append(Candidate(
            "tree", proto, tuner, phys, inf_if(local, lk.intra_ring_gb_per_s / 2.0 * eff),
            inf_if(multi, lk.ring_net_gb_per_s / max(vol, 1.0) * eff), cap, phased=multi and local,
            chain=2 * (ppn - 1 + _log2i(nodes)) if proto == "Simple" else 0,
            tuner_intra_only=nodes <= 2 and local, tree_correction=True))
    return out


def _nvls(cx: Ctx) -> list[Candidate]:
    ppn, nodes, lk, p, s = cx.ppn, cx.nodes, cx.links, cx.p, cx.steps
    eff = p.nvls_efficiency or C.NVLS_EFFICIENCY.get(cx.gen, C.NVLS_EFFICIENCY["hopper"])
    heads = min(ppn, NVLS_MAX_ARITY)
    algbw = min(lk.nvlink_gb_per_s * eff * heads / (heads + 1), p.nvls_fanin_gb_per_s / ppn)
    tuner_intra = cx.hw(C.NVLINK, "nvls", "Simple")
    phys_intra = s.launch_us + 2 * s.nvls_phase_us
    if nodes == 1:
        ops = nvls_channels(cx.gen, nodes, cx.version) * heads
        return [Candidate("nvls", "Simple", tuner_intra, phys_intra, algbw, math.inf, depth=2, nvls_ops=ops)]
    out = []
    if cx.sharp:  # NVLS across nodes reduces in the IB switches: S out and S in per node
        out.append(Candidate("nvls", "Simple", tuner_intra + cx.inter("nvls", "Simple"),
                             phys_intra + 2 * s.net("Simple"), algbw,
                             lk.ring_net_gb_per_s * p.collnet_efficiency, phased=True, depth=4,
                             default_on=False))
    lg = _log2i(nodes)
    out.append(Candidate("nvlstree", "Simple", tuner_intra + 2 * lg * cx.inter("nvlstree", "Simple"),
                         phys_intra + 2 * lg * s.net("Simple"), algbw,
                         lk.ring_net_gb_per_s / tree_volume(nodes), phased=True, depth=2 + 2 * lg,
                         nvls_ops=nvls_channels(cx.gen, nodes, cx.version) * heads,
                         tuner_intra_only=nodes <= 2))
    return out


def _collnet(cx: Ctx) -> list[Candidate]:
    ppn, lk, p, s = cx.ppn, cx.links, cx.p, cx.steps
    if cx.cluster.node.scale_up.kind == "nvswitch":
        tuner = 2 * (min(1, ppn - 1) * cx.hw(lk.intra_hop, "collnet_direct", "Simple")
                     + (ppn - 1) * p.collnet_arity_us) + cx.inter("collnet_direct", "Simple")
        phys = s.launch_us + 2 * min(1, ppn - 1) * s.intra("Simple") + 2 * s.net("Simple")
    else:
        tuner = 2 * (ppn - 1) * cx.hw(lk.intra_hop, "collnet_chain", "Simple") + cx.inter("collnet_chain", "Simple")
        phys = s.launch_us + 2 * (ppn - 1) * s.intra("Simple") + 2 * s.net("Simple")
    # intra: reduce-scatter + all-gather on the scale-up links, 2 (ppn-1)/ppn S per GPU;
    # inter: each node sends its reduced S once and receives the result once
    local = ppn > 1
    return [Candidate("collnet", "Simple", tuner, phys,
                      lk.intra_ring_gb_per_s * ppn / (2.0 * (ppn - 1)) * p.collnet_efficiency if local else math.inf,
                      lk.ring_net_gb_per_s * p.collnet_efficiency, phased=local, depth=4,
                      default_on=False)]


def _pat(cx: Ctx) -> list[Candidate]:
    n, nodes, p, s = cx.n, cx.nodes, cx.p, cx.steps
    f = busbw_factor(cx.op, n)
    lg = _log2i(nodes)
    tuner = cx.base("pat", "Simple") + lg * cx.inter("pat", "Simple") / C.PAT_LOG_LATENCY_DIVISOR \
        + n * p.pat_per_rank_us
    phys = s.launch_us + lg * s.net("Simple") + n * p.pat_per_rank_us
    return [Candidate("pat", "Simple", tuner, phys, math.inf, cx.links.ring_net_gb_per_s * p.pat_efficiency / f)]


def _chain(cx: Ctx) -> list[Candidate]:
    """broadcast/reduce: a pipelined chain of n ranks (NCCL charges nRanks hops)."""
    n, multi, local, lk, s = cx.n, cx.nodes > 1, cx.ppn > 1, cx.links, cx.steps
    out = []
    for proto in cx.protocols():
        mult, cap = ring_protocol(cx, proto, 1.0)
        row = "tree" if proto == "Simple" else "ring"
        step = cx.inter(row, proto) if multi else cx.hw(lk.intra_hop, row, proto)
        nets = cx.nodes - 1 if multi else 0
        phys = s.launch_us + (n - 1 - nets) * s.intra(proto) + nets * s.net(proto)
        out.append(Candidate("ring", proto, cx.base("ring", proto) + n * step, phys,
                             inf_if(local, lk.intra_ring_gb_per_s * mult),
                             inf_if(multi, lk.ring_net_gb_per_s * mult), cap))
    return out


def _p2p_channels(cx: Ctx) -> tuple[int, int, float, float] | None:
    """NCCL's p2p channel range on one NVSwitch node and the bandwidth of one channel (:mod:`.p2p`); None
    elsewhere (meshes, PCIe, and multi-node groups, whose per-peer channels follow the NICs)."""
    node = cx.cluster.node
    if cx.nodes > 1 or node.scale_up.kind != "nvswitch" or node.scale_up_gb_per_s <= 0:
        return None
    links = node.scale_up_gb_per_s / C.NVLINK_LINK_RAW_GB_PER_S[cx.gen]
    lo, hi = p2p.channel_range(p2p.channels_per_peer(links), cx.n)
    per_channel = cx.p.p2p_channel_link_fraction * C.NVLINK_LINK_GB_PER_S[cx.gen]
    return lo, hi, float(C.P2P_NVL_CHUNK_BYTES), per_channel


def _send_recv(cx: Ctx) -> list[Candidate]:
    multi, lk, s = cx.nodes > 1, cx.links, cx.steps
    chans = _p2p_channels(cx)
    out = []
    for proto in cx.protocols():
        mult, cap = ring_protocol(cx, proto, 1.0)
        hop = cx.inter("ring", proto) if multi else cx.hw(lk.intra_hop, "ring", proto)
        phys = s.launch_us + (s.net(proto) if multi else s.intra(proto))
        out.append(Candidate("direct", proto, cx.base("ring", proto) + hop, phys,
                             inf_if(cx.ppn > 1, lk.intra_pair_gb_per_s * mult),
                             inf_if(multi, lk.p2p_net_gb_per_s * mult), cap, p2p=chans))
    return out


def _symmetric(cx: Ctx) -> list[Candidate]:
    """NCCL >= 2.27 symmetric-memory kernels (registered windows, nccl-tests ``-R 2``) on one NVLink node:
    one-shot load-store all-reduce, no proxy FIFO handshake: ``launch + 2 x NVLink LL step`` (signal, read
    the peers); each GPU reads S from each of the n-1 peers at the LL rate."""
    s = cx.steps
    lat = s.launch_us + 2 * s.intra("LL")
    bw = cx.links.intra_a2a_gb_per_s * cx.p.ll_bw_factor / max(cx.n - 1, 1)
    return [Candidate("symmetric", "LL", lat, lat, bw, math.inf)]


def candidates(cx: Ctx) -> list[Candidate]:
    """All candidates of ``cx.op`` on this group (all_to_all: :func:`clustertwin.comm.alltoall.candidates`)."""
    op, multi = cx.op, cx.nodes > 1
    out: list[Candidate] = []
    if op in ("all_reduce", "all_gather", "reduce_scatter"):
        out += _ring_family(cx)
    if op == "all_reduce":
        out += _tree(cx)
        if cx.nvls:
            out += _nvls(cx)
        if multi and cx.sharp:
            out += _collnet(cx)
        if cx.symmetric:
            out += _symmetric(cx)
    if op in ("all_gather", "reduce_scatter") and cx.ppn == 1 and multi:
        out += _pat(cx)
    if op in ("broadcast", "reduce"):
        out += _chain(cx)
    if op == "all_to_all":
        out += alltoall.candidates(cx)
    if op == "send_recv":
        out += _send_recv(cx)
    return out
