"""The expert-parallel dispatch/combine a mixture-of-experts layer asks for: one MoE all-to-all timed with
NCCL's all_to_all (``kernel="nccl"``) or DeepEP's normal or low-latency kernels (the candidates and byte
volumes of :mod:`.alltoall`, timed by :func:`clustertwin.comm.evaluate.evaluate`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clustertwin.comm.alltoall import (
    DEEPSEEK_V3_NODE_GROUPS,
    DEEPSEEK_V3_TOP_K,
    KERNELS,
    deepep_candidates,
    deepep_volumes,
)
from clustertwin.comm.evaluate import evaluate
from clustertwin.comm.model import collective, comm_params, prepared, resolve_group
from clustertwin.errors import SpecError, did_you_mean


@dataclass(frozen=True)
class ExpertAllToAll:
    """Cost of one expert-parallel dispatch or combine (arrays when ``tokens`` was an array)."""

    kernel: str
    phase: str
    ep: int
    time_s: Any
    payload_bytes: Any
    """Bytes of the rank's tokens (tokens x hidden x bytes per value)."""
    nvlink_bytes: Any
    """Bytes this rank moves over the scale-up links."""
    rdma_bytes: Any
    """Bytes through this rank's NIC."""
    busbw_gb_per_s: Any
    """The kernel's own reported bandwidth (nccl-tests busbw for nccl, DeepEP's bottleneck bandwidth)."""


def expert_all_to_all(cluster: Any, ep: int, tokens: float | np.ndarray, hidden: int, *,
                      phase: str = "dispatch", kernel: str = "deepep", top_k: int = DEEPSEEK_V3_TOP_K,
                      node_groups: int = DEEPSEEK_V3_NODE_GROUPS, bytes_per_value: float | None = None,
                      ranks_per_node: int | None = None, params: Any = None,
                      calibration: Any = None) -> ExpertAllToAll:
    """Time of an MoE dispatch (``phase="dispatch"``) or combine over ``ep`` expert-parallel ranks.

    ``tokens`` per rank (scalar or array), ``hidden`` size; ``bytes_per_value`` defaults to 1 for dispatch
    (FP8) and 2 for combine (BF16), as DeepSeek-V3 runs them. ``kernel``: ``"deepep"`` (normal,
    hierarchical NVLink + RDMA), ``"deepep_ll"`` (low latency, direct RDMA per (token, expert)) or
    ``"nccl"`` (an nccl all_to_all of the ``tokens x top_k x hidden`` routed bytes). ``top_k`` experts per
    token, at most ``node_groups`` nodes per token. The expert count does not enter: the routing is taken
    as uniform (balanced experts)."""
    if kernel not in KERNELS:
        raise SpecError(f"unknown all-to-all kernel '{kernel}'{did_you_mean(kernel, KERNELS)} "
                        f"(one of: {', '.join(KERNELS)})")
    if phase not in ("dispatch", "combine"):
        raise SpecError(f"phase must be dispatch or combine (got '{phase}')")
    bpv = bytes_per_value if bytes_per_value is not None else (1.0 if phase == "dispatch" else 2.0)
    payload = np.asarray(tokens, dtype=float) * float(hidden) * bpv
    kw = {"ranks_per_node": ranks_per_node, "params": params, "calibration": calibration}
    if kernel == "nccl":
        res = collective(cluster, "all_to_all", payload * top_k, ep, **kw)
        ppn = res.ranks_per_node
        remote = (ep - ppn) / ep if res.nodes > 1 else 0.0
        routed = payload * top_k
        return ExpertAllToAll(kernel, phase, ep, res.time_s, payload, routed * (1 - remote), routed * remote,
                              res.busbw_gb_per_s)
    n, ppn = resolve_group(cluster, "all_to_all", ep, ranks_per_node)
    cx, _, _ = prepared(cluster, "all_to_all", n, ppn, comm_params(params, calibration), None)
    cands = {c.algorithm: c for c in deepep_candidates(cx, top_k, node_groups)}
    if kernel == "deepep_ll":
        routed = payload * top_k
        res = evaluate(cx, [cands["deepep_ll"]], np.atleast_1d(routed).astype(float).reshape(-1))
        t = res.time_s.reshape(np.shape(routed))
        local = ppn / n
        return ExpertAllToAll(kernel, phase, n, _out(t), payload, routed * local, routed * (1 - local),
                              _out(res.busbw_gb_per_s.reshape(np.shape(routed))))
    res = evaluate(cx, [cands["deepep"]], np.atleast_1d(payload).astype(float).reshape(-1))
    vol = deepep_volumes(cx.nodes, ppn, top_k, node_groups)
    return ExpertAllToAll(kernel, phase, n, _out(res.time_s.reshape(np.shape(payload))), payload,
                          payload * vol.nvlink, payload * vol.rdma,
                          _out(res.busbw_gb_per_s.reshape(np.shape(payload))))


def _out(v: np.ndarray) -> Any:
    return float(v) if np.ndim(v) == 0 else v


__all__ = ["ExpertAllToAll", "expert_all_to_all"]
