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
    """Layers that are MoE (the rest are dense with ffn_hidden); default all. DeepSeek-V3: 58 of 61
    (the first 3 dense, ``first_k_dense_replace``); Llama 4 Maverick: 24 of 48 (every other layer)."""
    node_groups: PositiveInt | None = None
    """Node-limited routing: a token is sent to experts on at most this many nodes (DeepSeek-V3: 4,
    ``topk_group``); None: unlimited."""
    capacity_factor: float | None = None
    """Expert capacity as a multiple of the balanced load (tokens beyond it are dropped); None: dropless."""
    router_groups: PositiveInt | None = None
    """Expert groups of group-limited routing: the router picks ``node_groups`` of these groups per token,
    then its ``top_k`` experts inside them (DeepSeek-V3: 8, ``n_group``; Megatron
    ``--moe-router-num-groups``, one group per node of the EP group). None: no grouping in the router."""

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} exceeds experts={self.experts}")
        if self.router_groups is not None:
            if self.experts % self.router_groups:
                raise ValueError(f"router_groups={self.router_groups} does not divide experts={self.experts}")
            if self.node_groups is None or self.node_groups > self.router_groups:
                raise ValueError(f"router_groups={self.router_groups} needs node_groups (groups picked per token) "
                                 f"between 1 and {self.router_groups}")
        if self.capacity_factor is not None and self.capacity_factor < 1.0:
            raise ValueError(f"capacity_factor={self.capacity_factor} is below 1 (the balanced load)")
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
    gate_activation: Literal["silu", "quick_gelu"] = "silu"
    """Activation of a gated (``swiglu``) FFN's gate: ``silu`` (SwiGLU proper) or ``quick_gelu``
    (x sigmoid(1.702 x), GPT-OSS's clamped GLU). The cost is the same; only a FLOP convention that counts the
    third matrix for SwiGLU alone (Megatron's ``--swiglu`` flag) reads it."""
    attention_window: PositiveInt | None = None
    """Sliding attention window (tokens), if the model uses one."""
    tied_embeddings: bool = False
    """Input embedding and output projection share weights."""
    mla_kv_lora_rank: PositiveInt | None = None
    """Multi-head latent attention compressed KV width (DeepSeek-V2/V3), for KV-cache size."""
    mla_rope_dim: PositiveInt | None = None
    """Decoupled RoPE key width of MLA."""
    mla_q_lora_rank: PositiveInt | None = None
    """MLA query compression rank (DeepSeek-V3: 1536): the query projection is h x q_lora then
    q_lora x heads (head_dim + rope); None: one h x heads (head_dim + rope) projection (DeepSeek-V2-Lite)."""
    full_attention_every: PositiveInt | None = None
    """With ``attention_window``: every n-th layer attends over the full sequence, the others over the
    window (GPT-OSS: 2, alternating sliding/full; Llama 4: 4, chunked local attention with a global layer
    every fourth, iRoPE). None: every layer uses ``attention_window``."""
    attention_sinks: bool = False
    """A learned sink logit per head added to the softmax denominator (GPT-OSS): ``heads`` parameters
    per layer, no GEMM work."""
    mtp_layers: NonNegInt = 0
    """Multi-token-prediction modules (DeepSeek-V3: 1): each an h x 2h projection, one transformer layer
    (of the MoE kind when the model is MoE) and the shared output head, trained every step."""
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
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} is not divisible by heads={self.heads}; give head_dim "
                             "(the per-head width) when it is not hidden / heads")
        if self.moe and self.moe.moe_layers and self.moe.moe_layers > self.layers:
            raise ValueError(f"moe.moe_layers={self.moe.moe_layers} exceeds layers={self.layers}")
        if self.full_attention_every and not self.attention_window:
            raise ValueError("full_attention_every needs attention_window (the window of the other layers)")
        if self.mla_q_lora_rank and not self.mla_kv_lora_rank:
            raise ValueError("mla_q_lora_rank needs mla_kv_lora_rank (multi-head latent attention)")
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
