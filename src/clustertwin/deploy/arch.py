"""The architecture a training framework builds from a ModelSpec, resolved to explicit values, so the flags
of a generated job can be compared with the model the twin predicted for.

A ModelSpec leaves some choices to family defaults (``norm``, ``position_embedding``, ``linear_bias`` are
None unless given): a SwiGLU model follows the Llama conventions (RMSNorm, RoPE, no linear biases; Touvron
et al. 2023 section 2.2), any other follows GPT (LayerNorm, learned absolute positions, biases; Radford et
al. 2019, Brown et al. 2020). RoPE's base defaults to 10000 (Su et al. 2021, RoFormer).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.specs.model import ModelSpec, MoESpec

DEFAULT_ROPE_BASE = 10000.0
"""RoFormer's base theta, also Megatron-LM's ``--rotary-base`` default and Llama 2's."""


@dataclass(frozen=True)
class Architecture:
    """Every shape and architecture choice a framework must be told, with no defaults left open."""

    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    seq_len: int
    vocab: int
    ffn: str
    """swiglu, gelu or relu."""
    norm: str
    """rmsnorm or layernorm."""
    position_embedding: str
    """rope or learned."""
    rope_base: float | None
    """RoPE theta; None without RoPE."""
    linear_bias: bool
    tied_embeddings: bool
    moe: MoESpec | None
    mla_kv_lora_rank: int | None
    mla_rope_dim: int | None


def architecture(model: ModelSpec) -> Architecture:
    """``model`` with family defaults resolved (see the module docstring)."""
    llama = model.ffn == "swiglu"
    pos = model.position_embedding or ("rope" if llama else "learned")
    return Architecture(
        layers=model.layers, hidden=model.hidden, ffn_hidden=model.d_ffn, heads=model.heads,
        kv_heads=model.n_kv_heads, head_dim=model.d_head, seq_len=model.seq_len, vocab=model.vocab, ffn=model.ffn,
        norm=model.norm or ("rmsnorm" if llama else "layernorm"), position_embedding=pos,
        rope_base=(model.rope_base or DEFAULT_ROPE_BASE) if pos == "rope" else None,
        linear_bias=model.linear_bias if model.linear_bias is not None else not llama,
        tied_embeddings=model.tied_embeddings,
        moe=None if model.moe is None else model.moe.model_copy(update={"moe_layers": model.n_moe_layers}),
        mla_kv_lora_rank=model.mla_kv_lora_rank,
        mla_rope_dim=model.mla_rope_dim)


def model_spec(arch: Architecture, name: str | None = None) -> ModelSpec:
    """A ModelSpec with every field of ``arch`` explicit (``architecture(model_spec(a)) == a``)."""
    return ModelSpec(
        name=name, layers=arch.layers, hidden=arch.hidden, heads=arch.heads, kv_heads=arch.kv_heads,
        head_dim=arch.head_dim, ffn_hidden=arch.ffn_hidden, vocab=arch.vocab, seq_len=arch.seq_len,
        ffn=arch.ffn,  # type: ignore[arg-type]
        tied_embeddings=arch.tied_embeddings, moe=arch.moe, mla_kv_lora_rank=arch.mla_kv_lora_rank,
        mla_rope_dim=arch.mla_rope_dim, norm=arch.norm,  # type: ignore[arg-type]
        position_embedding=arch.position_embedding,  # type: ignore[arg-type]
        rope_base=arch.rope_base, linear_bias=arch.linear_bias)
