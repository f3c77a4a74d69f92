"""Compute of one transformer layer for one micro-batch on one GPU: GEMMs and element-wise kernels
(the attention core is :mod:`attention`, MoE experts :mod:`moe`).

* linear layers: forward, data-gradient and weight-gradient GEMMs (:class:`~clustertwin.train.gemm.Gemm`)
  of the QKV / output projections (multi-head latent attention: query, replicated KV down-projection, KV
  up-projection, output) and the dense FFN, split over TP;
* element-wise kernels (norms, bias-dropout-residual, activations, rotary/transposes, FP8 casts by the
  stack's FP8 recipe, MoE permutation) move bytes at ``hbm_efficiency`` x HBM bandwidth; backward moves twice the forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.specs.model import ModelSpec
from clustertwin.train import flops as F
from clustertwin.train import spans as S
from clustertwin.train.gemm import BF16_BYTES, FP8_BYTES, Gemm
from clustertwin.train.layout import Layouts, as_float, where

#: backward element-wise traffic relative to the forward (read input and output grad, write grad)
BWD_ELEMENTWISE_FACTOR = 2.0
#: element-wise bytes per token in the forward pass: two norms (read + write h), two
#: bias-dropout-residual kernels (read 2 tensors, write 1, mask), per unit of hidden width
NORM_BYTES_PER_H = 2 * 2 * BF16_BYTES
RESIDUAL_BYTES_PER_H = 2 * (3 * BF16_BYTES + 1)
#: QKV post-processing (bias, rotary, head transposes): read + write the q + 2kv projection
QKV_POST_BYTES = 2 * BF16_BYTES
#: FP8 cast of a GEMM input: read 16-bit, write 8-bit (+ the transposed copy for backward); the amax of
#: delayed scaling is fused into the cast
FP8_CAST_BYTES = BF16_BYTES + 2 * FP8_BYTES
#: FP8 recipe -> extra bytes per cast element: current (per-tensor dynamic) scaling reads the 16-bit input
#: once more for its amax before casting (Transformer Engine ``Float8CurrentScaling``, torchao's dynamic
#: tensorwise float8); MXFP8 quantises rows and columns in separate 32-element blocks, re-reading the
#: input for the columnwise copy
FP8_RECIPE_EXTRA_BYTES = {"delayed": 0, "current": BF16_BYTES, "mxfp8": BF16_BYTES}
#: kernels per transformer layer forward (Megatron GPT layer: norms, GEMMs, bias/rotary/transposes,
#: dropout-residual)
KERNELS_FWD_BASE = 14
KERNELS_FP8_CASTS = 6


@dataclass(frozen=True)
class ModelShape:
    """The widths of a model the layer cost reads (one object per model and sequence length)."""

    h: int
    """hidden width"""
    q: int
    """query width heads x head_dim"""
    qk: int
    """query/key width of the attention core (MLA: + rope)"""
    v: int
    """value width"""
    kv_pair: int
    """K + V projection width"""
    latent: int
    """MLA compressed KV width (+ rope); 0 without MLA"""
    mla_up: int
    """MLA KV up-projection output width (keys without rope + values)"""
    mla_rank: int
    """MLA KV compression rank"""
    f: int
    """dense FFN width"""
    gate: int
    """FFN input matrices: 2 for SwiGLU (gate + up), 1 otherwise"""
    span: float
    """keys each query attends to (sliding window aware, mean over the layers)"""
    core_span: float
    """keys a query's score blocks cover under the causal mask (:func:`spans.causal_span`)"""
    q_rank: int
    """MLA query compression rank; 0 without"""
    vocab: int
    heads: int
    moe_share: float
    """fraction of the layers that are MoE"""
    pc: F.ParamCounts


@F.cached
def model_shape(model: ModelSpec, seq_len: int) -> ModelShape:
    w = F.attention_widths(model)
    return ModelShape(h=model.hidden, q=model.heads * model.d_head, qk=w.qk, v=w.v, kv_pair=w.kv_pair,
                      latent=w.latent, mla_up=w.qk - model.heads * (model.mla_rope_dim or 0) + w.v,
                      mla_rank=model.mla_kv_lora_rank or 0, f=model.d_ffn, gate=2 if model.ffn == "swiglu" else 1,
                      span=S.attention_span(model, seq_len),
                      core_span=S.causal_span(model, seq_len), q_rank=model.mla_q_lora_rank or 0, vocab=model.vocab, heads=model.heads,
                      moe_share=model.n_moe_layers / model.layers, pc=F.param_counts(model))


@dataclass
class LayerCompute:
    """GPU seconds of one layer's GEMMs and element-wise kernels (attention core excluded)."""

    fwd_s: object
    bwd_s: object
    kernels: object
    """forward kernels"""


def projections(c: ModelShape, t) -> tuple[tuple[object, int], ...]:
    """(output width, input width) of the attention projections on one TP rank."""
    if c.latent:
        q_proj = ((c.q_rank, c.h), (c.qk / t, c.q_rank)) if c.q_rank else ((c.qk / t, c.h),)
        return (*q_proj, (c.latent, c.h), (c.mla_up / t, c.mla_rank), (c.h, c.v / t))
    return (((c.q + c.kv_pair) / t, c.h), (c.h, c.q / t))


def linear(g: Gemm, shapes, m, count=1.0) -> tuple[object, object]:
    """Forward and backward seconds of a sequence of linear layers ((out, in) shapes) on m tokens."""
    fwd: object = 0.0
    bwd: object = 0.0
    for n_out, k_in in shapes:
        a_f, a_b = g.fwd_bwd(m, n_out, k_in, count)
        fwd, bwd = fwd + a_f, bwd + a_b
    return fwd, bwd


def layer_compute(c: ModelShape, lay: Layouts, T, g: Gemm, bw: float, precision: str, ffn,
                  fp8_recipe: str = "delayed") -> LayerCompute:
    """Projections, FFN (``ffn`` = :class:`moe.FfnCost` of the layer kind) and element-wise kernels;
    ``fp8_recipe`` (the stack's) sets the FP8 casts' traffic (:data:`FP8_RECIPE_EXTRA_BYTES`)."""
    t = as_float(lay.tp)
    fwd, bwd = linear(g, projections(c, t), T)
    fwd, bwd = fwd + ffn.fwd_s, bwd + ffn.bwd_s
    t_sp = where(lay.sp > 0, T / t, T)
    ew = t_sp * (NORM_BYTES_PER_H + RESIDUAL_BYTES_PER_H) * c.h
    act_bytes = (2 * BF16_BYTES if c.gate == 1 else 3 * BF16_BYTES) * ffn.f_tok
    ew = ew + T * (act_bytes + QKV_POST_BYTES * (c.qk + c.kv_pair)) / t + ffn.extra_bytes
    kernels = KERNELS_FWD_BASE + ffn.kernels
    if precision == "fp8":
        cast = FP8_CAST_BYTES + FP8_RECIPE_EXTRA_BYTES[fp8_recipe]
        ew = ew + T * cast * (2 * c.h + (c.q + ffn.f_tok) / t)
        kernels = kernels + KERNELS_FP8_CASTS
    return LayerCompute(fwd_s=fwd + ew / bw, bwd_s=bwd + BWD_ELEMENTWISE_FACTOR * ew / bw, kernels=kernels)
