"""One evaluation of a set of candidates over message sizes: NCCL's tuner chooses, the physical model times.

:class:`CandidateTable` holds the per-candidate numbers as arrays, built once per (prepared group, forced
algorithm / protocol) and cached with the group (:func:`clustertwin.comm.model.collective`); :func:`evaluate`
broadcasts them against the sizes:

* tuner time ``tuner_us x plateau + S / (tuner_bw x tree correction)``; its minimum names the algorithm;
* physical time ``latency + max(link phases (chunked when phased), S / cap, p2p channels) + fill``, the fill
  from :mod:`.hierarchical` (tree chain, NVLS loops, handshake fill); of the tuner's algorithm the
  physically fastest protocol runs.

The breakdown names what bounds each size: ``latency`` (latency >= transfer), ``fill`` (the pipeline fill
exceeds the rest of the transfer), else the slowest link (``nvlink``/``pcie``, ``network``) or ``protocol``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clustertwin.comm import constants as C
from clustertwin.comm.algorithms import Candidate, Ctx
from clustertwin.comm.hierarchical import chain_fill_s, chunks, compose, fill_s, nvls_fill_s
from clustertwin.comm.p2p import p2p_channels
from clustertwin.comm.result import CollectiveResult, busbw_factor

ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvlstree", "collnet", "pat", "direct", "deepep",
                               "deepep_ll", "symmetric")
"""NCCL algorithms (``direct``: the point-to-point pattern of all_to_all and send_recv; ``deepep`` and
``deepep_ll``: DeepEP's normal and low-latency all_to_all kernels; ``symmetric``: NCCL's symmetric-memory
all-reduce, offered with ``symmetric_memory=True``)."""


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


@dataclass(frozen=True)
class CandidateTable:
    """The candidates of one evaluation as column arrays (one entry per candidate; ``[:, None]`` shapes
    broadcast against sizes)."""

    cands: tuple[Candidate, ...]
    intra: np.ndarray
    inter: np.ndarray
    cap: np.ndarray
    phys_bw: np.ndarray
    tuner_bw: np.ndarray
    plateau: np.ndarray
    tuner_s: np.ndarray
    tree_corr: tuple[tuple[int, str], ...]
    latency_s: np.ndarray
    phased: np.ndarray
    depth: np.ndarray
    chain: np.ndarray
    ops: np.ndarray
    nvls_tree: np.ndarray
    p2p: tuple[tuple[int, tuple[int, int, float, float]], ...]
    algo_ids: np.ndarray
    factor: np.ndarray
    bottleneck: np.ndarray
    algorithm: np.ndarray
    protocol: np.ndarray

    @classmethod
    def build(cls, cx: Ctx, cands: Sequence[Candidate]) -> CandidateTable:
        cands = tuple(cands)
        intra = np.array([c.intra_algbw for c in cands])
        inter = np.array([c.inter_algbw for c in cands])
        cap = np.array([c.cap_algbw for c in cands])
        phys = np.minimum(np.minimum(intra, inter), cap)
        std = busbw_factor(cx.op, cx.n)

        def col(values: list[Any], dtype: Any = float) -> np.ndarray:
            return np.array(values, dtype=dtype)[:, None]

        return cls(
            cands, intra, inter, cap, phys,
            np.where([c.tuner_intra_only for c in cands], np.minimum(intra, cap), phys),
            col([c.plateau for c in cands], bool), col([c.tuner_us * 1e-6 for c in cands]),
            tuple((i, c.protocol) for i, c in enumerate(cands) if c.tree_correction),
            col([c.latency_us * 1e-6 for c in cands]), col([c.phased for c in cands], bool),
            col([c.depth for c in cands]), col([c.chain for c in cands]), col([c.nvls_ops for c in cands]),
            col([c.algorithm == "nvlstree" for c in cands], bool),
            tuple((i, c.p2p) for i, c in enumerate(cands) if c.p2p is not None),
            np.array([ALGORITHMS.index(c.algorithm) for c in cands]),
            np.array([std if c.report_factor is None else c.report_factor for c in cands]),
            np.array([_bottleneck(cx, c) for c in cands]),
            np.array([c.algorithm for c in cands]), np.array([c.protocol for c in cands]))


def _fill(cx: Ctx, t: CandidateTable, size: np.ndarray) -> np.ndarray:
    """Pipeline fill per candidate and size: trees through their chain; NVLS/NVLSTree the larger of the
    loop fill and the handshake fill; the rest (CollNet, NVLS across nodes) the handshake fill."""
    scale = cx.p.blackwell_hop_scale if cx.gen == "blackwell" else 1.0
    s = size[None, :]
    fill = fill_s(s, t.depth, t.phys_bw[:, None], cx.p, scale)
    if np.any(t.ops > 0):
        loop = nvls_fill_s(s, t.ops, t.depth, t.nvls_tree, t.phys_bw[:, None], cx.p, cx.nodes)
        fill = np.where(t.ops > 0, np.maximum(loop, fill), fill)
    if np.any(t.chain > 0):
        fill = np.where(t.chain > 0, chain_fill_s(s, t.chain, cx.p), fill)
    return fill


def evaluate(cx: Ctx, table: CandidateTable | Sequence[Candidate], size: np.ndarray) -> CollectiveResult:
    """Choose per size with NCCL's tuner, time the choice with the physical model (arrays in, arrays out)."""
    t = table if isinstance(table, CandidateTable) else CandidateTable.build(cx, table)
    plateau = t.plateau & (size >= C.PLATEAU_MIN_BYTES_PER_CHANNEL_RANK * cx.p.channels * cx.n)[None, :]
    tuner_s = t.tuner_s * np.where(plateau, cx.p.ring_plateau_factor, 1.0)
    bw = np.broadcast_to(t.tuner_bw[:, None], tuner_s.shape).copy()
    for i, proto in t.tree_corr:
        bw[i] *= tree_correction(size, proto)
    # physical time of every candidate (candidates x sizes)
    intra_all = _bytes_over(size[None, :], t.intra[:, None])
    inter_all = _bytes_over(size[None, :], t.inter[:, None])
    k = chunks(size, cx.p.chunk_bytes, cx.p.channels)[None, :]
    link_all = np.where(t.phased, compose(intra_all, inter_all, k), np.maximum(intra_all, inter_all))
    transfer_all = np.maximum(link_all, _bytes_over(size[None, :], t.cap[:, None]))
    for i, (lo, hi, step, per_channel) in t.p2p:  # send/recv: NCCL's channels for this size x one channel's rate
        ch_bw = p2p_channels(size, lo, hi, step, cx.nodes > 1) * per_channel
        transfer_all[i] = np.maximum(transfer_all[i], _bytes_over(size, ch_bw))
    fill_all = _fill(cx, t, size)
    transfer_all = transfer_all + fill_all
    time_all = t.latency_s + transfer_all
    tuner_t = tuner_s + size / (bw * 1e9)
    # NCCL's tuner picks the algorithm (with its mis-choices, e.g. the network-bound ring on two nodes);
    # of that algorithm's protocols the physically fastest runs, so time is continuous in size within it
    picked = t.algo_ids[np.argmin(tuner_t, axis=0)]
    best = np.argmin(np.where(t.algo_ids[:, None] == picked[None, :], time_all, np.inf), axis=0)
    cols = np.arange(size.shape[0])
    latency_s = np.broadcast_to(t.latency_s, time_all.shape)[best, cols]
    transfer_s = transfer_all[best, cols]
    fill_s_ = fill_all[best, cols]
    time_s = time_all[best, cols]
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(time_s > 0, size / time_s / 1e9, 0.0)
    lk = cx.links
    breakdown: dict[str, Any] = {
        "latency_s": latency_s, "transfer_s": transfer_s, "fill_s": fill_s_, "intra_s": intra_all[best, cols],
        "inter_s": inter_all[best, cols],
        "bottleneck": np.where(latency_s >= transfer_s, "latency",
                               np.where(fill_s_ > transfer_s - fill_s_, "fill", t.bottleneck[best])),
        "intra_gb_per_s": lk.intra_ring_gb_per_s if cx.ppn > 1 else 0.0,
        "net_gb_per_s": lk.ring_net_gb_per_s if cx.nodes > 1 else 0.0,
        "nic_gb_per_s": lk.nic_gb_per_s,
        "leaves": float(cx.span.leaves),
        "ring_bw_fraction": float(cx.span.ring_bw_fraction),
    }
    return CollectiveResult(cx.op, cx.n, size, time_s, algbw, algbw * t.factor[best], t.algorithm[best],
                            t.protocol[best], cx.nodes, cx.ppn, breakdown, cx.placement)
