"""MoE token dispatch and combine over the expert-parallel group (see :mod:`clustertwin.train.moe`).

**Dispatch and combine**: :func:`clustertwin.comm.expert_a2a.expert_all_to_all` for the ``T / tp`` tokens
of a rank over the EP group (``ep`` ranks, ``ep_rpn`` per node), ``top_k`` copies at most ``node_groups``
nodes per token; kernel by the software stack (``nccl`` all-to-all of BF16 routed copies, or DeepEP's
hierarchical NVLink + RDMA kernels with FP8 dispatch when training in FP8 and BF16 combine). Each MoE
layer runs a dispatch and a combine per forward, per backward (the transposed pair) and per recomputed
forward.
"""

from __future__ import annotations

import numpy as np

from clustertwin.comm.expert_a2a import expert_all_to_all
from clustertwin.specs.model import ModelSpec
from clustertwin.train.collectives import unique_pairs
from clustertwin.train.gemm import BF16_BYTES, FP8_BYTES
from clustertwin.train.layer import ModelShape
from clustertwin.train.layout import Layouts, as_float
from clustertwin.train.moe_layout import ExpertGroups

#: token counts at which the all-to-all model is sampled per EP group shape (interpolated between)
_GRID_TOKENS = 2.0 ** np.arange(0.0, 22.25, 0.25)
_CACHE: dict[tuple, tuple[object, object, np.ndarray]] = {}


def dispatch_bytes_per_value(kernel: str, precision: str) -> tuple[float, float]:
    """(dispatch, combine) bytes per hidden value: DeepEP dispatches FP8 when training in FP8 (with a
    1/128 scale per block), every kernel combines in BF16; NCCL all-to-all moves BF16 both ways."""
    if kernel == "deepep" and precision == "fp8":
        return FP8_BYTES * (1 + 4 / 128), float(BF16_BYTES)
    return float(BF16_BYTES), float(BF16_BYTES)


def _a2a_grid(cluster, ep: int, rpn: int, hidden: int, kernel: str, top_k: int, node_groups: int,
              bpv: float, phase: str, calibration) -> np.ndarray:
    key = (id(cluster), ep, rpn, hidden, kernel, top_k, node_groups, bpv, phase, id(calibration))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is cluster and hit[1] is calibration:
        return hit[2]
    res = expert_all_to_all(cluster, ep, _GRID_TOKENS, hidden, phase=phase, kernel=kernel, top_k=top_k,
                            node_groups=node_groups, bytes_per_value=bpv, ranks_per_node=rpn,
                            calibration=calibration)
    times = np.asarray(res.time_s, dtype=float)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = (cluster, calibration, times)
    return times


def _interp(tokens, times: np.ndarray):
    x = np.asarray(tokens, dtype=float)
    y = np.interp(x, _GRID_TOKENS, times)
    slope = (times[-1] - times[-2]) / (_GRID_TOKENS[-1] - _GRID_TOKENS[-2])
    y = np.where(x > _GRID_TOKENS[-1], times[-1] + (x - _GRID_TOKENS[-1]) * slope, y)
    return float(y) if np.ndim(y) == 0 else y


def pair_kernel(kernel: str, ep: int, rpn: int) -> str:
    """The all-to-all kernel of an EP group: ``flex`` (Megatron-Core's flex dispatcher as the perf recipes
    configure it) runs DeepEP when the group spans nodes and the NCCL all-to-all inside one node."""
    if kernel == "flex":
        return "deepep" if ep > rpn else "nccl"
    return kernel


def dispatch_combine_s(model: ModelSpec, cluster, c: ModelShape, lay: Layouts, T, eg: ExpertGroups,
                       kernel: str, precision: str, load: float, calibration=None):
    """Seconds of one dispatch + one combine of an MoE layer's micro-batch on the busiest rank
    (module docstring); 0 for dense models or EP 1."""
    if not model.moe:
        return 0.0
    me = model.moe
    t_r = T / as_float(lay.tp) * load
    node_groups = me.node_groups or cluster.nodes

    def pair(ep_i: int, rpn_i: int, tokens):
        k = pair_kernel(kernel, ep_i, rpn_i)
        b_d, b_c = dispatch_bytes_per_value(k, precision)
        return sum(_interp(tokens, _a2a_grid(cluster, ep_i, rpn_i, c.h, k, me.top_k, node_groups, b, ph,
                                             calibration)) for b, ph in ((b_d, "dispatch"), (b_c, "combine")))

    ep, rpn = eg.ep, eg.ep_rpn
    if not isinstance(ep, np.ndarray) and not isinstance(rpn, np.ndarray) and not isinstance(t_r, np.ndarray):
        return 0.0 if int(ep) <= 1 else pair(int(ep), int(rpn), t_r)
    tr, e, r = np.broadcast_arrays(np.asarray(t_r, dtype=float), np.asarray(ep), np.asarray(rpn))
    out = np.zeros(tr.shape)
    for ep_i, rpn_i in unique_pairs(e, r):
        if ep_i > 1:
            sel = (e == ep_i) & (r == rpn_i)
            out[sel] = pair(ep_i, rpn_i, tr[sel])
    return out
