"""Per-token quantities of a decoder-only transformer for inference: parameters (total and active),
weight bytes under quantisation, FLOPs, and KV-cache bytes (MHA/GQA/MQA and MLA).

Formulas (standard, e.g. Kaplan et al. 2020, Megatron-LM, LLM-Viewer; MLA from the DeepSeek-V2/V3
reports):

- attention weights per layer: ``h·a·d_h`` (Q) + ``2·h·n_kv·d_h`` (K, V) + ``a·d_h·h`` (O); MLA:
  ``h·a·(d_h+r_rope)`` (Q) + ``h·(c_kv+r_rope)`` (KV down) + ``c_kv·a·2·d_h`` (K, V up) + ``a·d_h·h``;
- FFN per layer: ``3·h·f`` (SwiGLU) or ``2·h·f`` (GELU/ReLU); MoE layers hold ``E + shared`` experts
  of ``expert_ffn_hidden`` plus a router ``h·E``; a token visits ``top_k + shared`` of them;
- embeddings ``V·h`` (+ ``V·h`` output projection unless tied);
- forward FLOPs per token = ``2 ×`` active linear parameters (+ attention ``4·L·a·d_h·ctx``, causal);
- KV bytes per token = ``2·L·n_kv·d_h·b_kv`` (MHA/GQA/MQA) or ``L·(c_kv + r_rope)·b_kv`` (MLA).

Total parameter counts are the training layer's (:func:`clustertwin.train.flops.param_count`); the shape
here splits them into what each token touches (norm weights, which move no FLOPs, are left out).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.specs.model import ModelSpec

#: bytes per stored weight element by weight precision; INT4/FP4 add group-wise scales (one 16-bit
#: scale per 128 weights for AWQ/GPTQ, one 8-bit scale per 16 for NVFP4)
WEIGHT_BYTES: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
    "int4": 0.5 + 2.0 / 128, "fp4": 0.5 + 1.0 / 16,
}
#: bytes per KV-cache element by KV precision
KV_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
#: bytes per activation element exchanged by tensor parallelism (16-bit activations)
ACT_BYTES = 2.0


@dataclass(frozen=True)
class ModelShape:
    """Derived sizes of one model (parameters as counts, not bytes)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    params_total: float
    """All parameters incl. embeddings and every expert."""
    params_linear_total: float
    """Parameters of the layer GEMMs (attention + FFN/experts + router), all experts."""
    params_linear_dense: float
    """Layer-GEMM parameters outside the routed experts (read once per step whatever the batch)."""
    params_expert: float
    """Parameters of one routed expert in one MoE layer."""
    moe_layers: int
    experts: int
    top_k: int
    params_linear_active: float
    """Layer-GEMM parameters a token uses (routed experts: top_k of them)."""
    params_lm_head: float
    """Output projection ``V·h`` (runs once per generated token)."""
    params_embedding: float
    """Input embedding table ``V·h`` (gathered, not streamed)."""
    attn_flops_per_ctx_token: float
    """Attention FLOPs per (query token × context token) summed over layers: ``2·L·a·(d_qk + d_v)``."""
    kv_elems_per_token: float
    """KV-cache elements per token summed over layers."""
    mla: bool

    @property
    def params_active(self) -> float:
        """Parameters touched per token (linear active + output projection + embedding row)."""
        return self.params_linear_active + self.params_lm_head + self.params_embedding


def shape(model: ModelSpec) -> ModelShape:
    """Derive parameter counts, attention FLOPs and KV elements from a model spec (formulas above)."""
    h, L, a = model.hidden, model.layers, model.heads
    n_kv, d_h, f, V = model.n_kv_heads, model.d_head, model.d_ffn, model.vocab
    mla = model.mla_kv_lora_rank is not None
    if mla:
        c_kv = int(model.mla_kv_lora_rank or 0)
        r = int(model.mla_rope_dim or 0)
        rq = int(model.mla_q_lora_rank or 0)  # query compression (DeepSeek-V3: 1536)
        q_proj = h * rq + rq * a * (d_h + r) if rq else h * a * (d_h + r)
        attn = q_proj + h * (c_kv + r) + c_kv * a * 2 * d_h + a * d_h * h
        # absorbed MLA attention runs over the latent: QK over c_kv + r, AV over c_kv, per head
        attn_flops = 2.0 * L * a * ((c_kv + r) + c_kv)
        kv_elems = float(L * (c_kv + r))
    else:
        attn = h * a * d_h + 2 * h * n_kv * d_h + a * d_h * h
        attn_flops = 2.0 * L * a * (2 * d_h)
        kv_elems = float(2 * L * n_kv * d_h)
    ffn_mats = 3 if model.ffn == "swiglu" else 2
    dense_ffn = ffn_mats * h * f
    moe = model.moe
    n_moe = model.n_moe_layers
    if moe:
        expert = ffn_mats * h * moe.expert_ffn_hidden
        moe_dense = moe.shared_experts * expert + h * moe.experts  # shared experts + router
        linear_dense = L * attn + (L - n_moe) * dense_ffn + n_moe * moe_dense
        linear_total = linear_dense + n_moe * moe.experts * expert
        linear_active = linear_dense + n_moe * moe.top_k * expert
        experts, top_k = moe.experts, moe.top_k
    else:
        expert = 0
        linear_dense = linear_total = linear_active = float(L * (attn + dense_ffn))
        experts, top_k = 0, 0
    emb = float(V * h)
    head = 0.0 if model.tied_embeddings else float(V * h)
    total = linear_total + emb + head
    return ModelShape(
        layers=L, hidden=h, heads=a, kv_heads=n_kv, head_dim=d_h, vocab=V,
        params_total=float(total), params_linear_total=float(linear_total),
        params_linear_dense=float(linear_dense), params_expert=float(expert), moe_layers=n_moe,
        experts=experts, top_k=top_k, params_linear_active=float(linear_active),
        params_lm_head=float(V * h), params_embedding=emb, attn_flops_per_ctx_token=attn_flops,
        kv_elems_per_token=kv_elems, mla=mla,
    )


def weight_bytes_per_elem(precision: str) -> float:
    """Stored bytes per weight at a weight precision (incl. group scales for 4-bit formats)."""
    try:
        return WEIGHT_BYTES[precision]
    except KeyError:
        raise SpecError(f"unsupported weight precision '{precision}' (choose from {', '.join(WEIGHT_BYTES)})",
                        path=("precision",)) from None


def kv_bytes_per_elem(kv_precision: str) -> float:
    try:
        return KV_BYTES[kv_precision]
    except KeyError:
        raise SpecError(f"unsupported KV-cache precision '{kv_precision}' (choose from {', '.join(KV_BYTES)})",
                        path=("kv_precision",)) from None


def kv_bytes_per_token(model: ModelSpec, kv_precision: str = "bf16") -> float:
    """KV-cache bytes per token for the whole model: ``2·L·n_kv·d_h·b_kv`` (MHA/GQA/MQA) or
    ``L·(kv_lora_rank + rope_dim)·b_kv`` (MLA). Llama-2-7B FP16: 524,288 B; Llama-3-70B FP8: 163,840 B."""
    return shape(model).kv_elems_per_token * kv_bytes_per_elem(kv_precision)
