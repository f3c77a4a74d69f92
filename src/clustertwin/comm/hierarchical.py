"""Composition of the phases of hierarchical algorithms, pipelined with chunking.

A hierarchical collective (NCCL's tree and NVLSTree across nodes: scale-up reduce, network tree,
scale-up broadcast; CollNet; DeepEP's RDMA then NVLink forwarding) moves each chunk through two link
classes in turn. With ``k`` chunks of equal size and phase times ``t1``, ``t2`` for the whole message,
a two-stage pipeline takes

    T = t1 / k + t2 / k + (k - 1) max(t1, t2) / k = max(t1, t2) + min(t1, t2) / k,

so one chunk runs the phases in sequence (``t1 + t2``) and many chunks approach the slower phase alone.
NCCL splits a message into chunks of ``chunk_bytes`` per channel (NCCL_BUFFSIZE / NCCL_STEPS = 512 KiB
for Simple), over ``channels`` channels: ``k = max(1, S / (chunk_bytes x channels))``.
Pipeline fill: a multi-stage pipeline (NVLS reduce then multicast; tree up then down) streams only after
its first chunks have crossed the stages: ``fill = fill_stages x min(S, chunk_bytes x channels) / algbw``.

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


def fill_s(nbytes: np.ndarray, depth: np.ndarray, algbw_gb_per_s: np.ndarray, p: CommParams) -> np.ndarray:
    """Pipeline fill time (see the module docstring) where ``depth >= 2``; 0 elsewhere or at infinite bandwidth."""
    size = np.asarray(nbytes, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = p.fill_stages * np.minimum(size, p.chunk_bytes * p.channels) / (np.asarray(algbw_gb_per_s) * 1e9)
    return np.where((np.asarray(depth) >= 2) & np.isfinite(t), t, 0.0)
