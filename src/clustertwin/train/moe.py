"""The feed-forward block of a layer: dense FFN or mixture of experts, and the expert-parallel
all-to-all.

* dense FFN: (gate +) up and down projections, split over TP;
* MoE: the ``experts / ep`` local experts as one grouped GEMM of ``T top_k / local experts`` tokens each
  (balanced routing), shared experts as dense GEMMs, the router GEMM (T x experts), and the token
  permutation / un-permutation (``MOE_PERMUTE_BYTES_PER_H`` bytes per routed copy and unit of width);
* EP: a dispatch and a combine all-to-all of the routed tokens per MoE layer and pass (forward,
  backward, recomputed forward), ``1 - ep_overlap`` exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.specs.model import ModelSpec
from clustertwin.train.gemm import BF16_BYTES, Gemm
from clustertwin.train.layer import ModelShape, linear
from clustertwin.train.layout import Layouts, as_float
from clustertwin.train.params import TrainParams

#: MoE token permutation and un-permutation: read + write each routed copy, twice
MOE_PERMUTE_BYTES_PER_H = 2 * 2 * BF16_BYTES
KERNELS_MOE_EXTRA = 10


@dataclass
class FfnCost:
    """Seconds of the FFN GEMMs of one layer and what the element-wise model needs."""

    fwd_s: object
    bwd_s: object
    f_tok: float
    """FFN width each token passes through (activation traffic)"""
    extra_bytes: object
    """permutation bytes (MoE)"""
    kernels: int


def ffn_cost(model: ModelSpec, c: ModelShape, lay: Layouts, T, g: Gemm, moe_layer: bool) -> FfnCost:
    """The dense FFN, or the routed + shared experts and router of an MoE layer."""
    t = as_float(lay.tp)
    if not (moe_layer and model.moe):
        fwd, bwd = linear(g, ((c.gate * c.f / t, c.h), (c.h, c.f / t)), T)
        return FfnCost(fwd, bwd, c.f, 0.0, 0)
    me = model.moe
    local_experts = me.experts / lay.ep
    m_e = T * me.top_k / local_experts  # tokens per local expert (balanced routing)
    fwd, bwd = linear(g, ((c.gate * me.expert_ffn_hidden / t, c.h), (c.h, me.expert_ffn_hidden / t)), m_e,
                      local_experts)
    if me.shared_experts:
        fs = me.shared_experts * me.expert_ffn_hidden
        s_f, s_b = linear(g, ((c.gate * fs / t, c.h), (c.h, fs / t)), T)
        fwd, bwd = fwd + s_f, bwd + s_b
    r_f, r_b = g.fwd_bwd(T, me.experts, c.h)
    f_tok = me.top_k * me.expert_ffn_hidden + me.shared_experts * me.expert_ffn_hidden
    return FfnCost(fwd + r_f, bwd + r_b, f_tok, T * MOE_PERMUTE_BYTES_PER_H * c.h * me.top_k, KERNELS_MOE_EXTRA)


def ep_exposed(model: ModelSpec, c: ModelShape, T, passes, coll, ep_group, params: TrainParams):
    """Exposed dispatch + combine all-to-all seconds of one MoE layer over ``passes`` passes."""
    if not model.moe:
        return 0.0
    a2a = coll("all_to_all", T * model.moe.top_k * c.h * BF16_BYTES, ep_group)
    return 2 * a2a * passes * (1 - params.ep_overlap)
