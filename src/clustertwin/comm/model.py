"""NCCL-style collective cost model: time, algbw and busbw of a collective on a GPU group of a cluster.

For each (algorithm, protocol) candidate of :mod:`.algorithms` (all_to_all: :mod:`.alltoall`):

1. **Algorithm, as NCCL picks it.** NCCL's tuner time ``tuner_us x plateau + S / tuner_bw`` with its
   own latency table (:mod:`.constants`), its medium-size tree correction factors, and its habit of sizing
   ring and tree by the intra-node bandwidth on up to two nodes (``bw = nNodes <= 2 ? bwIntra : bwInter``,
   so on two nodes it may pick a ring that the network then limits). The tuner's minimum names the
   algorithm per size; of that algorithm's protocols the one with the least physical time runs (so time
   is continuous in size within an algorithm; a tuner-chosen protocol fitted worse). ``algorithm`` /
   ``protocol`` force a choice (NCCL_ALGO/NCCL_PROTO). Forced NVLSTree on one node runs as NVLS, as NCCL
   does.
2. **Time, from the physics.** ``time = latency_us x 1e-6 + T_bw(S)`` with the physical latency of
   :mod:`.latency` (launch with or without CUDA graphs, per-hop NVLink/PCIe steps, NIC + switch + proxy
   per network step, NVLS phases) and ``T_bw = max(S / intra, S / inter, S / cap)`` for single-phase
   patterns, or the chunked two-phase composition of :mod:`.hierarchical` for tree/NVLSTree/CollNet/DeepEP.

One evaluation path serves scalar and array sizes (a scalar is an array of one). Prepared candidates are
cached by value: by the cluster spec itself (frozen, hashable), op, group shape, parameters, placement and
launch mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from clustertwin.comm import constants as C
from clustertwin.comm.algorithms import Candidate, Ctx, candidates, context
from clustertwin.comm.hierarchical import chain_fill_s, chunks, compose, fill_s, nvls_fill_s
from clustertwin.comm.links import Links, links
from clustertwin.comm.nccl_version import CURRENT_VERSION, parse_version
from clustertwin.comm.p2p import p2p_channels
from clustertwin.comm.params import DEFAULT_PARAMS, CommParams
from clustertwin.comm.placement import Placement, explicit_placement
from clustertwin.comm.result import CollectiveResult, busbw_factor
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                        "send_recv")
"""Collectives, named as nccl-tests' ``*_perf`` binaries."""
ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvlstree", "collnet", "pat", "direct", "deepep",
                               "deepep_ll", "symmetric")
"""NCCL algorithms (``direct``: the point-to-point pattern of all_to_all and send_recv; ``deepep`` and
``deepep_ll``: DeepEP's normal and low-latency all_to_all kernels; ``symmetric``: NCCL's symmetric-memory
all-reduce, offered with ``symmetric_memory=True``)."""
PROTOCOLS: tuple[str, ...] = C.PROTOCOLS

__all__ = ["ALGORITHMS", "OPS", "PROTOCOLS", "Candidate", "CollectiveResult", "Links", "busbw_factor",
           "collective", "links"]

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
               placement: np.ndarray | Sequence[int] | None = None, gpus_per_process: int = 1,
               cuda_graph: bool = False, symmetric_memory: bool = False,
               net_fraction: float | None = None, net_hops: int | None = None,
               nccl_version: str | None = None, nvls: bool = True) -> CollectiveResult:
    """Time, algbw and busbw of collective ``op`` of ``nbytes`` (nccl-tests size S) over ``gpus`` GPUs.

    The group is placed contiguously, ``ranks_per_node`` ranks per node (default ``min(gpus,
    node.gpus)``); with fewer ranks than GPUs per node, the other GPUs are assumed to run their own
    groups at the same time, so this group gets ``ranks_per_node / node.gpus`` of the node's NICs.
    ``algorithm``/``protocol`` force NCCL_ALGO/NCCL_PROTO; otherwise NCCL's tuner picks per size
    (CollNet, multi-node NVLS and the DeepEP kernels only when forced). ``gpus_per_process`` is how many
    GPUs one process drives (nccl-tests ``-g``; launches are serial), ``cuda_graph`` whether the
    collective is launched from a CUDA graph (nccl-tests ``-G``), ``symmetric_memory`` whether the buffers
    are registered symmetric windows (nccl-tests ``-R 2``, NCCL >= 2.27). See the module docstring for the model.

    The run's NCCL: ``nccl_version`` (``"2.26.2"``; default: the current release, 2.27 or later) decides
    version-dependent rules (:func:`clustertwin.comm.nccl_version.parse_version`: before 2.27 LL128 is off
    across nodes where the GPU reaches its NIC through the CPU, as on Grace superchips); ``nvls=False`` is
    ``NCCL_NVLS_ENABLE=0`` (no NVLS or NVLSTree candidate).

    ``placement`` (global GPU indices, ``gpus`` distinct ones; see :mod:`.placement`) replaces the
    contiguous layout: nodes = distinct nodes touched, ranks per node = the busiest node's count, and the
    span of exactly those nodes. One GPU: no communication, time 0 and busbw 0.

    ``net_fraction`` (0 < f <= 1, default none): the share of injection bandwidth left to this group by
    concurrent groups on the same links (the training model passes
    :func:`clustertwin.topology.group_bandwidth`'s fraction); the network bandwidth fractions become
    ``min(span fraction, f)``.

    ``net_hops`` (default none): the switch hops of the group's farthest ring edge or all-to-all pair
    where the job's placement puts it (the training model passes
    :func:`clustertwin.topology.group_bandwidth`'s ``max_hops``); it replaces the contiguous span's hop
    count in the network step latency (``hops x switch_latency_ns``, :mod:`.latency`)."""
    if net_fraction is not None and not 0.0 < float(net_fraction) <= 1.0:
        raise SpecError(f"net_fraction must be in (0, 1] (got {net_fraction})")
    if net_hops is not None and int(net_hops) < 0:
        raise SpecError(f"net_hops must be >= 0 (got {net_hops})")
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
    if int(gpus_per_process) < 1:
        raise SpecError(f"gpus_per_process must be >= 1 (got {gpus_per_process})")
    p = _params(params, calibration)
    version = parse_version(nccl_version)
    scalar = np.ndim(nbytes) == 0
    size = np.asarray(nbytes, dtype=float).reshape(-1)
    if np.any(~np.isfinite(size)) or np.any(size < 0):
        raise SpecError(f"message size must be finite and >= 0 bytes (got {nbytes})" if scalar
                        else "message sizes must be finite and >= 0 bytes")
    nodes = pl.nodes if pl is not None else -(-gpus // ppn)
    if gpus == 1:
        zeros = np.zeros_like(size)
        none = np.full(size.shape, "none")
        res = CollectiveResult(op, 1, size, zeros, np.full(size.shape, np.inf), zeros.copy(), none, none.copy(),
                               1, 1, {"latency_s": zeros, "transfer_s": zeros, "bottleneck": none.copy()}, pl)
        return _scalarise(res) if scalar else res
    if algo == "nvlstree" and nodes == 1:
        algo = "nvls"  # NCCL runs a forced NVLSTree inside one node as NVLS
    cx, all_cands = _prepared(cluster, op, gpus, ppn, p, pl, int(gpus_per_process), bool(cuda_graph),
                              bool(symmetric_memory), None if net_fraction is None else float(net_fraction),
                              None if not net_hops else int(net_hops), version, bool(nvls))
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
    res = evaluate(cx, cands, size)
    return _scalarise(res) if scalar else res


_prepared_cache: dict[tuple, tuple[Ctx, tuple[Candidate, ...]]] = {}
_PREPARED_CACHE_SIZE = 4096


def _prepared(cluster: ClusterSpec, op: str, n: int, ppn: int, p: CommParams, pl: Placement | None,
              gpus_per_process: int = 1, cuda_graph: bool = False,
              symmetric: bool = False, net_fraction: float | None = None,
              net_hops: int | None = None, version: tuple[int, int, int] = CURRENT_VERSION,
              nvls: bool = True) -> tuple[Ctx, tuple[Candidate, ...]]:
    """Context and candidates of one (cluster, op, group, params, placement, launch mode), cached by value
    (two equal cluster specs share an entry; ``pl`` None: contiguous)."""
    key = (cluster, op, n, ppn, p, pl, gpus_per_process, cuda_graph, symmetric, net_fraction, net_hops, version,
           nvls)
    hit = _prepared_cache.get(key)
    if hit is not None:
        return hit
    cx = context(cluster, op, n, ppn, p, pl, gpus_per_process, cuda_graph, symmetric, net_fraction, net_hops,
                 version, nvls)
    entry = (cx, tuple(candidates(cx)))
    if len(_prepared_cache) >= _PREPARED_CACHE_SIZE:
        _prepared_cache.pop(next(iter(_prepared_cache)))
    _prepared_cache[key] = entry
    return entry


def tree_correction(nbytes: np.ndarray, proto: str) -> np.ndarray:
    """NCCL's medium-size tree bandwidth factor per size (tuner only): entry floor(log2(S / 64))."""
    table = np.asarray(C.TREE_CORRECTION[proto])
    units = np.maximum(nbytes, 1.0) / C.TREE_CORRECTION_UNIT_BYTES
    k = np.floor(np.log2(np.maximum(units, 1.0))).astype(np.int64)
    return np.where(k < len(table), table[np.clip(k, 0, len(table) - 1)], 1.0)


def _bottleneck(cx: Ctx, c: Candidate) -> str:
    if c.cap_algbw < min(c.intra_algbw, c.inter_algbw):
        return "protocol"
    if c.inter_algbw < c.intra_algbw:
        return "network"
    return "pcie" if cx.links.intra_hop == C.PCI else "nvlink"


def _bytes_over(size: np.ndarray, bw: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isfinite(bw), size / (bw * 1e9), 0.0)


def evaluate(cx: Ctx, cands: Sequence[Candidate], size: np.ndarray) -> CollectiveResult:
    """Choose per size with NCCL's tuner, time the choice with the physical model (arrays in, arrays out)."""
    intra = np.array([c.intra_algbw for c in cands])
    inter = np.array([c.inter_algbw for c in cands])
    cap = np.array([c.cap_algbw for c in cands])
    phys_bw = np.minimum(np.minimum(intra, inter), cap)
    tuner_bw = np.where([c.tuner_intra_only for c in cands], np.minimum(intra, cap), phys_bw)
    plateau = np.array([c.plateau for c in cands])[:, None] & \
        (size >= C.PLATEAU_MIN_BYTES_PER_CHANNEL_RANK * cx.p.channels * cx.n)[None, :]
    tuner_s = np.array([c.tuner_us for c in cands])[:, None] * 1e-6 * np.where(plateau, cx.p.ring_plateau_factor, 1.0)
    bw = np.broadcast_to(tuner_bw[:, None], tuner_s.shape).copy()
    for i, c in enumerate(cands):
        if c.tree_correction:
            bw[i] *= tree_correction(size, c.protocol)
    # physical time of every candidate (candidates x sizes)
    lat_all = np.array([c.latency_us for c in cands])[:, None] * 1e-6
    intra_all = _bytes_over(size[None, :], intra[:, None])
    inter_all = _bytes_over(size[None, :], inter[:, None])
    k = chunks(size, cx.p.chunk_bytes, cx.p.channels)[None, :]
    phased = np.array([c.phased for c in cands])[:, None]
    link_all = np.where(phased, compose(intra_all, inter_all, k), np.maximum(intra_all, inter_all))
    transfer_all = np.maximum(link_all, _bytes_over(size[None, :], cap[:, None]))
    for i, c in enumerate(cands):
        if c.p2p is not None:  # send/recv: NCCL's channels for this size x the bandwidth of one channel
            lo, hi, step, per_channel = c.p2p
            ch_bw = p2p_channels(size, lo, hi, step, cx.nodes > 1) * per_channel
            transfer_all[i] = np.maximum(transfer_all[i], _bytes_over(size, ch_bw))
    depth = np.array([c.depth for c in cands], dtype=float)[:, None]
    scale = cx.p.blackwell_hop_scale if cx.gen == "blackwell" else 1.0
    generic = fill_s(size[None, :], depth, phys_bw[:, None], cx.p, scale)
    chain_n = np.array([c.chain for c in cands], dtype=float)[:, None]
    ops = np.array([c.nvls_ops for c in cands], dtype=float)[:, None]
    chain = chain_fill_s(size[None, :], chain_n, cx.p)
    tree = np.array([c.algorithm == "nvlstree" for c in cands])[:, None]
    loop = nvls_fill_s(size[None, :], ops, depth, tree, phys_bw[:, None], cx.p, cx.nodes)
    # trees: store-and-forward through their chain; NVLS/NVLSTree: the larger of the loop fill and the
    # handshake fill; the rest (CollNet, NVLS across nodes): the handshake fill
    fill = np.where(chain_n > 0, chain, np.where(ops > 0, np.maximum(loop, generic), generic))
    transfer_all = transfer_all + fill
    time_all = lat_all + transfer_all
    tuner_t = tuner_s + size / (bw * 1e9)
    # NCCL's tuner picks the algorithm (with its mis-choices, e.g. the network-bound ring on two nodes);
    # of that algorithm's protocols the physically fastest runs, so time is continuous in size within it
    algo_ids = np.array([ALGORITHMS.index(c.algorithm) for c in cands])
    picked = algo_ids[np.argmin(tuner_t, axis=0)]
    best = np.argmin(np.where(algo_ids[:, None] == picked[None, :], time_all, np.inf), axis=0)
    cols = np.arange(size.shape[0])
    chosen = [cands[i] for i in best.tolist()]
    latency_s = np.broadcast_to(lat_all, time_all.shape)[best, cols]
    intra_s = intra_all[best, cols]
    inter_s = inter_all[best, cols]
    transfer_s = transfer_all[best, cols]
    time_s = time_all[best, cols]
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(time_s > 0, size / time_s / 1e9, 0.0)
    std = busbw_factor(cx.op, cx.n)
    factor = np.array([std if c.report_factor is None else c.report_factor for c in cands])[best]
    lk = cx.links
    breakdown: dict[str, Any] = {
        "latency_s": latency_s, "transfer_s": transfer_s, "intra_s": intra_s, "inter_s": inter_s,
        "bottleneck": np.where(latency_s >= transfer_s, "latency",
                               np.array([_bottleneck(cx, c) for c in cands])[best]),
        "intra_gb_per_s": lk.intra_ring_gb_per_s if cx.ppn > 1 else 0.0,
        "net_gb_per_s": lk.ring_net_gb_per_s if cx.nodes > 1 else 0.0,
        "nic_gb_per_s": lk.nic_gb_per_s,
        "leaves": float(cx.span.leaves),
        "ring_bw_fraction": float(cx.span.ring_bw_fraction),
    }
    return CollectiveResult(cx.op, cx.n, size, time_s, algbw, algbw * factor,
                            np.array([c.algorithm for c in chosen]), np.array([c.protocol for c in chosen]),
                            cx.nodes, cx.ppn, breakdown, cx.placement)


def _scalar(v: Any) -> Any:
    if isinstance(v, np.ndarray) and v.shape == (1,):
        return v[0].item()
    return v


def _scalarise(res: CollectiveResult) -> CollectiveResult:
    """The result of a scalar size: Python floats and strings instead of arrays of one."""
    return CollectiveResult(res.op, res.gpus, _scalar(res.nbytes), _scalar(res.time_s), _scalar(res.algbw_gb_per_s),
                            _scalar(res.busbw_gb_per_s), _scalar(res.algorithm), _scalar(res.protocol), res.nodes,
                            res.ranks_per_node, {k: _scalar(v) for k, v in res.breakdown.items()}, res.placement)


