"""Parameter counts and FLOPs of decoder-only transformers (dense, GQA, SwiGLU, MoE).

Conventions (docs/train.md has the derivation):

* **Model FLOPs** follow Megatron-Core ``num_floating_point_operations`` (2024):
  per token ``6 x (active GEMM weights incl. the logits layer) + 12 x s x q`` per layer for the
  attention core (QK^T and AV, forward + 2x backward), i.e. for a batch B of sequences of length s

      12 B s L h^2 [ (1 + g/n + s/h)(q/h) + (f/h) k (1.5 if SwiGLU) + V/(2 L h) ]

  with g KV heads, n query heads, q = n x head_dim, f the FFN width, k the experts a token visits
  (multi-head latent attention: the attention core uses the query/key width n x (head_dim + rope) for
  QK^T and n x head_dim for AV, see :func:`attention_widths`).
  For GPT (g = n, q = h, f = 4h) this is Korthikanti et al.'s ``72 B s L h^2 (1 + s/6h + V/12Lh)``.
  The attention core is **not** discounted for the causal mask (Megatron-Core 2024, Korthikanti 2022,
  Narayanan 2021, NeMo 24.07-25.04); Megatron-Bridge (NeMo 25.11+) counts the causally covered span
  (``causal=True``, :func:`~clustertwin.train.spans.causal_span`: s/2 on full layers, the window on sliding-window layers; e.g.
  Llama-3-8B at s = 8192: 57.9 vs 51.5 GFLOP/token, the latter reproducing 744 TFLOP/s at 14,451
  tokens/s/GPU). Megatron-Bridge's containers 25.11-26.04 count it without the window term (s/2 on every
  layer, ``windows=False``) and count a gated FFN's third matrix only for SwiGLU proper (``gate_any=False``:
  Megatron's ``--swiglu`` flag; GPT-OSS's quick-GELU gate counts two matrices): GPT-OSS-120B at s = 4,096
  is 27.15 GFLOP/token that way, which every published 25.11-26.04 row reproduces (27.15-27.21; 30.80 at
  s = 8,192), against 32.63 with windows and gating, which the 26.08 rows reproduce (32.58). Which
  convention a run reports is a property of its software stack
  (:attr:`clustertwin.train.stack.Stack.causal_flops`, ``flops_windows``, ``flops_gate_any``).
  Multi-token-prediction modules add their projection, layer and output head (DeepSeek-V3: 1 module).
  The MoE router GEMM is omitted, as in Megatron.
* **Hardware FLOPs** add recomputation: full recompute repeats the forward pass of every layer
  (Narayanan et al. 2021 eq. 3: ``96 B s L h^2 (1 + s/6h + V/16Lh)`` for GPT); selective recompute
  repeats only the attention core (``4 B s^2 q`` per layer).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from clustertwin.specs.model import ModelSpec
from clustertwin.train.spans import counted_span

T = TypeVar("T")

def cached(fn: Callable[..., T]) -> Callable[..., T]:
    """``functools.cache`` for functions of specs; a spec that cannot be hashed (a list-valued field
    such as several ``source`` entries) is computed without the cache."""
    memo = functools.cache(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return memo(*args, **kwargs)
        except TypeError as e:
            if "unhashable" not in str(e):
                raise
            return fn(*args, **kwargs)

    return wrapper


#: FLOPs per multiply-accumulate
FLOPS_PER_MAC = 2
#: forward + backward (data grad + weight grad) = 3 forward passes of GEMM work
FWD_BWD_PASSES = 3


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by part (biases omitted; norm weights included)."""

    embedding: int
    """Input embedding V x h."""
    output: int
    """Output projection V x h (0 when tied to the embedding)."""
    attention_per_layer: int
    """QKV + output projection: h (q + 2 kv) + q h."""
    dense_ffn_per_layer: int
    """Dense FFN: (3 if SwiGLU else 2) x h x f."""
    expert: int
    """One routed expert's FFN (0 for dense models)."""
    shared_experts_per_layer: int
    """Always-active shared experts of one MoE layer."""
    router_per_layer: int
    """MoE router h x E."""
    norms_per_layer: int
    """Two RMS/LayerNorm weight vectors (2h)."""
    total: int
    """All parameters."""
    active: int
    """Parameters a token touches (routed experts counted top_k times)."""
    layers: int
    """Transformer layers."""
    moe_layers: int
    """MoE layers (the others are dense)."""
    total_experts: int = 0
    """Routed experts per MoE layer."""

    @property
    def dense_layer(self) -> int:
        """Parameters of one dense transformer layer."""
        return self.attention_per_layer + self.dense_ffn_per_layer + self.norms_per_layer

    @property
    def experts_per_layer(self) -> int:
        """Routed expert parameters of one MoE layer."""
        return 0 if not self.moe_layers else self.total_experts * self.expert

    @property
    def moe_layer_non_expert(self) -> int:
        """Parameters of an MoE layer outside the routed experts (attention, shared experts, router, norms)."""
        return self.attention_per_layer + self.shared_experts_per_layer + self.router_per_layer + \
            self.norms_per_layer


@dataclass(frozen=True)
class AttentionWidths:
    """Widths (summed over heads) of the attention tensors of one layer."""

    qk: int
    """Query (= key) width of the score product: heads x head_dim (MLA: heads x (head_dim + rope))."""
    v: int
    """Value / attention-output width: heads x head_dim."""
    kv_pair: int
    """Key + value width saved and exchanged per token: 2 x kv_heads x head_dim (MLA: qk + v)."""
    latent: int
    """MLA compressed KV width (kv_lora_rank + rope); 0 without MLA."""


def attention_widths(model: ModelSpec) -> AttentionWidths:
    """Attention widths of GQA/MHA/MQA, or of multi-head latent attention (DeepSeek-V2/V3) when the model
    sets ``mla_kv_lora_rank``: queries and keys of head_dim + rope width, values of head_dim."""
    a, d = model.heads, model.d_head
    if model.mla_kv_lora_rank:
        r = model.mla_rope_dim or 0
        return AttentionWidths(qk=a * (d + r), v=a * d, kv_pair=a * (d + r) + a * d,
                               latent=model.mla_kv_lora_rank + r)
    return AttentionWidths(qk=a * d, v=a * d, kv_pair=2 * model.n_kv_heads * d, latent=0)


def attention_params(model: ModelSpec) -> int:
    """Attention weights of one layer: GQA ``h (q + 2 kv) + q h`` (+ ``heads`` sink logits with attention
    sinks); MLA ``Q + h latent + kv_lora (qk - heads x rope + v) + v h`` with the query projection
    ``Q = h qk``, or with query compression (``mla_q_lora_rank`` r_q) ``Q = h r_q + r_q qk`` (DeepSeek-V3:
    7168 x 1536 + 1536 x 128 x 192; DeepSeek-AI 2024, section 2.1.1)."""
    h, w = model.hidden, attention_widths(model)
    if w.latent:
        nope = w.qk - model.heads * (model.mla_rope_dim or 0)
        rq = model.mla_q_lora_rank
        q_proj = h * rq + rq * w.qk if rq else h * w.qk
        return q_proj + h * w.latent + (model.mla_kv_lora_rank or 0) * (nope + w.v) + w.v * h
    q = model.heads * model.d_head
    return h * (q + w.kv_pair) + q * h + (model.heads if model.attention_sinks else 0)


def ffn_matrices(model: ModelSpec) -> int:
    """Weight matrices of one FFN: 3 for SwiGLU (gate, up, down), 2 otherwise."""
    return 3 if model.ffn == "swiglu" else 2


@cached
def param_counts(model: ModelSpec) -> ParamCounts:
    """Parameter count by part. ``total`` is what the model card states (biases aside)."""
    h = model.hidden
    nm = ffn_matrices(model)
    attn = attention_params(model)
    dense_ffn = nm * h * model.d_ffn
    norms = 2 * h
    emb = model.vocab * h
    out = 0 if model.tied_embeddings else model.vocab * h
    n_moe = model.n_moe_layers
    n_dense = model.layers - n_moe
    if model.moe:
        expert = nm * h * model.moe.expert_ffn_hidden
        shared = model.moe.shared_experts * expert
        router = h * model.moe.experts
        moe_total = attn + norms + shared + router + model.moe.experts * expert
        moe_active = attn + norms + shared + router + model.moe.top_k * expert
        n_exp = model.moe.experts
    else:
        expert = shared = router = moe_total = moe_active = n_exp = 0
    dense_layer = attn + dense_ffn + norms
    total = emb + out + h + n_dense * dense_layer + n_moe * moe_total
    active = emb + out + h + n_dense * dense_layer + n_moe * moe_active
    return ParamCounts(embedding=emb, output=out, attention_per_layer=attn, dense_ffn_per_layer=dense_ffn,
                       expert=expert, shared_experts_per_layer=shared, router_per_layer=router,
                       norms_per_layer=norms, total=total, active=active, layers=model.layers,
                       moe_layers=n_moe, total_experts=n_exp)


def param_count(model: ModelSpec) -> int:
    """Total parameters (Ψ), e.g. 405.9e9 for Llama-3-405B."""
    return param_counts(model).total


@dataclass(frozen=True)
class FlopsPerToken:
    """Training FLOPs per token (forward + backward) by part."""

    gemm: float
    """Weight GEMMs of the transformer layers: 6 x active layer weights."""
    attention_core: float
    """QK^T and AV: 12 x span x q per layer (``causal``: the causally covered span,
    :func:`causal_span`)."""
    logits: float
    """Output layer: 6 x V x h (x (1 + MTP modules))."""
    recompute: float
    """Extra forward work from activation recomputation (hardware FLOPs only)."""

    @property
    def model(self) -> float:
        """Model FLOPs per token (no recomputation)."""
        return self.gemm + self.attention_core + self.logits

    @property
    def hardware(self) -> float:
        """Hardware FLOPs per token (with recomputation)."""
        return self.model + self.recompute


def _uncounted_gate(model: ModelSpec, pc: ParamCounts, gate_any: bool) -> tuple[int, int]:
    """(weights of a dense layer, of an MoE layer's active FFNs) a convention that counts the gate
    matrix for SwiGLU alone leaves out of a model whose gate is not SiLU: one matrix in three."""
    if gate_any or model.ffn != "swiglu" or model.gate_activation == "silu":
        return 0, 0
    moe_ffn = (model.moe.top_k * pc.expert if model.moe else 0) + pc.shared_experts_per_layer
    return pc.dense_ffn_per_layer // 3, moe_ffn // 3


@cached
def flops_per_token(model: ModelSpec, seq_len: int | None = None, recompute: str = "none",
                    causal: bool = False, windows: bool = True, gate_any: bool = True) -> FlopsPerToken:
    """Training FLOPs per token in the Megatron-Core convention (module docstring).

    ``recompute``: ``none``, ``selective`` (attention core re-run: + 4 s q per layer) or ``full``
    (every layer's forward re-run: + 2 x layer weights + 4 s q per layer). ``causal``, ``windows``,
    ``gate_any``: the reporting stack's convention (:func:`~clustertwin.train.spans.counted_span`, :func:`_uncounted_gate`)."""
    s = seq_len or model.seq_len
    pc = param_counts(model)
    span = counted_span(model, s, causal, windows)
    w = attention_widths(model)
    n_dense = model.layers - pc.moe_layers
    gate_dense, gate_moe = _uncounted_gate(model, pc, gate_any)
    moe_active = pc.attention_per_layer + pc.shared_experts_per_layer + pc.norms_per_layer + \
        (model.moe.top_k * pc.expert if model.moe else 0) - gate_moe
    layer_active = n_dense * (pc.dense_layer - gate_dense) + pc.moe_layers * moe_active
    # norms are not GEMM weights
    layer_gemm_weights = layer_active - model.layers * pc.norms_per_layer
    # multi-token prediction: per module a 2h -> h projection and one layer (MoE kind if the model is)
    mtp = model.mtp_layers
    mtp_weights = mtp * (2 * model.hidden * model.hidden + (moe_active if model.moe else pc.dense_layer - gate_dense)
                         - pc.norms_per_layer)
    macs = FLOPS_PER_MAC * FWD_BWD_PASSES
    gemm = macs * (layer_gemm_weights + mtp_weights)
    # QK^T + AV forward: span x (qk + v) MACs per token (4 span q flops for MHA/GQA)
    attn_fwd = FLOPS_PER_MAC * span * (w.qk + w.v) * (model.layers + mtp)
    attn = FWD_BWD_PASSES * attn_fwd
    logits = macs * model.vocab * model.hidden * (1 + mtp)
    if recompute == "full":
        extra = FLOPS_PER_MAC * (layer_gemm_weights + mtp_weights) + attn_fwd
    elif recompute == "selective":
        extra = attn_fwd
    else:
        extra = 0.0
    return FlopsPerToken(gemm=float(gemm), attention_core=float(attn), logits=float(logits),
                         recompute=float(extra))


def model_flops_per_step(model: ModelSpec, global_batch: int, seq_len: int | None = None,
                         causal: bool = False) -> float:
    """Model FLOPs of one optimizer step over ``global_batch`` sequences."""
    s = seq_len or model.seq_len
    return flops_per_token(model, s, causal=causal).model * global_batch * s


def hardware_flops_per_step(model: ModelSpec, global_batch: int, seq_len: int | None = None,
                            recompute: str = "none", causal: bool = False) -> float:
    """Hardware FLOPs (with recomputation) of one optimizer step."""
    s = seq_len or model.seq_len
    return flops_per_token(model, s, recompute, causal).hardware * global_batch * s
