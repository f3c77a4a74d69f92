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
   patterns, or the chunked two-phase composition of :mod:`.hierarchical` for tree/NVLSTree/CollNet/DeepEP,
   plus the pipeline fill (tree chains, NVLS loops, handshakes; :mod:`.hierarchical`).
3. **The run's NCCL.** ``nccl_version`` and ``nvls`` (NCCL_NVLS_ENABLE) switch the release-dependent rules
   of :mod:`.nccl_version` and the NVLS candidates.

One evaluation path (:mod:`.evaluate`) serves scalar and array sizes (a scalar is an array of one).
Prepared candidates, and their column tables per forced algorithm / protocol, are cached by value: by the
cluster spec itself (frozen, hashable), op, group shape, parameters, placement, launch mode and NCCL
settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from clustertwin.comm import constants as C
from clustertwin.comm.algorithms import Candidate, Ctx, candidates, context
from clustertwin.comm.evaluate import ALGORITHMS, CandidateTable, evaluate
from clustertwin.comm.links import Links, links
from clustertwin.comm.nccl_version import CURRENT_VERSION, parse_version
from clustertwin.comm.params import DEFAULT_PARAMS, CommParams
from clustertwin.comm.placement import Placement, explicit_placement
from clustertwin.comm.result import CollectiveResult, busbw_factor
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                        "send_recv")
"""Collectives, named as nccl-tests' ``*_perf`` binaries."""
PROTOCOLS: tuple[str, ...] = C.PROTOCOLS

__all__ = ["ALGORITHMS", "OPS", "PROTOCOLS", "Candidate", "CollectiveResult", "Links", "busbw_factor",
           "collective", "links"]

def resolve_group(cluster: ClusterSpec, op: str, gpus: int, ranks_per_node: int | None) -> tuple[int, int]:
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


def comm_params(params: CommParams | None, calibration: Calibration | None) -> CommParams:
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
    gpus, ppn = resolve_group(cluster, op, gpus, ranks_per_node if placement is None else None)
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
    p = comm_params(params, calibration)
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
                               1, 1, {"latency_s": zeros, "transfer_s": zeros, "fill_s": zeros.copy(),
                                                "bottleneck": none.copy()}, pl)
        return _scalarise(res) if scalar else res
    if algo == "nvlstree" and nodes == 1:
        algo = "nvls"  # NCCL runs a forced NVLSTree inside one node as NVLS
    cx, all_cands, tables = prepared(cluster, op, gpus, ppn, p, pl, int(gpus_per_process), bool(cuda_graph),
                                      bool(symmetric_memory), None if net_fraction is None else float(net_fraction),
                                      None if not net_hops else int(net_hops), version, bool(nvls))
    table = tables.get((algo, proto))
    if table is None:
        table = tables[(algo, proto)] = CandidateTable.build(cx, _select(all_cands, algo, proto, op, gpus,
                                                                         nodes, ppn))
    res = evaluate(cx, table, size)
    return _scalarise(res) if scalar else res


def _select(all_cands: tuple[Candidate, ...], algo: str | None, proto: str | None, op: str, gpus: int, nodes: int,
            ppn: int) -> list[Candidate]:
    """The candidates a forced algorithm / protocol leaves (default: those on by default)."""
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
    return cands


Prepared = tuple[Ctx, tuple[Candidate, ...], dict[tuple[str | None, str | None], CandidateTable]]
"""A group's context, its candidates, and their tables per (forced algorithm, forced protocol)."""
_prepared_cache: dict[tuple, Prepared] = {}
_PREPARED_CACHE_SIZE = 4096


def prepared(cluster: ClusterSpec, op: str, n: int, ppn: int, p: CommParams, pl: Placement | None,
              gpus_per_process: int = 1, cuda_graph: bool = False,
              symmetric: bool = False, net_fraction: float | None = None,
              net_hops: int | None = None, version: tuple[int, int, int] = CURRENT_VERSION,
              nvls: bool = True) -> Prepared:
    """Context and candidates of one (cluster, op, group, params, placement, launch mode, NCCL settings),
    cached by value (two equal cluster specs share an entry; ``pl`` None: contiguous)."""
    key = (cluster, op, n, ppn, p, pl, gpus_per_process, cuda_graph, symmetric, net_fraction, net_hops, version,
           nvls)
    hit = _prepared_cache.get(key)
    if hit is not None:
        return hit
    cx = context(cluster, op, n, ppn, p, pl, gpus_per_process, cuda_graph, symmetric, net_fraction, net_hops,
                 version, nvls)
    entry: Prepared = (cx, tuple(candidates(cx)), {})
    if len(_prepared_cache) >= _PREPARED_CACHE_SIZE:
        _prepared_cache.pop(next(iter(_prepared_cache)))
    _prepared_cache[key] = entry
    return entry


def _scalar(v: Any) -> Any:
    if isinstance(v, np.ndarray) and v.shape == (1,):
        return v[0].item()
    return v


def _scalarise(res: CollectiveResult) -> CollectiveResult:
    """The result of a scalar size: Python floats and strings instead of arrays of one."""
    return CollectiveResult(res.op, res.gpus, _scalar(res.nbytes), _scalar(res.time_s), _scalar(res.algbw_gb_per_s),
                            _scalar(res.busbw_gb_per_s), _scalar(res.algorithm), _scalar(res.protocol), res.nodes,
                            res.ranks_per_node, {k: _scalar(v) for k, v in res.breakdown.items()}, res.placement)


