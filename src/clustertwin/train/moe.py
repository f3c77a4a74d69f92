"""The feed-forward block of a layer: dense FFN or mixture of experts, the expert-parallel dispatch and
combine, and how they overlap compute.

**Expert compute** (per rank, one MoE layer and micro-batch; ranks and tokens as
:mod:`clustertwin.train.moe_layout`): ``E_l = experts / ep`` local experts as one grouped GEMM of
``m_e = T/tp x etp x ep x top_k / experts`` rows each, width ``expert_ffn / etp``. A grouped GEMM pads
each expert's rows to whole tiles and runs its small per-expert problems below dense-GEMM efficiency:

    t_grouped = t_gemm(m_e, ...) x (1 + moe_m_half / m_e) / grouped_gemm_efficiency

(``moe_m_half``: rows at which the per-expert efficiency halves; 128-row tiles of a cuBLAS/CUTLASS
grouped GEMM, DeepSeek's DeepGEMM aligns to 128). Load imbalance scales the busiest rank's expert work
and its dispatch: force-balanced routing (NeMo's benchmark recipes) 1; dropless
``moe_imbalance`` (the busiest of the EP ranks over the mean); a capacity factor ``cf`` caps it at
``cf``. Shared experts are dense GEMMs of ``shared x expert_ffn / etp``; the router a ``T/tp x experts
x h`` GEMM plus its softmax/top-k (fp32 scores, ``ROUTER_BYTES_PER_SCORE``); permutation and
un-permutation move each routed copy (``MOE_PERMUTE_BYTES_PER_H``).

**Dispatch and combine**: :func:`clustertwin.comm.alltoall.expert_all_to_all` for the ``T / tp`` tokens
of a rank over the EP group (``ep`` ranks, ``ep_rpn`` per node), ``top_k`` copies at most ``node_groups``
nodes per token; kernel by the software stack (``nccl`` all-to-all of BF16 routed copies, or DeepEP's
hierarchical NVLink + RDMA kernels with FP8 dispatch when training in FP8 and BF16 combine). Each MoE
layer runs a dispatch and a combine per forward, per backward (the transposed pair) and per recomputed
forward.

**Overlap** (:data:`MOE_OVERLAPS`, a stack feature each):

* ``none``: exposed;
* ``shared_expert``: the forward dispatch runs alongside the shared experts
  (``--moe-shared-expert-overlap``): hidden up to the shared-expert forward + backward time;
* ``a2a``: 1F1B all-to-all overlap (``--overlap-moe-expert-parallel-comm``): one micro-batch's
  dispatch/combine runs under another's compute; hidden up to ``moe_a2a_overlap`` x the layer's compute,
  at ``overlap_interference`` seconds of slower compute per hidden second (the comm kernels hold SMs);
* ``dualpipe``: DeepSeek-V3's DualPipe overlaps forward and backward chunks of two micro-batches the
  same way; in addition its bubble is ``(p/2 - 1)(F&B + B - 3W)`` against 1F1B's ``(p - 1)(F + B)``
  (DeepSeek-AI 2024, Table 2) and each rank holds two copies of the stage's weights
  (:func:`dualpipe_bubble_factor`, :mod:`memory_moe`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.comm.alltoall import expert_all_to_all
from clustertwin.specs.model import ModelSpec
from clustertwin.train.collectives import unique_pairs
from clustertwin.train.gemm import BF16_BYTES, FP8_BYTES, Gemm
from clustertwin.train.layer import ModelShape, linear
from clustertwin.train.layout import MOE_OVERLAP_CODES, Layouts, as_float, fmax, fmin, where
from clustertwin.train.moe_layout import ExpertGroups
from clustertwin.train.params import TrainParams

#: MoE token permutation and un-permutation: read + write each routed copy, twice
MOE_PERMUTE_BYTES_PER_H = 2 * 2 * BF16_BYTES
#: router: fp32 logits written, softmax/top-k read and write them (bytes per token and expert)
ROUTER_BYTES_PER_SCORE = 3 * 4
KERNELS_MOE_EXTRA = 10
#: forward kernels of an MoE layer after the dispatch's host sync: fc1 and fc2 grouped GEMMs, activation,
#: two FP8 casts, combine (count exchange + data), un-permutation, probability scaling, residual add,
#: and the next layer's norm
MOE_POST_SYNC_KERNELS = 12
#: overlap modes of the dispatch/combine all-to-all
MOE_OVERLAPS = ("none", "shared_expert", "a2a", "dualpipe")
#: token counts at which the all-to-all model is sampled per EP group shape (interpolated between)
_GRID_TOKENS = 2.0 ** np.arange(0.0, 22.25, 0.25)
_CACHE: dict[tuple, tuple[object, object, np.ndarray]] = {}


@dataclass
class FfnCost:
    """Seconds of the FFN GEMMs of one layer and what the element-wise model needs."""

    fwd_s: object
    bwd_s: object
    f_tok: float
    """FFN width each token passes through (activation traffic)"""
    extra_bytes: object
    """permutation and router bytes (MoE)"""
    kernels: int
    shared_s: object = 0.0
    """shared-expert forward + backward seconds (what shared-expert overlap can hide behind)"""
    routed_fwd_s: object = 0.0
    """routed-expert grouped GEMMs, forward (the GPU work after the dispatch)"""
    routed_bwd_s: object = 0.0


def imbalance(model: ModelSpec, params: TrainParams, force_balanced: bool) -> float:
    """Busiest EP rank's routed tokens over the mean: 1 when force-balanced, else ``moe_imbalance``
    capped at the capacity factor."""
    if force_balanced or not model.moe:
        return 1.0
    cf = model.moe.capacity_factor
    return min(params.moe_imbalance, cf) if cf else params.moe_imbalance


def ffn_cost(model: ModelSpec, c: ModelShape, lay: Layouts, T, g: Gemm, moe_layer: bool,
             params: TrainParams | None = None, eg: ExpertGroups | None = None, load: float = 1.0) -> FfnCost:
    """The dense FFN, or the routed + shared experts, router and permutation of an MoE layer."""
    t = as_float(lay.tp)
    if not (moe_layer and model.moe):
        fwd, bwd = linear(g, ((c.gate * c.f / t, c.h), (c.h, c.f / t)), T)
        return FfnCost(fwd, bwd, c.f, 0.0, 0)
    me = model.moe
    etp = as_float(eg.etp) if eg is not None else t
    ep = as_float(lay.ep)
    t_r = T / t  # tokens per rank after TP (sequence parallel) and CP
    local_experts = me.experts / ep
    m_e = t_r * etp * ep * me.top_k / me.experts * load  # rows per local expert on the busiest rank
    fe = me.expert_ffn_hidden / etp
    fwd, bwd = linear(g, ((c.gate * fe, c.h), (c.h, fe)), m_e, local_experts)
    if params is not None:
        slow = (1.0 + params.moe_m_half / fmax(m_e, 1.0)) / params.grouped_gemm_efficiency
        fwd, bwd = fwd * slow, bwd * slow
    routed_f, routed_b = fwd, bwd
    shared_f: object = 0.0
    shared_b: object = 0.0
    if me.shared_experts:
        fs = me.shared_experts * me.expert_ffn_hidden
        shared_f, shared_b = linear(g, ((c.gate * fs / t, c.h), (c.h, fs / t)), T)
        fwd, bwd = fwd + shared_f, bwd + shared_b
    r_f, r_b = g.fwd_bwd(t_r, me.experts, c.h)
    f_tok = me.top_k * me.expert_ffn_hidden + me.shared_experts * me.expert_ffn_hidden
    extra = T * MOE_PERMUTE_BYTES_PER_H * c.h * me.top_k * load + t_r * me.experts * ROUTER_BYTES_PER_SCORE
    return FfnCost(fwd + r_f, bwd + r_b, f_tok, extra, KERNELS_MOE_EXTRA, shared_f + shared_b, routed_f, routed_b)


def sync_stall(ffn: FfnCost, a2a_s, full_f, params: TrainParams, bwd_kernel_factor: float):
    """GPU idle seconds per MoE layer and micro-batch from the dispatcher's host synchronisation.

    Megatron-Core's all-to-all dispatcher copies the per-expert token counts to the host to size the
    all-to-all and the grouped GEMM (``.cpu()`` of ``tokens_per_expert``), once per dispatch; the host's
    launch queue drains there, so the kernels after it (``MOE_POST_SYNC_KERNELS``: grouped GEMMs,
    activation, casts, combine, un-permutation, residual) cannot hide behind earlier GPU work:

        stall = sum over passes of max(0, kernels_after x kernel_host_overhead_s - GPU time after)
                + moe_sync_latency_s per pass

    (forward and recomputed forward: the routed experts + combine; backward: twice the kernels).
    Sync-free dispatchers with CUDA graphs (HybridEP, DeepSeek's stack) have none (``Stack.moe_host_sync``)."""
    host = MOE_POST_SYNC_KERNELS * params.kernel_host_overhead_s + params.moe_sync_host_s
    fwd = fmax(host - (ffn.routed_fwd_s + a2a_s / 2), 0.0)
    bwd = fmax(bwd_kernel_factor * host - (ffn.routed_bwd_s + a2a_s / 2), 0.0)
    return fwd * (1.0 + full_f) + bwd + (2.0 + full_f) * params.moe_sync_latency_s


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


def overlap_code(lay: Layouts, stack_overlaps: tuple[str, ...], has_shared: bool):
    """The layout's overlap code, ``auto`` (-1) resolved to the stack's best short of dualpipe."""
    if "a2a" in stack_overlaps:
        auto = MOE_OVERLAP_CODES["a2a"]
    elif "shared_expert" in stack_overlaps and has_shared:
        auto = MOE_OVERLAP_CODES["shared_expert"]
    else:
        auto = MOE_OVERLAP_CODES["none"]
    return where(lay.moe_overlap < 0, auto, lay.moe_overlap)


def ep_exposed(a2a_s, passes, code, compute_s, shared_s, params: TrainParams):
    """Exposed all-to-all seconds of one MoE layer and micro-batch over ``passes`` passes, and the
    compute slow-down of the overlapped part (module docstring)."""
    total = a2a_s * passes
    hide_ab = fmin(total, params.moe_a2a_overlap * compute_s)
    hide_sh = fmin(a2a_s, shared_s)  # forward dispatch/combine beside the shared experts
    hidden = where(code >= MOE_OVERLAP_CODES["a2a"], hide_ab,
                   where(code == MOE_OVERLAP_CODES["shared_expert"], hide_sh, 0.0))
    return total - hidden + params.overlap_interference * hidden


def dualpipe_bubble_factor(pp):
    """DualPipe bubble over the 1F1B bubble: ``(p/2 - 1)(F&B + B - 3W) / ((p - 1)(F + B))`` with the
    backward B = 2F split into input and weight gradients W = B/2 and F&B = F + B (one overlapped
    forward-backward pair): ``(p/2 - 1) / (p - 1) x 2/3`` (DeepSeek-AI 2024, Table 2)."""
    p = as_float(pp)
    return where(p > 1, fmax(p / 2 - 1, 0.0) / fmax(p - 1, 1.0) * (2.0 / 3.0), 1.0)


def overlap_violation(stack_name: str, stack_overlaps: tuple[str, ...], mode: str, model: ModelSpec,
                      pp: int) -> str | None:
    """Why an explicit ``moe_overlap`` cannot run (None when it can): the stack lacks it, DualPipe needs
    an even pipeline of at least 2 stages, shared-expert overlap needs shared experts."""
    if mode in ("auto", "none"):
        return None
    if not model.moe:
        return f"moe_overlap '{mode}' needs an MoE model"
    if mode not in stack_overlaps:
        having = [s for s in STACKS_WITH_OVERLAP if mode in STACKS_WITH_OVERLAP[s]]
        return (f"software stack {stack_name} has no MoE overlap '{mode}' (it runs: {', '.join(stack_overlaps)}); "
                f"stacks that do: {', '.join(having)}")
    if mode == "dualpipe" and (pp < 2 or pp % 2):
        return f"DualPipe needs an even number of pipeline stages >= 2 (pp={pp})"
    if mode == "shared_expert" and not model.moe.shared_experts:
        return "moe_overlap 'shared_expert' needs shared experts (moe.shared_experts > 0)"
    return None


def _stacks_with_overlap() -> dict[str, tuple[str, ...]]:
    from clustertwin.train.stack import STACKS

    return {name: st.moe_overlaps for name, st in STACKS.items()}


STACKS_WITH_OVERLAP = _stacks_with_overlap()


def module_recompute_s(c: ModelShape, lay: Layouts, T, g: Gemm, bw: float, ffn: FfnCost, core_fwd_s, moe_layer: bool):
    """Forward seconds re-run in the backward by the per-module recompute of ``lay.rc_modules``
    (:mod:`clustertwin.train.memory_moe`): ``layernorm`` the two norms (read + write h, 16-bit),
    ``mla_up_proj`` the MLA query and KV up-projection GEMMs, ``core_attn`` the attention core,
    ``moe_act`` the routed experts' SwiGLU (read the gate and up outputs, write the product),
    ``moe`` the routed expert GEMMs, ``shared_experts`` the shared experts' GEMMs."""
    code = lay.rc_modules
    if not isinstance(code, np.ndarray) and not code:
        return 0.0
    from clustertwin.train.memory_moe import RECOMPUTE_MODULES as B

    def on(name):
        return (code & B[name]) > 0

    t = as_float(lay.tp)
    extra = where(on("layernorm"), T * 2 * 2 * BF16_BYTES * c.h / bw, 0.0)
    extra = extra + where(on("core_attn"), core_fwd_s, 0.0)
    if c.latent:
        shapes = ((c.qk / t, c.q_rank),) if c.q_rank else ()
        up = 0.0
        for n_out, k_in in (*shapes, (c.mla_up / t, c.mla_rank)):
            up = up + g.time(T, n_out, k_in)
        extra = extra + where(on("mla_up_proj"), up, 0.0)
    if moe_layer:
        # SwiGLU of every expert a token visits (routed and shared, ``f_tok`` wide)
        extra = extra + where(on("moe_act"), T * 3 * BF16_BYTES * ffn.f_tok / t / bw, 0.0)
        extra = extra + where(on("moe"), ffn.routed_fwd_s, 0.0)
        extra = extra + where(on("shared_experts"), ffn.shared_s / 3.0, 0.0)
    return extra
