"""MoE and attention terms of the activation memory: per-module recompute and DualPipe's copies.

**Per-module recompute** (Megatron-Core ``--recompute-granularity selective --recompute-modules``,
:data:`RECOMPUTE_MODULES`): a recomputed module keeps only its input and re-runs its forward in the
backward, so the activations it would save are dropped (bytes per token of one layer, 16-bit
activations, ``gemm_in`` = 1 byte for FP8 GEMM inputs):

* ``layernorm``: the two norm outputs that feed the QKV and FC1 GEMMs, ``2 gemm_in h``;
* ``mla_up_proj``: MLA keeps the compressed query and KV latents instead of the up-projected Q, K, V:
  ``2 (qk + kv_pair) - 2 (q_lora + latent)``;
* ``core_attn``: the attention scores (as ``selective`` recompute);
* ``moe_act``: the SwiGLU output of the routed experts (the FC2 input), ``gemm_in top_k f_e``;
* ``moe``: the whole routed-expert block (keeps the dispatched tokens only): FC1 outputs and FC2 inputs
  ``(2 gate + gemm_in) top_k f_e``;
* ``shared_experts``: the shared experts' FC1 outputs and FC2 input.

The saving of each module is subtracted from :func:`clustertwin.train.memory.activation_bytes_per_layer`
(which stores the dispatched routed copies as FP8 GEMM inputs in FP8 training, as Transformer Engine and
DeepSeek-V3 do). Split terms divide by TP.

**DualPipe** (DeepSeek-AI 2024, Table 2): each rank holds two pipeline stages (one per direction), the
pair ``r`` and ``p - 1 - r`` (:mod:`clustertwin.train.memory_deepseek`), and ``pp + 1`` micro-batches of
activations in flight instead of ``pp``.
"""

from __future__ import annotations

from clustertwin.specs.model import ModelSpec
from clustertwin.train.layout import MOE_OVERLAP_CODES, RECOMPUTE_MODULE_BITS, where

#: recompute module -> bit of ``Layouts.rc_modules``
RECOMPUTE_MODULES: dict[str, int] = RECOMPUTE_MODULE_BITS
ACT_BYTES = 2


def modules_code(names) -> int:
    """Bitmask of recompute module names (unknown names are rejected by the spec)."""
    code = 0
    for n in names or ():
        code |= RECOMPUTE_MODULES[n]
    return code


def _has(code, name: str):
    return (code & RECOMPUTE_MODULES[name]) > 0


def module_savings(model: ModelSpec, code, gemm_in: float, moe_layer: bool, qk: int, kv_pair: int, latent: int,
                   fc1_bytes: float = ACT_BYTES, fc2_in: float | None = None):
    """(replicated, TP-split) bytes per token of one layer that ``code``'s recompute modules drop
    (module docstring); the score term is handled by the caller (``core_attn``). ``fc1_bytes`` and
    ``fc2_in``: bytes per value the MoE layer keeps of its FC1 outputs and FC2 input (16-bit and
    ``gemm_in``; DeepSeek-V3's FP8 SwiGLU cache keeps 1 and 0, :mod:`clustertwin.train.memory_deepseek`)."""
    fc2 = gemm_in if fc2_in is None else fc2_in
    h = model.hidden
    repl = where(_has(code, "layernorm"), 2.0 * gemm_in * h, 0.0)
    split = 0.0
    if latent:
        keep = (model.mla_q_lora_rank or 0) + latent
        split = split + where(_has(code, "mla_up_proj"), ACT_BYTES * (qk + kv_pair) - ACT_BYTES * keep, 0.0)
    if moe_layer and model.moe:
        me = model.moe
        gate = 2 if model.ffn == "swiglu" else 1
        routed = me.top_k * me.expert_ffn_hidden
        act = fc2 * routed
        whole = (fc1_bytes * gate + fc2) * routed
        split = split + where(_has(code, "moe"), whole, where(_has(code, "moe_act"), act, 0.0))
        shared = me.shared_experts * me.expert_ffn_hidden
        split = split + where(_has(code, "shared_experts"), (fc1_bytes * gate + fc2) * shared, 0.0)
    return repl, split


def dualpipe(lay):
    """True where the layout runs DualPipe (an explicit ``moe_overlap: dualpipe``)."""
    return lay.moe_overlap == MOE_OVERLAP_CODES["dualpipe"]


def dualpipe_state_factor(lay):
    """Weights and gradients held per rank relative to 1F1B: 2 under DualPipe."""
    return where(dualpipe(lay), 2.0, 1.0)


def dualpipe_inflight(lay, inflight):
    """Micro-batches of activations in flight on the first stage: ``pp + 1`` under DualPipe."""
    return where(dualpipe(lay), lay.pp + 1.0, inflight)


def full_recompute_fraction(lay, layers: int):
    """Share of a chunk's layers that full recompute re-runs: ``recompute_num_layers`` / (L / (pp v))
    (Megatron's block method), 1 when it is not given, 0 without full recompute."""
    from clustertwin.train.layout import RECOMPUTE_CODES, as_float, fmin

    full = lay.recompute == RECOMPUTE_CODES["full"]
    per_chunk = layers / (as_float(lay.pp) * as_float(lay.vpp))
    frac = where(lay.rc_layers > 0, fmin(lay.rc_layers / per_chunk, 1.0), 1.0)
    return where(full, frac, 0.0)
