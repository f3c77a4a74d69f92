"""Transformer model specs (dense and mixture-of-experts)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from clustertwin.specs.base import NonNegInt, PositiveInt, Sourced, Spec


class MoESpec(Spec):
    """Mixture-of-experts feed-forward layers."""

    experts: PositiveInt
    """Routed experts per MoE layer."""
    top_k: PositiveInt
    """Routed experts each token visits."""
    expert_ffn_hidden: PositiveInt
    """Intermediate size of one expert's FFN."""
    shared_experts: NonNegInt = 0
    """Always-active shared experts (DeepSeek style), each of expert_ffn_hidden."""
    moe_layers: PositiveInt | None = None
    """Layers that are MoE (the rest are dense with ffn_hidden); default all. DeepSeek-V3: 58 of 61."""

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} exceeds experts={self.experts}")
        return self


class ModelSpec(Sourced):
    """A decoder-only transformer."""

    layers: PositiveInt
    """Transformer layers."""
    hidden: PositiveInt
    """Model (residual) width h."""
    heads: PositiveInt
    """Attention (query) heads a."""
    kv_heads: PositiveInt | None = None
    """Key/value heads (GQA; = heads for MHA, 1 for MQA); default heads."""
    head_dim: PositiveInt | None = None
    """Per-head width; default hidden / heads."""
    ffn_hidden: PositiveInt | None = None
    """Dense FFN intermediate size; default 4h (gelu) or 8h/3 rounded (swiglu)."""
    vocab: PositiveInt = 51200
    """Vocabulary size V."""
    seq_len: PositiveInt = 2048
    """Training sequence length s (default for workloads)."""
    ffn: Literal["gelu", "swiglu", "relu"] = "gelu"
    """FFN type: gelu/relu (2 matrices) or swiglu (3 matrices)."""
    attention_window: PositiveInt | None = None
    """Sliding attention window (tokens), if the model uses one."""
    tied_embeddings: bool = False
    """Input embedding and output projection share weights."""
    mla_kv_lora_rank: PositiveInt | None = None
    """Multi-head latent attention compressed KV width (DeepSeek-V2/V3), for KV-cache size."""
    mla_rope_dim: PositiveInt | None = None
    """Decoupled RoPE key width of MLA."""
    moe: MoESpec | None = None
    """MoE configuration; None for dense."""
    norm: Literal["rmsnorm", "layernorm"] | None = None
    """Normalisation layers; default rmsnorm for swiglu models (Llama family), layernorm otherwise (GPT)."""
    position_embedding: Literal["rope", "learned"] | None = None
    """Position encoding; default rope for swiglu models, learned absolute otherwise (GPT)."""
    rope_base: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """RoPE base (theta); default 10000 (Su et al. 2021), Llama 3: 500000."""
    linear_bias: bool | None = None
    """Biases in the attention and FFN linear layers; default off for swiglu models, on otherwise (GPT)."""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} is not divisible by kv_heads={self.kv_heads}")
        if self.moe and self.moe.moe_layers and self.moe.moe_layers > self.layers:
            raise ValueError(f"moe.moe_layers={self.moe.moe_layers} exceeds layers={self.layers}")
        return self

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def d_ffn(self) -> int:
        if self.ffn_hidden:
            return self.ffn_hidden
        if self.ffn == "swiglu":
            return round(8 * self.hidden / 3 / 256) * 256
        return 4 * self.hidden

    @property
    def n_moe_layers(self) -> int:
        if not self.moe:
            return 0
        return self.moe.moe_layers or self.layers
