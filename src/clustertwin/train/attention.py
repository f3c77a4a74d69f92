"""The attention core of one layer (scores and their softmax, not the projections) and the context-
parallel KV exchange around it.

* flash attention (Transformer-Engine stack, rate x :func:`head_dim_factor`): ``2 T span_c (qk + v) / t`` FLOPs (``span_c`` the keys the
  causal mask leaves, :func:`~clustertwin.train.spans.causal_span`: s/2, or the window w of a
  sliding-window layer) at
  ``attention_efficiency`` of the 16-bit peak (at most the peak itself), backward ``FLASH_BWD_FACTOR`` x
  forward (Dao 2023);
* unfused attention (Megatron-LM / Megatron-DeepSpeed): batched GEMMs of depth head_dim and span plus
  ``UNFUSED_SCORE_BYTES_FWD`` / ``_BWD`` bytes of memory traffic per score;
* CP (ring attention): all-gather of K and V in the forward, K, V and their gradients in the backward
  (3 passes, + 1 with full recompute), hidden behind the attention core up to ``cp_overlap``:
  ``exposed = max((1 - cp_overlap) x t_cp, t_cp - attention time)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.train.gemm import BF16_BYTES, Gemm
from clustertwin.train.hardware import Hardware
from clustertwin.train.layer import ModelShape
from clustertwin.train.layout import Layouts, as_float, fmax
from clustertwin.train.params import TrainParams

#: flash-attention backward runs 5 GEMMs per block against 2 in the forward (Dao 2023)
FLASH_BWD_FACTOR = 2.5
#: unfused attention: bytes per score element moved by scale-mask-softmax, dropout and the
#: batched GEMMs' score reads/writes (forward: write 2, softmax 2+2, dropout 2+2+1 mask, bmm read 2;
#: backward: the same chain in reverse plus the dS write and reads by two GEMMs)
UNFUSED_SCORE_BYTES_FWD = 13
UNFUSED_SCORE_BYTES_BWD = 17
KERNELS_UNFUSED_ATTENTION = 5
KERNELS_FLASH_ATTENTION = 1


#: head width at which ``attention_efficiency`` is stated (Llama, GPT-3, Qwen3, DeepSeek-V3 values)
REFERENCE_HEAD_DIM = 128


def head_dim_factor(c: ModelShape, params: TrainParams) -> float:
    """Flash-attention efficiency at the model's head width relative to head_dim 128: the score GEMMs
    have depth head_dim, so with the GEMM depth roll-off ``d / (d + gemm_k_half)`` head_dim 64
    (GPT-OSS) runs at 0.65 of the head_dim-128 rate (FlashAttention-2 reports ~0.7, Dao 2023 Fig. 5)."""
    d = c.qk / c.heads
    kh = params.gemm_k_half
    return (d / (d + kh)) / (REFERENCE_HEAD_DIM / (REFERENCE_HEAD_DIM + kh))


def attention_efficiency(hw: Hardware, params: TrainParams) -> float:
    """Fraction of the 16-bit peak of the stack's fused attention kernels at head_dim 128:
    ``attention_efficiency`` for FlashAttention-2 class kernels, x ``attention_fa3_ratio`` for
    FlashAttention-3 / cuDNN-9 class kernels (``Hardware.attention_gen`` 3)."""
    return params.attention_efficiency * (params.attention_fa3_ratio if hw.attention_gen >= 3 else 1.0)


@dataclass
class AttentionCore:
    """Seconds of the attention core of one layer and micro-batch, and its forward kernels."""

    fwd_s: object
    bwd_s: object
    kernels: int


def attention_core(c: ModelShape, s: int, lay: Layouts, T, hw: Hardware, g: Gemm, params: TrainParams,
                   bw: float) -> AttentionCore:
    """Flash or unfused attention core (see the module docstring)."""
    t = as_float(lay.tp)
    if hw.flash:
        flops = 2.0 * T * c.core_span * (c.qk + c.v) / t
        # capped at the peak: a wide head (d > 128) lifts the rate, never past the tensor cores' peak
        rate = hw.peak16_flops * min(1.0, attention_efficiency(hw, params) * head_dim_factor(c, params))
        return AttentionCore(flops / rate + params.kernel_latency_s,
                             FLASH_BWD_FACTOR * flops / rate + params.kernel_latency_s, KERNELS_FLASH_ATTENTION)
    dq, dv = c.qk / c.heads, c.v / c.heads
    batch = lay.mbs * (c.heads / t)
    sq = s / lay.cp
    span = c.span
    # forward QK^T (depth dq) and PV (depth span); backward dP = dO V^T, dV = P^T dO, dQ, dK
    fwd = g.time(sq, span, dq, batch, True) + g.time(sq, dv, span, batch, True)
    bwd = g.time(sq, span, dv, batch, True) + g.time(span, dv, sq, batch, True) + \
        g.time(sq, dq, span, batch, True) + g.time(span, dq, sq, batch, True)
    scores = batch * sq * span
    return AttentionCore(fwd + scores * UNFUSED_SCORE_BYTES_FWD / bw, bwd + scores * UNFUSED_SCORE_BYTES_BWD / bw,
                         KERNELS_UNFUSED_ATTENTION)


def cp_exposed(c: ModelShape, s: int, lay: Layouts, core: AttentionCore, full_f, coll, cp_group,
               params: TrainParams):
    """Exposed ring-attention KV exchange of one layer and micro-batch."""
    kv_bytes = lay.mbs * s * c.kv_pair / as_float(lay.tp) * BF16_BYTES
    t_cp = coll("all_gather", kv_bytes, cp_group) * (3.0 + full_f)
    attn_total = core.fwd_s * (2.0 + full_f) + core.bwd_s
    return fmax((1 - params.cp_overlap) * t_cp, t_cp - attn_total)
