"""Composition of the phases of hierarchical algorithms, pipelined with chunking.

A hierarchical collective (NCCL's tree and NVLSTree across nodes: scale-up reduce, network tree,
scale-up broadcast; CollNet; DeepEP's RDMA then NVLink forwarding) moves each chunk through two link
classes in turn. With ``k`` chunks of equal size and phase times ``t1``, ``t2`` for the whole message,
a two-stage pipeline takes

    T = t1 / k + t2 / k + (k - 1) max(t1, t2) / k = max(t1, t2) + min(t1, t2) / k,

so one chunk runs the phases in sequence (``t1 + t2``) and many chunks approach the slower phase alone.
NCCL splits a message into chunks of ``chunk_bytes`` per channel (NCCL_BUFFSIZE / NCCL_STEPS = 512 KiB
for Simple), over ``channels`` channels: ``k = max(1, S / (chunk_bytes x channels))``.
Pipeline fill: a multi-stage pipeline streams only after its first chunks have crossed the stages.
Three forms, by what the pipeline moves:

* trees (Simple) store and forward whole 512 KiB steps along their chain (D = 2 (ppn - 1 + log2 nodes)
  ranks): ``(D - 1) x min(S / channels, chunk) / tree_stage_gb_per_s`` (:func:`chain_fill_s`); the
  72-GPU chains of 20 NVL72 racks make this ~3 ms;
* NVLS and NVLSTree move loops of ``channels x heads x chunk`` bytes (NCCL's NVLS chunk rules,
  :func:`nvls_chunk_bytes`): ``nvls_fill_loops x depth / 2`` loops (:func:`nvls_fill_s`), at least
* the handshake fill of the first chunks: ``fill_stages x min(S, chunk_bytes x channels) / algbw``
  (``nvls_fill_stages`` x the NVLink-5 scale for two-stage NVLS on one node) (:func:`fill_s`), which
  is all CollNet and NVLS across nodes pay.

Composing as ``max`` alone (perfect overlap) over-predicts medium sizes; ``t1 + t2`` under-predicts large
ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from clustertwin.comm.params import CommParams


def chunks(nbytes: np.ndarray, chunk_bytes: float, channels: float) -> np.ndarray:
    """Pipeline chunks of a message: ``max(1, S / (chunk_bytes x channels))``."""
    return np.maximum(np.asarray(nbytes, dtype=float) / (chunk_bytes * channels), 1.0)


def compose(t1: np.ndarray, t2: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Two pipelined phases of ``k`` chunks: ``max(t1, t2) + min(t1, t2) / k``."""
    return np.maximum(t1, t2) + np.minimum(t1, t2) / k


def fill_s(nbytes: np.ndarray, depth: np.ndarray, algbw_gb_per_s: np.ndarray, p: CommParams,
           two_stage_scale: float = 1.0) -> np.ndarray:
    """Pipeline fill time (see the module docstring): ``nvls_fill_stages x two_stage_scale`` for a
    two-stage pipeline (NVLS on one node; the scale is ``blackwell_hop_scale`` on NVLink 5, whose
    per-chunk handshakes are slower like its steps), ``fill_stages`` for deeper ones (NVLSTree, CollNet,
    NVLS across nodes); 0 where ``depth < 2`` or the bandwidth is infinite."""
    size = np.asarray(nbytes, dtype=float)
    d = np.asarray(depth)
    stages = np.where(d <= 2, p.nvls_fill_stages * two_stage_scale, p.fill_stages)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = stages * np.minimum(size, p.chunk_bytes * p.channels) / (np.asarray(algbw_gb_per_s) * 1e9)
    return np.where((d >= 2) & np.isfinite(t), t, 0.0)


def nvls_chunk_bytes(nbytes: np.ndarray, ops: np.ndarray, p: CommParams, tree: bool = False,
                     nodes: int = 1) -> np.ndarray:
    """NCCL's NVLS chunk per (channel, head) for a message of S bytes with ``ops = channels x heads``
    concurrent operations (enqueue.cc ``calcCollChunking``, NCCL 2.2x), from ``nvls_chunk_bytes``
    (NCCL_NVLS_CHUNKSIZE, 128 KiB). NVLS: 64 KiB where S < 64 ops chunk, 32 KiB where S < 8 ops chunk,
    16 KiB where S < 2 ops chunk. NVLSTree (``tree``): at most 64 KiB from 4 nodes
    (NCCL_NVLSTREE_MAX_CHUNKSIZE default), then 128 KiB where S < 16 ops chunk, 64 KiB where S < 4 ops
    chunk, 32 KiB where S < ops chunk. Each test uses the chunk the one before left."""
    size = np.asarray(nbytes, dtype=float)
    o = np.asarray(ops, dtype=float)
    first = p.nvls_chunk_bytes if not (tree and nodes >= 4) else min(p.nvls_chunk_bytes, 65536.0)
    chunk = np.full(np.broadcast(size, o).shape, float(first))
    rules = ((16.0, 131072.0), (4.0, 65536.0), (1.0, 32768.0)) if tree else \
        ((64.0, 65536.0), (8.0, 32768.0), (2.0, 16384.0))
    for factor, floor in rules:
        chunk = np.where((size < factor * o * chunk) & (chunk > floor), floor, chunk)
    return chunk


def nvls_fill_s(nbytes: np.ndarray, ops: np.ndarray, depth: np.ndarray, tree: np.ndarray,
                algbw_gb_per_s: np.ndarray, p: CommParams, nodes: int = 1) -> np.ndarray:
    """Pipeline fill of NVLS and NVLSTree. Each loop moves ``ops x chunk`` bytes (every channel gives every
    head one chunk; all_reduce.h NVLS ``loopCount = nHeads x chunkSize`` per channel) through the
    pipeline's stages: scatter, switch reduce + multicast, gather on one node (depth 2); NVLSTree adds
    the network tree up and down (depth ``2 + 2 log2 nodes``). The first loops are not overlapped:
    ``nvls_fill_loops x depth / 2 x min(S, ops x chunk(S)) / algbw``; 0 where ``ops`` is 0."""
    size = np.asarray(nbytes, dtype=float)
    o = np.asarray(ops, dtype=float)
    t_ = np.asarray(tree, dtype=bool)
    chunk = np.where(t_, nvls_chunk_bytes(size, o, p, True, nodes), nvls_chunk_bytes(size, o, p))
    loop = o * chunk
    with np.errstate(divide="ignore", invalid="ignore"):
        t = p.nvls_fill_loops * np.asarray(depth, dtype=float) / 2.0 * np.minimum(size, loop) \
            / (np.asarray(algbw_gb_per_s) * 1e9)
    return np.where((o > 0) & np.isfinite(t), t, 0.0)


def chain_fill_s(nbytes: np.ndarray, chain: np.ndarray, p: CommParams) -> np.ndarray:
    """Store-and-forward fill of a chain of ``chain`` stages: the first step (``min(S / channels,
    chunk_bytes)`` per channel) crosses every stage at ``tree_stage_gb_per_s`` before the pipeline
    streams: ``(chain - 1) x step / rate``; 0 where ``chain < 2``."""
    size = np.asarray(nbytes, dtype=float)
    c = np.asarray(chain, dtype=float)
    step = np.minimum(size / p.channels, p.chunk_bytes)
    return np.where(c >= 2, (c - 1) * step / (p.tree_stage_gb_per_s * 1e9), 0.0)
