"""Activation bytes of one transformer layer and micro-batch, after Korthikanti et al. 2022 (Table 2;
16-bit tensors, 1-byte dropout masks; s sequence, b micro-batch, h hidden, a heads, t TP):

    no recompute, TP        s b h (10 + 24/t + 5 a s / (h t))
    no recompute, TP + SP   s b h (34 + 5 a s / h) / t
    selective,    TP        s b h (10 + 24/t)
    selective,    TP + SP   34 s b h / t
    full recompute          2 s b h        (the layer input; / t with SP)

generalised term by term to GQA (Q: 2 s b q, K and V: 2 s b kv each), SwiGLU (two FFN inputs of width f)
and MoE (top_k expert activations per token), to context parallelism (s -> s/cp) and to flash attention
(the 5 a s^2 b score term replaced by the 4-byte log-sum-exp per head and token), to dropout-free SwiGLU
models (no masks) and to FP8 training (the four GEMM inputs saved as 1-byte tensors). For GPT (MHA, 4h
GELU, dropout, 16-bit, unfused attention) the general form equals the table exactly.

DeepSeek-V3's FP8 caching of the MoE SwiGLU inputs (``swiglu_fp8``) is documented in
:mod:`clustertwin.train.memory_deepseek`.
"""

from __future__ import annotations

from clustertwin.specs.model import ModelSpec
from clustertwin.train.flops import attention_widths
from clustertwin.train.layout import RECOMPUTE_CODES, as_float, where
from clustertwin.train.memory_moe import RECOMPUTE_MODULES, module_savings

#: bytes per activation element (16-bit) and per dropout-mask element
ACT_BYTES = 2
MASK_BYTES = 1
#: bytes per element of an FP8 tensor
FP8_BYTES = 1
#: fp32 log-sum-exp saved per head and token by flash attention
LSE_BYTES = 4


def korthikanti_activation_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                                 recompute: str = "none") -> float:
    """Activation bytes per transformer layer, Korthikanti et al. 2022 Table 2, verbatim."""
    if recompute == "full":
        return 2.0 * s * b * h / (t if sp else 1)
    if recompute == "selective":
        return 34.0 * s * b * h / t if sp else s * b * h * (10.0 + 24.0 / t)
    if sp:
        return s * b * h * (34.0 + 5.0 * a * s / h) / t
    return s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t))


def activation_bytes_per_layer(model: ModelSpec, seq_len: int, mbs, tp, cp, sp, recompute, flash: bool,
                               moe_layer: bool = False, fp8: bool = False, modules=0,
                               act_bytes: int = ACT_BYTES, swiglu_fp8: bool = False):
    """Generalised Korthikanti activation bytes of one layer for one micro-batch (numpy-broadcast).

    ``recompute`` is the integer code of :data:`RECOMPUTE_CODES`. Dropout masks are stored for GELU/ReLU
    models (GPT, as in Korthikanti); SwiGLU models (Llama, Mixtral, DeepSeek, Qwen) train without
    dropout. ``fp8``: the inputs of the four GEMMs are saved in FP8 (Transformer Engine keeps the
    quantised copy for the weight gradient; the dispatched routed copies of an MoE layer, FC1's input, too).
    ``modules``: bitmask of per-module recompute (:mod:`clustertwin.train.memory_moe`). ``act_bytes``: bytes
    per stored value (4 for FP32/TF32). ``swiglu_fp8``: an MoE layer keeps its FC1 outputs in FP8 and
    recomputes the SwiGLU output (DeepSeek-V3, :mod:`clustertwin.train.memory_deepseek`)."""
    h, a = model.hidden, model.heads
    w = attention_widths(model)
    sl = seq_len / as_float(cp)  # local sequence
    sb = sl * as_float(mbs)
    t = as_float(tp)
    spf = sp > 0
    # replicated over TP unless SP: two norm inputs, QKV and FFN inputs, two dropout masks
    gemm_in = FP8_BYTES if fp8 else act_bytes
    masks = 0 if model.ffn == "swiglu" else 2 * MASK_BYTES
    repl = sb * h * (2 * act_bytes + gemm_in + gemm_in + masks)
    # split over TP: Q, K, V, projection input, FFN activation input(s) and output
    gate = 2 if model.ffn == "swiglu" else 1
    if moe_layer and model.moe:
        f_tok = model.moe.top_k * model.moe.expert_ffn_hidden + model.moe.shared_experts * \
            model.moe.expert_ffn_hidden
        dispatch = gemm_in * h * model.moe.top_k
    else:
        f_tok = model.d_ffn
        dispatch = 0
    # FC1 outputs (the activation function's inputs) and the FC2 input
    fc1_bytes, fc2_in = (FP8_BYTES, 0) if swiglu_fp8 and moe_layer and model.moe else (act_bytes, gemm_in)
    split = sb * (act_bytes * (w.qk + w.kv_pair) + gemm_in * w.v + fc1_bytes * gate * f_tok + fc2_in * f_tok
                  + dispatch)
    if flash:
        scores = sb * a * LSE_BYTES
    else:
        # softmax output (2), dropout mask (1), dropout output (2) per score: 5 a s^2 b
        scores = sb * a * seq_len * (2 * act_bytes + MASK_BYTES if masks else act_bytes)
    if modules is not None and (not isinstance(modules, int) or modules):
        r_save, s_save = module_savings(model, modules, gemm_in, moe_layer, w.qk, w.kv_pair, w.latent,
                                        fc1_bytes, fc2_in)
        repl, split = repl - sb * r_save, split - sb * s_save
        scores = where((modules & RECOMPUTE_MODULES["core_attn"]) > 0, 0.0, scores)
    rc = recompute
    scores = where(rc == RECOMPUTE_CODES["selective"], 0.0, scores)
    none_sel = where(spf, (repl + split + scores) / t, repl + (split + scores) / t)
    full = act_bytes * sb * h / where(spf, t, 1.0)
    return where(rc == RECOMPUTE_CODES["full"], full, none_sel)
