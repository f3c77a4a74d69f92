"""NCCL-style collective cost model: time, algbw and busbw of a collective on a GPU group of a cluster.

Every (algorithm, protocol) candidate is an α-β model,

    time(S) = latency + S / algbw,

with the latency taken from NCCL's own tuning model (base latency + per-hop latencies for NVLink, PCIe
and the network, composed per algorithm as in ``tuning.cc``; constants in :mod:`.constants`), and the
algorithm bandwidth derived from the traffic each algorithm puts on each link of the hierarchy:

* intra-node: the per-GPU scale-up bandwidth (NVSwitch: ``scale_up.gb_per_s x nvlink_efficiency``;
  full mesh: ``total x (ranks-1)/(gpus-1)`` usable links; PCIe: x16 by generation x ``pcie_efficiency``);
* inter-node: the group's share of the node's NICs, ``nics x min(nic, fabric rate)/8 x
  achievable_fraction x ranks_per_node / gpus_per_node`` (all GPUs of a node communicate at once, as in
  training), scaled by the topology's ``ring_bw_fraction`` (all-to-all: ``a2a_bw_fraction``) and by
  ``1 / (1 + congestion_penalty)`` once traffic crosses leaf switches.

NCCL picks an algorithm with *its* model, not with the physics: for up to two nodes it sizes ring and tree
by the intra-node graph bandwidth (``bw = nNodes <= 2 ? bwIntra : bwInter``), so on two nodes it can
choose a ring that the network then limits. :func:`collective` reproduces that: the choice minimises the
tuner's time, the reported time is the physical one of the chosen candidate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clustertwin.comm import constants as C
from clustertwin.comm.params import DEFAULT_PARAMS, CommParams
from clustertwin.comm.placement import Placement, contiguous_placement, explicit_placement
from clustertwin.comm.span import GroupSpan
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.topology import pcie_x16_gb_per_s

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                        "send_recv")
"""Collectives, named as nccl-tests' ``*_perf`` binaries."""
ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvlstree", "collnet", "pat", "direct")
"""NCCL algorithms (``direct``: the point-to-point pattern of all_to_all and send_recv)."""
PROTOCOLS: tuple[str, ...] = C.PROTOCOLS

MESH_KINDS = frozenset({"nvlink-mesh", "infinity-fabric", "hccs"})
NVLINK_KINDS = frozenset({"nvswitch", "nvlink-mesh", "infinity-fabric"})
"""Scale-up kinds on which NCCL/RCCL run LL128 (NVLink-class paths) and use the NVLink latency row."""
RDMA_FABRICS = frozenset({"infiniband", "roce"})
"""Fabrics with GPUDirect RDMA; over TCP sockets (``ethernet``) or PSM2 (``omnipath``) LL128 is off."""
PRE_LL128_ARCHS = frozenset({"kepler", "maxwell", "pascal"})
"""Architectures below compute capability 7.0, where NCCL disables LL128."""


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: busbw = algbw x factor (doc/PERFORMANCE.md).

    all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send_recv 1."""
    if n <= 1:
        return 0.0 if op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") else 1.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class CollectiveResult:
    """Predicted performance of one collective over message sizes (nccl-tests conventions).

    ``nbytes`` is nccl-tests' size S (for all_gather/reduce_scatter the full gathered buffer);
    ``algbw = S / time``, ``busbw = algbw x busbw_factor(op, gpus)``. Arrays when ``nbytes`` was an array,
    Python scalars otherwise. ``placement`` summarises where the group sits (nodes, ranks per node,
    leaves/pods spanned, spine fractions); None only for a one-GPU group placed contiguously."""

    op: str
    gpus: int
    nbytes: np.ndarray | float
    time_s: np.ndarray | float
    algbw_gb_per_s: np.ndarray | float
    busbw_gb_per_s: np.ndarray | float
    algorithm: np.ndarray | str
    protocol: np.ndarray | str
    nodes: int = 1
    ranks_per_node: int = 1
    breakdown: dict[str, np.ndarray | float | str] = field(default_factory=dict)
    placement: Placement | None = None

    @property
    def time_us(self) -> np.ndarray | float:
        return self.time_s * 1e6

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: lists for arrays, stable keys with units."""

        def conv(v: Any) -> Any:
            if isinstance(v, np.ndarray):
                return v.tolist()
            if isinstance(v, np.generic):
                return v.item()
            return v

        return {
            "op": self.op, "gpus": self.gpus, "nodes": self.nodes, "ranks_per_node": self.ranks_per_node,
            "nbytes": conv(self.nbytes), "time_s": conv(self.time_s),
            "algbw_gb_per_s": conv(self.algbw_gb_per_s), "busbw_gb_per_s": conv(self.busbw_gb_per_s),
            "algorithm": conv(self.algorithm), "protocol": conv(self.protocol),
            "breakdown": {k: conv(v) for k, v in self.breakdown.items()},
            "placement": self.placement.to_dict() if self.placement is not None else None,
        }


@dataclass(frozen=True)
class Links:
    """Per-GPU bandwidths (GB/s, one direction) and hop types a group sees; see the module docstring."""

    intra_hop: str
    """Latency row of the intra-node hop: ``nvlink`` or ``pci``."""
    intra_ring_gb_per_s: float
    """Per-GPU scale-up bandwidth a ring/tree over ``ranks_per_node`` local ranks can use."""
    intra_pair_gb_per_s: float
    """Bandwidth between one pair of local GPUs."""
    intra_a2a_gb_per_s: float
    """Aggregate bandwidth from one GPU to all other local ranks at once."""
    nvlink_gb_per_s: float
    """Effective NVSwitch port bandwidth (for NVLS); 0 without an NVSwitch."""
    nic_gb_per_s: float
    """Achievable NCCL bandwidth of one NIC."""
    group_net_gb_per_s: float
    """The group's share of its node's NICs, before topology factors."""
    ring_net_gb_per_s: float
    """Network bandwidth per node for ring/tree traffic (after spine fraction and congestion)."""
    gpu_net_gb_per_s: float
    """Per-GPU network bandwidth for point-to-point traffic (one NIC path at most; a2a spine fraction)."""
    p2p_net_gb_per_s: float
    """Network bandwidth of one send/recv stream (one NIC path, the group's share)."""


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol) option with its α (µs) and its per-link algorithm bandwidths (GB/s)."""

    algorithm: str
    protocol: str
    latency_us: float
    intra_algbw: float
    inter_algbw: float
    cap_algbw: float = math.inf
    tuner_intra_only: bool = False
    tree_correction: bool = False
    plateau: bool = False
    default_on: bool = True


def _generation(cluster: ClusterSpec) -> str:
    gpu = cluster.node.gpu
    gen = C.GPU_GENERATIONS.get(gpu.arch.strip().lower())
    if gen is not None:
        return gen
    year = gpu.release_year or 0
    # other vendors' parts: the NVIDIA generation of the same years
    for first_year, name in ((2024, "blackwell"), (2022, "hopper"), (2020, "ampere")):
        if year >= first_year:
            return name
    return "volta"


def links(cluster: ClusterSpec, ranks_per_node: int, span: GroupSpan, p: CommParams) -> Links:
    """Per-GPU link bandwidths of a group with ``ranks_per_node`` ranks on each of ``span.nodes`` nodes."""
    node = cluster.node
    g = node.gpus
    kind = node.scale_up.kind
    su = node.scale_up_gb_per_s
    if kind == "nvswitch" and su > 0:
        hop = C.NVLINK
        ring = pair = a2a = nvl = su * p.nvlink_efficiency
    elif kind in MESH_KINDS and su > 0 and g > 1:
        hop = C.NVLINK
        per_pair = su * p.mesh_efficiency / (g - 1)
        usable = max(ranks_per_node - 1, 1)
        ring = a2a = per_pair * usable
        pair, nvl = per_pair, 0.0
    else:  # PCIe through the host (also scale_up "none" with several GPUs)
        hop = C.PCI
        raw = su if (kind == "pcie" and su > 0) else pcie_x16_gb_per_s(node.gpu.pcie_gen)
        ring = pair = a2a = raw * p.pcie_efficiency
        nvl = 0.0
    fabric = cluster.fabric
    nic = min(node.nics.gbit_per_s, fabric.gbit_per_s) / 8.0 * fabric.achievable_fraction * p.network_efficiency
    node_total = node.nics.count * nic
    group_net = node_total * ranks_per_node / g
    congestion = 1.0 + (fabric.congestion_penalty if span.leaves > 1 else 0.0)
    ring_net = group_net * span.ring_bw_fraction / congestion
    gpu_net = min(nic, node_total / g) * span.a2a_bw_fraction / congestion
    p2p_net = min(nic, group_net) * span.a2a_bw_fraction / congestion
    return Links(hop, ring, pair, a2a, nvl, nic, group_net, ring_net, gpu_net, p2p_net)


def _log2i(x: int) -> int:
    return max(int(x).bit_length() - 1, 0)


def _tree_volume(nodes: int) -> float:
    """Bytes each node sends (and receives) over the network per byte of all-reduce in NCCL's double
    binary tree: 2 nodes -> 1 (each node is the other's only child), 3 -> 1.5 (root of one tree with two
    children, leaf of the other), >= 4 -> 2 (interior with two children in one tree, leaf in the other)."""
    if nodes <= 1:
        return 0.0
    if nodes == 2:
        return 1.0
    if nodes == 3:
        return 1.5
    return 2.0


@dataclass(frozen=True)
class _Ctx:
    cluster: ClusterSpec
    op: str
    n: int
    ppn: int
    nodes: int
    span: GroupSpan
    links: Links
    p: CommParams
    placement: Placement
    gen: str
    ll128: bool
    sharp: bool
    nvls: bool
    ll_max: float
    net_overhead_us: float
    net_extra_us: float

    def hw(self, hop: str, algo: str, proto: str) -> float:
        scale = {C.NVLINK: self.p.nvlink_latency_scale, C.PCI: self.p.pcie_latency_scale,
                 C.NET: self.p.net_latency_scale}[hop]
        return C.HW_LATENCY_US[hop][algo][proto] * scale

    def base(self, algo: str, proto: str) -> float:
        return C.BASE_LATENCY_US[algo][proto] * self.p.base_latency_scale

    def inter(self, algo: str, proto: str) -> float:
        """Network step latency: NCCL's table plus the fabric's excess hop latency (twice for Simple,
        which also waits for the receive flush, as NCCL adds ``latencyInter`` twice)."""
        extra = self.net_extra_us * (2.0 if proto == "Simple" else 1.0)
        return self.hw(C.NET, algo, proto) + extra

    def protocols(self) -> tuple[str, ...]:
        return C.PROTOCOLS if self.ll128 else ("LL", "Simple")


def _context(cluster: ClusterSpec, op: str, n: int, ppn: int, p: CommParams, pl: Placement | None) -> _Ctx:
    pl = pl if pl is not None else contiguous_placement(cluster, n, ppn)
    nodes, span = pl.nodes, pl.span
    lk = links(cluster, ppn, span, p)
    gen = _generation(cluster)
    node = cluster.node
    fabric = cluster.fabric
    intra_nvlink = node.scale_up.kind in NVLINK_KINDS and node.scale_up_gb_per_s > 0
    ll128 = ((intra_nvlink or ppn == 1) and (nodes == 1 or fabric.kind in RDMA_FABRICS)
             and node.gpu.arch.strip().lower() not in PRE_LL128_ARCHS)
    net = cluster.net
    sharp = bool(fabric.sharp if net.sharp is None else net.sharp)
    nvls = node.scale_up.kind == "nvswitch" and node.gpu.nvls and ppn >= 2
    vendor = (node.cpu.vendor if node.cpu is not None else "intel").lower()
    vendor = "amd" if vendor == "amd" else "intel"
    if nodes == 1:
        ll_max = C.LL_MAX_GB_PER_S_SINGLE_NODE[gen]
    else:
        ll_max = C.LL_MAX_GB_PER_S_MULTI_NODE[vendor][0 if nodes == 2 else 1]
    overhead = p.net_overhead_us_amd if vendor == "amd" else p.net_overhead_us_intel
    extra = max(0.0, fabric.hop_latency_us - p.reference_hop_latency_us) * p.net_latency_scale
    return _Ctx(cluster, op, n, ppn, nodes, span, lk, p, pl, gen, ll128, sharp, nvls, ll_max, overhead, extra)


def _ring_protocol(cx: _Ctx, proto: str, factor: float) -> tuple[float, float]:
    """(bandwidth multiplier, algbw cap) of a ring-like protocol: LL x0.5 capped at llMax busbw,
    LL128 x0.92 capped at channels x per-channel LL128 busbw, Simple x1."""
    if proto == "LL":
        return cx.p.ll_bw_factor, cx.ll_max / factor
    if proto == "LL128":
        return cx.p.ll128_bw_factor, cx.p.channels * C.PER_CHANNEL_RING_LL128_GB_PER_S[cx.gen] / factor
    return 1.0, math.inf


def _inf_if(cond: bool, value: float) -> float:
    return value if cond else math.inf


def _ring_latency(cx: _Ctx, proto: str, nsteps: int, ninter: int) -> float:
    intra = cx.hw(cx.links.intra_hop, "ring", proto)
    if cx.nodes > 1:
        overhead = cx.net_overhead_us * (cx.p.simple_net_overhead_factor if proto == "Simple" else 1.0)
        if proto == "LL":
            intra *= cx.p.ll_intra_factor
        intra = max(intra, overhead)
    # with one rank per node every step is a fully exposed network step: NCCL uses the tree row
    inter = cx.inter("tree" if cx.ppn == 1 else "ring", proto)
    return cx.base("ring", proto) + (nsteps - ninter) * intra + ninter * inter


def _candidates(cx: _Ctx) -> list[Candidate]:
    op, n, ppn, nodes, lk, p = cx.op, cx.n, cx.ppn, cx.nodes, cx.links, cx.p
    multi, local = nodes > 1, ppn > 1
    f = busbw_factor(op, n)
    out: list[Candidate] = []
    if op in ("all_reduce", "all_gather", "reduce_scatter"):
        nsteps = 2 * (n - 1) if op == "all_reduce" else n - 1
        ninter = (2 * (nodes - 1) if op == "all_reduce" else nodes - 1) if multi else 0
        for proto in cx.protocols():
            mult, cap = _ring_protocol(cx, proto, f)
            out.append(Candidate(
                "ring", proto, _ring_latency(cx, proto, nsteps, ninter),
                _inf_if(local, lk.intra_ring_gb_per_s * mult / f),
                _inf_if(multi, lk.ring_net_gb_per_s * mult / f), cap,
                tuner_intra_only=nodes <= 2 and local,
                plateau=op == "all_reduce" and proto == "Simple" and multi and cx.gen != "volta"))
    if op == "all_reduce":
        vol = _tree_volume(nodes)
        for proto in cx.protocols():
            base = p.tree_efficiency
            cap = math.inf
            if proto == "LL":
                base *= p.tree_ll_factor
                cap = 0.5 * cx.ll_max  # NCCL caps tree LL busBw (= 2 x tree algBw) at llMax
            elif proto == "LL128":
                base *= p.tree_ll128_factor_single_node if nodes == 1 else p.tree_ll128_factor_multi_node
            intra_lat = cx.hw(lk.intra_hop, "tree", proto)
            lat = cx.base("tree", proto) + 2 * ((ppn - 1) * intra_lat + _log2i(nodes) * cx.inter("tree", proto))
            out.append(Candidate(
                "tree", proto, lat,
                _inf_if(local, lk.intra_ring_gb_per_s / 2.0 * base),
                _inf_if(multi, lk.ring_net_gb_per_s / max(vol, 1.0) * base), cap,
                tuner_intra_only=nodes <= 2 and local, tree_correction=True))
        if cx.nvls:
            eff = p.nvls_efficiency or C.NVLS_EFFICIENCY.get(cx.gen, C.NVLS_EFFICIENCY["hopper"])
            # NVLS all-reduce: ld_reduce sends S and receives S/ppn per GPU, multimem.st sends S/ppn and
            # receives S: S (1 + 1/ppn) per direction per NVSwitch port -> algbw = B x ppn/(ppn+1)
            nvls_algbw = lk.nvlink_gb_per_s * eff * ppn / (ppn + 1)
            intra_lat = cx.hw(C.NVLINK, "nvls", "Simple")
            if not multi:
                out.append(Candidate("nvls", "Simple", intra_lat, nvls_algbw, math.inf))
            else:
                if cx.sharp:  # NVLS across nodes reduces in the IB switches: S out and S in per node
                    out.append(Candidate("nvls", "Simple", intra_lat + cx.inter("nvls", "Simple"),
                                         nvls_algbw, lk.ring_net_gb_per_s * p.collnet_efficiency,
                                         default_on=False))
                lat = intra_lat + 2 * _log2i(nodes) * cx.inter("nvlstree", "Simple")
                out.append(Candidate("nvlstree", "Simple", lat, nvls_algbw, lk.ring_net_gb_per_s / vol))
        if multi and cx.sharp:
            direct = cx.cluster.node.scale_up.kind == "nvswitch"
            if direct:
                lat = 2 * (min(1, ppn - 1) * cx.hw(lk.intra_hop, "collnet_direct", "Simple")
                           + (ppn - 1) * p.collnet_arity_us) + cx.inter("collnet_direct", "Simple")
            else:
                lat = 2 * (ppn - 1) * cx.hw(lk.intra_hop, "collnet_chain", "Simple") \
                    + cx.inter("collnet_chain", "Simple")
            # intra: reduce-scatter + all-gather on the scale-up links, 2 (ppn-1)/ppn S per GPU;
            # inter: each node sends its reduced S once and receives the result once
            out.append(Candidate(
                "collnet", "Simple", lat,
                lk.intra_ring_gb_per_s * ppn / (2.0 * (ppn - 1)) * p.collnet_efficiency if local else math.inf,
                lk.ring_net_gb_per_s * p.collnet_efficiency, default_on=False))
    if op in ("all_gather", "reduce_scatter") and ppn == 1 and multi:
        lat = cx.base("pat", "Simple") + _log2i(nodes) * cx.inter("pat", "Simple") / C.PAT_LOG_LATENCY_DIVISOR \
            + n * p.pat_per_rank_us
        out.append(Candidate("pat", "Simple", lat, math.inf, lk.ring_net_gb_per_s * p.pat_efficiency / f))
    if op in ("broadcast", "reduce"):
        hop = C.NET if multi else lk.intra_hop
        for proto in cx.protocols():
            mult, cap = _ring_protocol(cx, proto, 1.0)
            # pipelined chain: NCCL charges nRanks hops (Simple: the tree row's chunk latency)
            row = "tree" if proto == "Simple" else "ring"
            step = cx.inter(row, proto) if multi else cx.hw(hop, row, proto)
            out.append(Candidate(
                "ring", proto, cx.base("ring", proto) + n * step,
                _inf_if(local, lk.intra_ring_gb_per_s * mult),
                _inf_if(multi, lk.ring_net_gb_per_s * mult), cap))
    if op == "all_to_all":
        peers_net = n - ppn if multi else 0
        for proto in cx.protocols():
            mult, cap = _ring_protocol(cx, proto, f)
            hop_lat = cx.inter("ring", proto) if multi else cx.hw(lk.intra_hop, "ring", proto)
            overhead = cx.net_overhead_us * (p.simple_net_overhead_factor if proto == "Simple" else 1.0)
            lat = cx.base("ring", proto) + hop_lat + peers_net * overhead
            out.append(Candidate(
                "direct", proto, lat,
                lk.intra_a2a_gb_per_s * mult * n / (ppn - 1) if local else math.inf,
                _inf_if(multi, lk.gpu_net_gb_per_s * mult * n / max(n - ppn, 1)), cap))
    if op == "send_recv":
        for proto in cx.protocols():
            mult, cap = _ring_protocol(cx, proto, 1.0)
            hop_lat = cx.inter("ring", proto) if multi else cx.hw(lk.intra_hop, "ring", proto)
            out.append(Candidate(
                "direct", proto, cx.base("ring", proto) + hop_lat,
                _inf_if(local, lk.intra_pair_gb_per_s * mult),
                _inf_if(multi, lk.p2p_net_gb_per_s * mult), cap))
    return out


def _tree_correction(nbytes: np.ndarray, proto: str) -> np.ndarray:
    table = np.asarray(C.TREE_CORRECTION[proto])
    units = np.maximum(nbytes, 1.0) / C.TREE_CORRECTION_UNIT_BYTES
    k = np.floor(np.log2(np.maximum(units, 1.0))).astype(np.int64)
    inside = k < len(table)
    return np.where(inside, table[np.clip(k, 0, len(table) - 1)], 1.0)


def _resolve(cluster: ClusterSpec, op: str, gpus: int, ranks_per_node: int | None) -> tuple[int, int]:
    if op not in OPS:
        raise SpecError(f"unknown collective '{op}'{did_you_mean(op, OPS)} (one of: {', '.join(OPS)})")
    gpus = int(gpus)
    if gpus < 1:
        raise SpecError(f"gpus must be >= 1 (got {gpus})")
    total = cluster.total_gpus
    if gpus > total:
        raise SpecError(f"gpus={gpus} exceeds the cluster's {total} GPUs "
                        f"({cluster.nodes} nodes x {cluster.node.gpus})")
    g = cluster.node.gpus
    ppn = min(gpus, g) if ranks_per_node is None else int(ranks_per_node)
    if not 1 <= ppn <= g:
        raise SpecError(f"ranks_per_node must be between 1 and {g} GPUs per node (got {ppn})")
    if ppn > gpus:
        raise SpecError(f"ranks_per_node={ppn} exceeds gpus={gpus}")
    nodes = -(-gpus // ppn)
    if nodes > cluster.nodes:
        raise SpecError(f"{gpus} GPUs at {ppn} per node need {nodes} nodes; the cluster has {cluster.nodes}")
    return gpus, ppn


def _norm_choice(value: str | None, choices: tuple[str, ...], what: str) -> str | None:
    if value is None:
        return None
    lowered = {c.lower(): c for c in choices}
    key = str(value).strip().lower()
    if key not in lowered:
        raise SpecError(f"unknown {what} '{value}'{did_you_mean(key, lowered)} (one of: {', '.join(choices)})")
    return lowered[key]


def _params(params: CommParams | None, calibration: Calibration | None) -> CommParams:
    p = params or DEFAULT_PARAMS
    if calibration is not None and calibration.comm:
        p = p.with_overrides(calibration.comm)
    return p


def collective(cluster: ClusterSpec, op: str, nbytes: float | np.ndarray, gpus: int, *,
               ranks_per_node: int | None = None, algorithm: str | None = None, protocol: str | None = None,
               params: CommParams | None = None, calibration: Calibration | None = None,
               placement: np.ndarray | Sequence[int] | None = None) -> CollectiveResult:
    """Time, algbw and busbw of collective ``op`` of ``nbytes`` (nccl-tests size S) over ``gpus`` GPUs.

    The group is placed contiguously, ``ranks_per_node`` ranks per node (default ``min(gpus,
    node.gpus)``); with fewer ranks than GPUs per node, the other GPUs are assumed to run their own
    groups at the same time, so this group gets ``ranks_per_node / node.gpus`` of the node's NICs.
    ``algorithm``/``protocol`` force NCCL_ALGO/NCCL_PROTO; otherwise the candidate with the lowest
    NCCL-tuner time wins per size (CollNet and multi-node NVLS, which need NCCL_COLLNET_ENABLE, only
    when forced; the tuner applies NCCL's medium-size tree correction factors, which only steer the
    choice). Time per candidate: ``latency_us x 1e-6 + S / (algbw x 1e9)`` with
    ``algbw = min(intra, inter, protocol cap)`` (see module docstring).

    ``placement`` (global GPU indices, ``gpus`` distinct ones; see :mod:`.placement`) replaces the
    contiguous layout: nodes ``m`` = distinct nodes touched, ranks per node ``p = max_k c_k`` (the busiest
    node), and the span (leaves, pods, spine fractions) of exactly those nodes. ``ranks_per_node`` may
    then only repeat ``p``. Node indices with ranks per node: ``placement=nodes_placement(cluster,
    nodes, p)``. One GPU: no communication, time 0 and busbw 0."""
    gpus, ppn = _resolve(cluster, op, gpus, ranks_per_node if placement is None else None)
    pl: Placement | None = None
    if placement is not None:
        pl = explicit_placement(cluster, placement, gpus)
        if ranks_per_node is not None and int(ranks_per_node) != pl.ranks_per_node:
            raise SpecError(f"ranks_per_node={ranks_per_node} contradicts the placement (its busiest node "
                            f"holds {pl.ranks_per_node} ranks)")
        ppn = pl.ranks_per_node
    algo = _norm_choice(algorithm, ALGORITHMS, "algorithm")
    proto = _norm_choice(protocol, PROTOCOLS, "protocol")
    p = _params(params, calibration)
    scalar = np.ndim(nbytes) == 0
    if scalar:
        size_scalar = float(nbytes)
        if not (math.isfinite(size_scalar) and size_scalar >= 0):
            raise SpecError(f"message size must be finite and >= 0 bytes (got {nbytes})")
        size = np.array([size_scalar])
    else:
        size = np.asarray(nbytes, dtype=float).reshape(-1)
        if np.any(~np.isfinite(size)) or np.any(size < 0):
            raise SpecError("message sizes must be finite and >= 0 bytes")
    nodes = pl.nodes if pl is not None else -(-gpus // ppn)
    if gpus == 1:
        if scalar:
            return CollectiveResult(op, 1, size_scalar, 0.0, math.inf, 0.0, "none", "none", 1, 1,
                                    {"latency_s": 0.0, "transfer_s": 0.0, "bottleneck": "none"}, pl)
        zeros = np.zeros_like(size)
        return CollectiveResult(op, 1, size, zeros, np.full(size.shape, np.inf), zeros.copy(),
                                np.full(size.shape, "none"), np.full(size.shape, "none"), 1, 1,
                                {"latency_s": zeros, "transfer_s": zeros,
                                 "bottleneck": np.full(size.shape, "none")}, pl)
    cx, all_cands = _prepared(cluster, op, gpus, ppn, p, pl)
    cands = list(all_cands)
    if algo is not None:
        avail = sorted({c.algorithm for c in cands})
        cands = [c for c in cands if c.algorithm == algo]
        if not cands:
            raise SpecError(f"algorithm '{algo}' is not available for {op} on {gpus} GPUs "
                            f"({nodes} nodes x {ppn}) of this cluster (available: {', '.join(avail)})")
    else:
        cands = [c for c in cands if c.default_on]
    if proto is not None:
        avail = sorted({c.protocol for c in cands})
        cands = [c for c in cands if c.protocol == proto]
        if not cands:
            raise SpecError(f"protocol '{proto}' is not available for {op}"
                            f"{' with ' + algo if algo else ''} here (available: {', '.join(avail)})")
    if scalar:
        return _evaluate_scalar(cx, cands, size_scalar)
    return _evaluate(cx, cands, size)


_prepared_cache: dict[tuple, tuple[ClusterSpec, _Ctx, tuple[Candidate, ...]]] = {}
_PREPARED_CACHE_SIZE = 4096


def _prepared(cluster: ClusterSpec, op: str, n: int, ppn: int, p: CommParams,
              pl: Placement | None = None) -> tuple[_Ctx, tuple[Candidate, ...]]:
    """Context and candidates of one (cluster, op, group, params, placement), cached by cluster identity
    (``pl`` None: contiguous)."""
    key = (id(cluster), op, n, ppn, p, pl)
    hit = _prepared_cache.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1], hit[2]
    cx = _context(cluster, op, n, ppn, p, pl)
    cands = tuple(_candidates(cx))
    if len(_prepared_cache) >= _PREPARED_CACHE_SIZE:
        _prepared_cache.pop(next(iter(_prepared_cache)))
    _prepared_cache[key] = (cluster, cx, cands)
    return cx, cands


def _tree_correction_scalar(nbytes: float, proto: str) -> float:
    table = C.TREE_CORRECTION[proto]
    units = max(nbytes, 1.0) / C.TREE_CORRECTION_UNIT_BYTES
    k = math.floor(math.log2(max(units, 1.0)))
    return table[k] if k < len(table) else 1.0


def _bottleneck(cx: _Ctx, c: Candidate) -> str:
    if c.cap_algbw < min(c.intra_algbw, c.inter_algbw):
        return "protocol"
    if c.inter_algbw < c.intra_algbw:
        return "network"
    return "pcie" if cx.links.intra_hop == C.PCI else "nvlink"


def _link_breakdown(cx: _Ctx) -> dict[str, float]:
    lk = cx.links
    return {
        "intra_gb_per_s": lk.intra_ring_gb_per_s if cx.ppn > 1 else 0.0,
        "net_gb_per_s": lk.ring_net_gb_per_s if cx.nodes > 1 else 0.0,
        "nic_gb_per_s": lk.nic_gb_per_s,
        "leaves": float(cx.span.leaves),
        "ring_bw_fraction": float(cx.span.ring_bw_fraction),
    }


def _evaluate_scalar(cx: _Ctx, cands: list[Candidate], size: float) -> CollectiveResult:
    """Same as :func:`_evaluate` for one size, in plain Python (no array overhead)."""
    plateau_min = C.PLATEAU_MIN_BYTES_PER_CHANNEL_RANK * cx.p.channels * cx.n
    best: Candidate | None = None
    best_t = math.inf
    best_lat = 0.0
    for c in cands:
        lat = c.latency_us * 1e-6
        if c.plateau and size >= plateau_min:
            lat *= cx.p.ring_plateau_factor
        tuner = min(c.intra_algbw, c.cap_algbw) if c.tuner_intra_only else \
            min(c.intra_algbw, c.inter_algbw, c.cap_algbw)
        if c.tree_correction:
            tuner *= _tree_correction_scalar(size, c.protocol)
        t = lat + size / (tuner * 1e9)
        if t < best_t:
            best, best_t, best_lat = c, t, lat
    assert best is not None
    bw = min(best.intra_algbw, best.inter_algbw, best.cap_algbw)
    transfer = size / (bw * 1e9)
    time_s = best_lat + transfer
    algbw = size / time_s / 1e9 if time_s > 0 else 0.0
    breakdown: dict[str, Any] = {
        "latency_s": best_lat, "transfer_s": transfer,
        "intra_s": size / (best.intra_algbw * 1e9) if math.isfinite(best.intra_algbw) else 0.0,
        "inter_s": size / (best.inter_algbw * 1e9) if math.isfinite(best.inter_algbw) else 0.0,
        "bottleneck": "latency" if best_lat >= transfer else _bottleneck(cx, best),
        **_link_breakdown(cx),
    }
    return CollectiveResult(cx.op, cx.n, size, time_s, algbw, algbw * busbw_factor(cx.op, cx.n),
                            best.algorithm, best.protocol, cx.nodes, cx.ppn, breakdown,
                            cx.placement)


def _evaluate(cx: _Ctx, cands: list[Candidate], size: np.ndarray) -> CollectiveResult:
    intra = np.array([c.intra_algbw for c in cands])
    inter = np.array([c.inter_algbw for c in cands])
    cap = np.array([c.cap_algbw for c in cands])
    phys = np.minimum(np.minimum(intra, inter), cap)
    tuner = np.array([min(c.intra_algbw, c.cap_algbw) if c.tuner_intra_only else p_
                      for c, p_ in zip(cands, phys.tolist(), strict=True)])
    lat_us = np.array([c.latency_us for c in cands])
    plateau = np.array([c.plateau for c in cands])
    plateau_min = C.PLATEAU_MIN_BYTES_PER_CHANNEL_RANK * cx.p.channels * cx.n
    lat_s = lat_us[:, None] * 1e-6 * np.where(plateau[:, None] & (size >= plateau_min)[None, :],
                                              cx.p.ring_plateau_factor, 1.0)
    tuner_bw = np.broadcast_to(tuner[:, None], lat_s.shape).copy()
    for i, c in enumerate(cands):
        if c.tree_correction:
            tuner_bw[i] *= _tree_correction(size, c.protocol)
    tuner_t = lat_s + size / (tuner_bw * 1e9)
    best = np.argmin(tuner_t, axis=0)
    cols = np.arange(size.shape[0])
    latency_s = lat_s[best, cols]
    transfer_s = size / (phys[best] * 1e9)
    time_s = latency_s + transfer_s
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(time_s > 0, size / time_s / 1e9, 0.0)
    busbw = algbw * busbw_factor(cx.op, cx.n)
    algos = np.array([c.algorithm for c in cands])[best]
    protos = np.array([c.protocol for c in cands])[best]
    links_ = np.array([_bottleneck(cx, c) for c in cands])[best]
    with np.errstate(divide="ignore"):
        intra_s = np.where(np.isfinite(intra[best]), size / (intra[best] * 1e9), 0.0)
        inter_s = np.where(np.isfinite(inter[best]), size / (inter[best] * 1e9), 0.0)
    breakdown: dict[str, Any] = {
        "latency_s": latency_s, "transfer_s": transfer_s, "intra_s": intra_s, "inter_s": inter_s,
        "bottleneck": np.where(latency_s >= transfer_s, "latency", links_),
        **_link_breakdown(cx),
    }
    return CollectiveResult(cx.op, cx.n, size, time_s, algbw, busbw, algos, protos, cx.nodes, cx.ppn, breakdown,
                            cx.placement)
