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

**Host sync** (:func:`sync_stall`): the all-to-all dispatcher's token-count copy to the host idles the
GPU for the host work after it that the expert GEMMs do not cover. **Per-module recompute**
(:func:`module_recompute_s`, :func:`module_recompute_flops_per_token`): the re-run forward of the
modules ``recompute_modules`` names (their memory: :mod:`clustertwin.train.memory_moe`).

Dispatch and combine: :mod:`clustertwin.train.moe_dispatch`; their overlap with compute and DualPipe:
:mod:`clustertwin.train.moe_overlap`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.specs.model import ModelSpec
from clustertwin.train.gemm import BF16_BYTES, Gemm
from clustertwin.train.layer import ModelShape, linear
from clustertwin.train.layout import Layouts, as_float, fmax, where
from clustertwin.train.moe_dispatch import dispatch_combine_s, pair_kernel
from clustertwin.train.moe_layout import ExpertGroups
from clustertwin.train.moe_overlap import (
    MOE_OVERLAPS,
    dualpipe_bubble_factor,
    ep_exposed,
    overlap_code,
    overlap_violation,
)
from clustertwin.train.params import TrainParams

#: the MoE terms the composer imports from here (the dispatch and overlap ones re-exported)
__all__ = ["MOE_OVERLAPS", "FfnCost", "dispatch_combine_s", "dualpipe_bubble_factor", "ep_exposed", "ffn_cost",
           "imbalance", "module_recompute_flops_per_token", "module_recompute_s", "overlap_code",
           "overlap_violation", "pair_kernel", "sync_stall"]

#: MoE token permutation and un-permutation: read + write each routed copy, twice
MOE_PERMUTE_BYTES_PER_H = 2 * 2 * BF16_BYTES
#: router: fp32 logits written, softmax/top-k read and write them (bytes per token and expert)
ROUTER_BYTES_PER_SCORE = 3 * 4
KERNELS_MOE_EXTRA = 10
#: forward kernels of an MoE layer after the dispatch's host sync: fc1 and fc2 grouped GEMMs, activation,
#: two FP8 casts, combine (count exchange + data), un-permutation, probability scaling, residual add,
#: and the next layer's norm
MOE_POST_SYNC_KERNELS = 12


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


def module_recompute_flops_per_token(model: ModelSpec, seq_len: int, code, causal: bool):
    """Hardware FLOPs per token that per-module recompute re-runs (GEMM modules only; norms and SwiGLU are
    element-wise): ``core_attn`` the attention core forward (as selective recompute), ``mla_up_proj``
    ``2 (q_lora qk + kv_lora (qk - heads rope + v))`` per layer, ``moe`` ``2 top_k (gate + 1) h f_e`` and
    ``shared_experts`` ``2 shared (gate + 1) h f_e`` per MoE layer."""
    if not isinstance(code, np.ndarray) and not code:
        return 0.0
    from clustertwin.train import flops as F
    from clustertwin.train.memory_moe import RECOMPUTE_MODULES as B

    def on(name):
        return (code & B[name]) > 0

    layers = model.layers + model.mtp_layers
    extra = where(on("core_attn"), F.flops_per_token(model, seq_len, "selective", causal).recompute, 0.0)
    w = F.attention_widths(model)
    if w.latent:
        up = (model.mla_q_lora_rank or 0) * w.qk + (model.mla_kv_lora_rank or 0) * (
            w.qk - model.heads * (model.mla_rope_dim or 0) + w.v)
        extra = extra + where(on("mla_up_proj"), 2.0 * up * layers, 0.0)
    if model.moe:
        me = model.moe
        mats = F.ffn_matrices(model)
        per_expert = 2.0 * mats * model.hidden * me.expert_ffn_hidden * model.n_moe_layers
        extra = extra + where(on("moe"), me.top_k * per_expert, 0.0)
        extra = extra + where(on("shared_experts"), me.shared_experts * per_expert, 0.0)
    return extra
