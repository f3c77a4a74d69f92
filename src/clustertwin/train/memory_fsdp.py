"""Memory terms of PyTorch-native training (torchtitan): FSDP2 states, op-level selective recompute, the loss.

These apply where the run's software stack (:mod:`clustertwin.train.stack`) says so; the Megatron terms of
:mod:`clustertwin.train.memory` apply otherwise.

**FSDP2 states** (``Stack.fsdp2_memory``; torch ``fully_shard`` with torchtitan's
``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``): the sharded parameter *is* the fp32
master copy, so a GPU holding Ψ parameters keeps fp32 parameters (4 B), fp32 gradients (4 B) and Adam's
two fp32 moments (8 B), all sharded over the FSDP group of N = dp x cp ranks (torchtitan's
``dp_shard_cp`` mesh): 16 Ψ / N, against Megatron's 18 B/param. The 16-bit copies are unsharded per
block while it runs. Without pipelining, torchtitan keeps the last block unsharded after the forward
(``reshard_after_forward = layer_id < n_layers - 1``, torchtitan ``parallelize_llama.apply_fsdp`` at
9dec370): 2 B x one block at the loss. With pipelining, torchtitan sets ``reshard_after_forward=False``
for every block ("to avoid per-microbatch all-gathers") and ``torch.distributed.pipelining``'s
``backward_maybe_with_nosync`` runs every backward but the last with ``set_reshard_after_backward(False)``
and ``set_requires_gradient_sync(False)``, so FSDP2 accumulates the unsharded gradients in the reduce
dtype (``FSDPParam.to_accumulated_grad_if_needed``: fp32) until the last micro-batch: the whole stage
stays resident as 16-bit parameters (``UNSHARDED_WEIGHT_BYTES``; 1 B with FP8 all-gather,
``Stack.fp8_param_gather``) plus fp32 accumulated gradients (``UNSHARDED_GRAD_BYTES``).

**Op-level selective activation checkpointing** (``Stack.selective_policy == "op"``; torchtitan's
``selective_ac_option = 'op'``, the default of its llama3 8B config): per block the outputs of the ops in
its save list stay, everything else is recomputed: every other ``aten.mm`` (the 1st, 3rd, 5th and 7th of
the block's seven: the query, value, FFN gate (w1) and FFN output (w2) projections), the flash-attention
output with its fp32 log-sum-exp, and the outputs of TP's reduce-scatters; plus the block input the
checkpoint keeps. The backward re-runs the other GEMMs (key, attention output, FFN w3) and every
element-wise op: :func:`op_sac_recompute_share` of the block's forward (0.37 for Llama 3 8B), where
Korthikanti's selective re-runs the attention core only. In 16-bit values per token: ``h_in + q/t + kv/t + o/t + f/t + h_w2`` (+ ``2 h/t`` of
reduce-scatter outputs with TP), where the w2 GEMM output is the full-width partial sum under TP and the
block input is sequence-sharded under SP; + 4 B x heads/t of log-sum-exp.

**Cross-entropy on full fp32 logits** (``Stack.cross_entropy``): torchtitan 2024 computes
``F.cross_entropy(pred.float(), labels)`` eagerly on the whole logits tensor (no fused or chunked loss; a
comment in its ``train.py`` at 9dec370 says compiling the loss crashed). Its peak, in the loss backward,
holds ``LOSS_PEAK_BYTES_PER_LOGIT["eager_fp32"]`` bytes per logit: without TP the saved fp32
log-probabilities, the fp32 gradient that ``nll_loss_backward`` writes and the fp32 gradient of
``log_softmax_backward`` (3 x 4 B); with TP's loss parallelism (``torch.distributed.tensor.parallel.
loss_parallel``, vocab-sharded logits) ``_nll_loss_and_log_softmax_backward`` holds the saved
log-probabilities, ``zeros_like(x)``, ``exp(x)`` and their sum before scaling (4 x 4 B). torchtitan compiles
the loss with the model from 2025-04 (commit bbb1b616, ``build_cross_entropy_loss``): Inductor fuses the
fp32 cast, log-softmax and NLL into reductions, leaving the saved 16-bit logits and their 16-bit gradient
(2 x 2 B, ``"compiled"``). ``torch.distributed.pipelining``'s last stage keeps every micro-batch's output
(the 16-bit logits) in ``output_chunks`` until the step ends (``Stack.pp_keeps_outputs``).

**Context parallelism by all-gather** (``Stack.cp_kv_allgather``): torchtitan's context parallelism
(``torch.distributed.tensor.experimental.context_parallel``, ``context_parallel_rotate_method =
"allgather"``, the default at 9dec370) all-gathers the K and V shards of all CP ranks for the attention of
the layer running, and torchtitan's Llama repeats the KV heads to the query heads before SDPA
(``repeat_kv``): ``2 x 2 B x s b x heads/t x d_head`` for the whole sequence (:func:`cp_allgather_bytes`).
"""

from __future__ import annotations

from clustertwin.specs.model import ModelSpec
from clustertwin.train.flops import attention_widths
from clustertwin.train.layout import as_float, where

#: FSDP2 sharded state bytes per parameter: fp32 parameter, fp32 gradient, Adam's two fp32 moments
FSDP2_PARAM_BYTES = 4
FSDP2_GRAD_BYTES = 4
FSDP2_ADAM_BYTES = 8
#: unsharded 16-bit compute copy of a parameter, and its fp32 accumulated gradient (reduce_dtype float32)
UNSHARDED_WEIGHT_BYTES = 2
UNSHARDED_GRAD_BYTES = 4
#: bytes per logit at the loss's peak by implementation: (without TP, with TP loss parallelism)
LOSS_PEAK_BYTES_PER_LOGIT = {"eager_fp32": (12, 16), "compiled": (4, 4)}
#: the 16-bit logits of one micro-batch kept by the pipelining last stage
KEPT_OUTPUT_BYTES = 2
#: values and fp32 log-sum-exp in the op-level policy
ACT_BYTES = 2
LSE_BYTES = 4


def fsdp2_states(dense, exp, dpg, edpg, pp, block_params, unsharded_weight_bytes=UNSHARDED_WEIGHT_BYTES):
    """FSDP2 (ZeRO-3) bytes of a stage holding ``dense`` + ``exp`` parameters per GPU: (weights, gradients,
    optimizer, unsharded), where weights and gradients include the resident unsharded buffers
    (``unsharded``): the whole stage under pipelining, else the last block's 16-bit copy."""
    shard = dense / dpg + exp / edpg
    staged = as_float(pp) > 1
    total = dense + exp
    uw = where(staged, unsharded_weight_bytes * total, UNSHARDED_WEIGHT_BYTES * block_params)
    ug = where(staged, UNSHARDED_GRAD_BYTES * total, 0.0)
    return FSDP2_PARAM_BYTES * shard + uw, FSDP2_GRAD_BYTES * shard + ug, FSDP2_ADAM_BYTES * shard, uw + ug


def op_sac_bytes_per_layer(model: ModelSpec, seq_len: int, mbs, tp, cp, sp, moe_layer: bool = False):
    """Saved bytes of one block and micro-batch under torchtitan's op-level selective recompute
    (module docstring; numpy-broadcast)."""
    h, a = model.hidden, model.heads
    w = attention_widths(model)
    t = as_float(tp)
    tokens = seq_len / as_float(cp) * as_float(mbs)
    if moe_layer and model.moe:
        f_tok = (model.moe.top_k + model.moe.shared_experts) * model.moe.expert_ffn_hidden
    else:
        f_tok = model.d_ffn
    tp_on = t > 1
    h_in = where(tp_on & (sp > 0), h / t, h)
    values = h_in + (w.qk + w.kv_pair / 2 + w.v + f_tok) / t + h + where(tp_on, 2 * h / t, 0.0)
    return tokens * (ACT_BYTES * values + LSE_BYTES * a / t)


def loss_peak_bytes(model: ModelSpec, tokens, tp, impl: str):
    """Bytes of the loss's peak on the stage with the output layer: ``tokens`` x V/t logits at
    :data:`LOSS_PEAK_BYTES_PER_LOGIT` plus the output layer's saved input and the final norm's fp32 input
    (``4 h / t`` bytes per token, as Megatron's theoretical memory counts them)."""
    plain, parallel = LOSS_PEAK_BYTES_PER_LOGIT[impl]
    t = as_float(tp)
    per_logit = where(t > 1, parallel, plain)
    return tokens * (per_logit * model.vocab + 4 * model.hidden) / t


def cp_allgather_bytes(model: ModelSpec, seq_len: int, mbs, tp, cp):
    """The all-gathered 16-bit K and V of the whole sequence (query heads, repeated) of one layer under
    all-gather context parallelism (module docstring); 0 without CP."""
    return where(as_float(cp) > 1, 2 * ACT_BYTES * seq_len * as_float(mbs) * model.heads * model.d_head
                 / as_float(tp), 0.0)


def op_sac_recompute_share(model: ModelSpec, moe_layer: bool = False) -> float:
    """Share of a block's forward GEMM FLOPs that torchtitan's op-level policy re-runs in the backward:
    the even-numbered ``aten.mm`` calls of the block, in order q, k, v, o, w1, w3, w2 (SwiGLU) or q, k, v,
    o, fc1, fc2 (GELU), i.e. k, o, w3 (or k, o, fc2)."""
    h, w = model.hidden, attention_widths(model)
    f = (model.moe.top_k + model.moe.shared_experts) * model.moe.expert_ffn_hidden \
        if moe_layer and model.moe else model.d_ffn
    ffn = [h * f, h * f, f * h] if model.ffn == "swiglu" else [h * f, f * h]
    mms = [h * w.qk, h * w.kv_pair / 2, h * w.kv_pair / 2, w.v * h, *ffn]
    return sum(mms[1::2]) / sum(mms)
