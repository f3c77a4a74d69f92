"""Memory per GPU of a training layout: model states, activations, framework allowance.

**Model states** (Megatron mixed precision, Ψ parameters held by a GPU): 16-bit weights (2 B), fp32
main gradients (4 B), Adam fp32 master weights + first + second moment (12 B) = 18 B/param. ZeRO over
the data-parallel group of size N_d (dp x cp for dense weights, dp x cp / ep for experts) divides:
stage 1 (= Megatron distributed optimizer) the 12 B of optimizer state (6 + 12/N_d), stage 2 also the
gradients (2 + 16/N_d), stage 3 also the weights (18/N_d, plus two gathered layers in flight).
FP8 training keeps an extra 1-byte weight copy per parameter. FP32/TF32 training (no 16-bit copy) holds
fp32 weights (4 B, the master copy itself), fp32 gradients (4 B) and Adam's two moments (8 B) = 16 B/param,
and stores every activation value in 4 bytes (dropout masks stay 1 byte).

**Activations** per layer and micro-batch follow Korthikanti et al. 2022 (Table 2; 16-bit tensors,
1-byte dropout masks; s sequence, b micro-batch, h hidden, a heads, t TP):

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

The first pipeline stage holds ``min(p, m)`` micro-batches in flight under 1F1B (m = micro-batches per
step), times ``1 + (p - 1)/(p v)`` for the interleaved schedule with v chunks; full recompute adds one
layer's un-recomputed activations as working set. The stage that holds the output layer adds the
logits and loss buffers ``4 s b h (1 + V/h) / t`` (Megatron's theoretical memory). The framework
allowance adds ``memory_reserved_gib`` and ``memory_fragmentation`` x activations. PyTorch-native stacks
(torchtitan) swap in the FSDP2 states, op-level selective recompute, their loss's peak, all-gather CP
buffers, no FP8 copies and fragmentation of every per-step allocation (:mod:`clustertwin.train.memory_fsdp`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from clustertwin.specs.model import ModelSpec
from clustertwin.train import memory_fsdp as mf
from clustertwin.train.breakdown import MEMORY_TERMS, MemoryBreakdown
from clustertwin.train.flops import attention_widths, param_counts
from clustertwin.train.hardware import value_bytes
from clustertwin.train.layout import RECOMPUTE_CODES, Layouts, as_float, fmax, fmin, scalar, where
from clustertwin.train.memory_moe import (
    RECOMPUTE_MODULES,
    dualpipe_inflight,
    dualpipe_state_factor,
    full_recompute_fraction,
    module_savings,
)
from clustertwin.train.params import TrainParams
from clustertwin.train.pipeline import StagePlan, stage_plan
from clustertwin.train.placement import Groups, groups
from clustertwin.train.stack import Stack
from clustertwin.units import GIB

#: bytes per parameter of mixed-precision Adam state (Megatron)
WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPTIMIZER_BYTES = 12
#: extra 1-byte weight copy kept by FP8 training (Transformer Engine)
FP8_WEIGHT_COPY_BYTES = 1
#: bytes per parameter written to a checkpoint: 16-bit weights + fp32 master, m, v
CHECKPOINT_BYTES_PER_PARAM = WEIGHT_BYTES + OPTIMIZER_BYTES
#: bytes per activation element (16-bit) and per dropout-mask element
ACT_BYTES = 2
MASK_BYTES = 1
#: FP32/TF32 training: fp32 weights (the master copy) and Adam's first and second moment
FP32_WEIGHT_BYTES = 4
FP32_OPTIMIZER_BYTES = 8
#: bytes per element of an FP8 tensor
FP8_BYTES = 1
#: fp32 log-sum-exp saved per head and token by flash attention
LSE_BYTES = 4
#: ZeRO-3 keeps this many gathered layers in flight (current + prefetched)
ZERO3_GATHERED_LAYERS = 2

TERMS = MEMORY_TERMS


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
                               act_bytes: int = ACT_BYTES):
    """Generalised Korthikanti activation bytes of one layer for one micro-batch (numpy-broadcast).

    ``recompute`` is the integer code of :data:`RECOMPUTE_CODES`. Dropout masks are stored for GELU/ReLU
    models (GPT, as in Korthikanti); SwiGLU models (Llama, Mixtral, DeepSeek, Qwen) train without
    dropout. ``fp8``: the inputs of the four GEMMs are saved in FP8 (Transformer Engine keeps the
    quantised copy for the weight gradient; the dispatched routed copies of an MoE layer, FC1's input, too).
    ``modules``: bitmask of per-module recompute (:mod:`clustertwin.train.memory_moe`). ``act_bytes``: bytes
    per stored value (4 for FP32/TF32)."""
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
    split = sb * (act_bytes * (w.qk + w.kv_pair) + gemm_in * w.v + act_bytes * gate * f_tok + gemm_in * f_tok
                  + dispatch)
    if flash:
        scores = sb * a * LSE_BYTES
    else:
        # softmax output (2), dropout mask (1), dropout output (2) per score: 5 a s^2 b
        scores = sb * a * seq_len * (2 * act_bytes + MASK_BYTES if masks else act_bytes)
    if modules is not None and (not isinstance(modules, int) or modules):
        r_save, s_save = module_savings(model, modules, gemm_in, moe_layer, w.qk, w.kv_pair, w.latent)
        repl, split = repl - sb * r_save, split - sb * s_save
        scores = where((modules & RECOMPUTE_MODULES["core_attn"]) > 0, 0.0, scores)
    rc = recompute
    scores = where(rc == RECOMPUTE_CODES["selective"], 0.0, scores)
    none_sel = where(spf, (repl + split + scores) / t, repl + (split + scores) / t)
    full = act_bytes * sb * h / where(spf, t, 1.0)
    return where(rc == RECOMPUTE_CODES["full"], full, none_sel)


def stage_params(pc, plan: StagePlan, layers, tp, ep):
    """Dense (non-expert) and expert parameters of ``layers`` transformer layers on one GPU."""
    n_moe = layers * plan.moe_share
    return ((layers - n_moe) * pc.dense_layer + n_moe * pc.moe_layer_non_expert) / tp, \
        n_moe * pc.experts_per_layer / (ep * tp)


def memory_breakdown(model: ModelSpec, lay: Layouts, plan: StagePlan, grp: Groups, precision: str, flash: bool,
                     params: TrainParams, seq_len: int, stack: Stack | None = None) -> MemoryBreakdown:
    """Per-GPU bytes by term for each layout on the fullest of the stage plan's first, second and last
    stage (the first holds the embedding and the most micro-batches in flight, the second the busiest
    middle stage with one micro-batch fewer, the last the output layer and the logits). ``stack``: the
    software stack's memory features (None: Megatron's)."""
    s = seq_len
    pc = param_counts(model)
    tp, pp, ep = as_float(lay.tp), as_float(lay.pp), as_float(lay.ep)
    nonexp1, experts1 = stage_params(pc, plan, plan.first_layers, tp, ep)
    nonexp2, experts2 = stage_params(pc, plan, plan.last_layers, tp, ep)
    nonexp3, experts3 = stage_params(pc, plan, plan.middle_layers, tp, ep)
    first_dense = nonexp1 + pc.embedding / tp + where(pp == 1, pc.output / tp, 0.0)
    last_dense = nonexp2 + (pc.output or pc.embedding) / tp
    dpg, edpg = as_float(grp.dp.size), as_float(grp.edp.size)
    z = lay.zero
    vb = value_bytes(precision)
    wb, ob = (FP32_WEIGHT_BYTES, FP32_OPTIMIZER_BYTES) if vb == 4 else (WEIGHT_BYTES, OPTIMIZER_BYTES)
    fsdp2, op_sac = stack is not None and stack.fsdp2_memory, stack is not None and stack.selective_policy == "op"
    fp8 = precision == "fp8" and (stack is None or stack.fp8_copies)  # FP8 weight and activation copies
    layer_params = (pc.dense_layer if pc.moe_layers < pc.layers else pc.moe_layer_non_expert) / tp

    def states(dense, exp):
        def shard(n, group, stage):
            return n / where(z >= stage, group, 1.0)

        w = wb * (shard(dense, dpg, 3) + shard(exp, edpg, 3))
        if fp8:
            w = w + FP8_WEIGHT_COPY_BYTES * (dense + exp)
        w = w + where(z >= 3, ZERO3_GATHERED_LAYERS * wb * layer_params, 0.0)
        g = GRAD_BYTES * (shard(dense, dpg, 2) + shard(exp, edpg, 2))
        o = ob * (shard(dense, dpg, 1) + shard(exp, edpg, 1))
        unsharded = 0.0
        if fsdp2 and vb == 2:  # FSDP2 mixed precision (memory_fsdp)
            ag = FP8_BYTES if precision == "fp8" and stack.fp8_param_gather else WEIGHT_BYTES  # 16-bit or FP8 gather
            fw, fg, fo, fu = mf.fsdp2_states(dense, exp, dpg, edpg, pp, layer_params, ag)
            z3 = z >= 3
            w, g, o, unsharded = where(z3, fw, w), where(z3, fg, g), where(z3, fo, o), where(z3, fu, 0.0)
        two = dualpipe_state_factor(lay)  # DualPipe: two stages per rank (memory_moe)
        return w * two, g * two, o, unsharded

    w1, g1, o1, u1 = states(first_dense, experts1)
    w2, g2, o2, u2 = states(last_dense, experts2)
    w3, g3, o3, u3 = states(nonexp3, experts3)

    act_layer_dense = activation_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp, lay.sp, lay.recompute,
                                                 flash, fp8=fp8, modules=lay.rc_modules, act_bytes=vb)
    if pc.moe_layers:
        act_layer_moe = activation_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp, lay.sp, lay.recompute,
                                                   flash, moe_layer=True, fp8=fp8, modules=lay.rc_modules, act_bytes=vb)
    else:
        act_layer_moe = act_layer_dense
    if op_sac:  # torchtitan's op-level selective recompute (memory_fsdp)
        sel = lay.recompute == RECOMPUTE_CODES["selective"]
        act_layer_dense, act_layer_moe = (where(sel, mf.op_sac_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp,
                                                                                lay.sp, moe), a)
                                          for moe, a in ((False, act_layer_dense), (True, act_layer_moe)))
    act_layer = (1 - plan.moe_share) * act_layer_dense + plan.moe_share * act_layer_moe
    if np.any(np.asarray(lay.rc_layers) > 0):  # block recompute of some layers only (memory_moe)
        frac = full_recompute_fraction(lay, model.layers)
        kept = [activation_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp, lay.sp, RECOMPUTE_CODES["none"], flash,
                                           moe_layer=moe, fp8=fp8, modules=lay.rc_modules) for moe in (False, True)]
        act_kept = (1 - plan.moe_share) * kept[0] + plan.moe_share * kept[1]
        act_layer = where((lay.recompute == RECOMPUTE_CODES["full"]) & (lay.rc_layers > 0),
                          frac * act_layer + (1 - frac) * act_kept, act_layer)
    interleave = where(lay.vpp > 1, 1.0 + (pp - 1) / (pp * lay.vpp), 1.0)
    working = where(lay.recompute == RECOMPUTE_CODES["full"],
                    activation_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp, lay.sp,
                                               RECOMPUTE_CODES["none"], flash, fp8=fp8, act_bytes=vb), 0.0)
    if stack is not None and stack.cp_kv_allgather:  # the running layer's gathered K and V (memory_fsdp)
        working = working + mf.cp_allgather_bytes(model, s, lay.mbs, lay.tp, lay.cp)
    act1 = act_layer * plan.first_layers * dualpipe_inflight(lay, fmin(pp, plan.microbatches)) * interleave + working
    act2 = act_layer * plan.last_layers + working  # last stage: one micro-batch in flight
    act3 = act_layer * plan.middle_layers * fmin(pp - 1, plan.microbatches) * interleave + working
    sbl = s / as_float(lay.cp) * lay.mbs
    if stack is None or stack.cross_entropy == "megatron":
        logits = 2 * vb * sbl * model.hidden * (1.0 + model.vocab / model.hidden) / tp
    else:
        logits = mf.loss_peak_bytes(model, sbl, lay.tp, stack.cross_entropy)
    logits1 = where(pp == 1, logits, 0.0)
    if stack is not None and stack.pp_keeps_outputs:  # the last stage's kept outputs (memory_fsdp)
        logits = logits + where(pp > 1, mf.KEPT_OUTPUT_BYTES * plan.microbatches * sbl * model.vocab / tp, 0.0)
    reserved = params.memory_reserved_gib * GIB
    frag = params.memory_fragmentation
    # fragmentation: of the activations (Megatron), of every per-step allocation (FSDP2, memory_fsdp)
    f1, f2, f3 = (frag * (a + (lg + u if fsdp2 else 0.0)) for a, lg, u in ((act1, logits1, u1), (act2, logits, u2),
                                                                        (act3, 0.0, u3)))
    tot1 = w1 + g1 + o1 + act1 + f1 + logits1
    tot2 = w2 + g2 + o2 + act2 + f2 + logits
    tot3 = where(plan.middle_stages > 0, w3 + g3 + o3 + act3 + f3, 0.0)
    first = tot1 >= tot2
    third = tot3 > fmax(tot1, tot2)

    def pick(a1, a2, a3):
        return where(third, a3, where(first, a1, a2))

    act = pick(act1, act2, act3)
    return MemoryBreakdown(weights=pick(w1, w2, w3), gradients=pick(g1, g2, g3), optimizer=pick(o1, o2, o3),
                           activations=act, logits=pick(logits1, logits, 0.0), reserved=reserved,
                           fragmentation=pick(f1, f2, f3))


def memory_arrays(model: ModelSpec, lay: Layouts, global_batch: int, precision: str, flash: bool,
                  params: TrainParams, seq_len: int | None = None, stack: Stack | None = None) -> dict[str, np.ndarray]:
    """:func:`memory_breakdown` as a dict of every :data:`TERMS` plus ``total``."""
    mem = memory_breakdown(model, lay, stage_plan(model, lay, global_batch), groups(lay, 1 << 30), precision,
                           flash, params, seq_len or model.seq_len, stack)
    out = mem.as_dict()
    out["total"] = mem.total()
    return out


@dataclass
class MemoryResult:
    """Memory of one layout on its busiest GPU."""

    total_gib: float
    capacity_gib: float
    fits: bool
    largest_term: str
    breakdown: dict[str, float] = field(default_factory=dict)
    """Bytes by term, GiB."""

    @property
    def reason(self) -> str | None:
        """Why the layout does not fit, naming the largest term (None when it fits)."""
        if self.fits:
            return None
        return (f"out of memory: needs {self.total_gib:.1f} GiB per GPU > {self.capacity_gib:.1f} GiB HBM; "
                f"largest term {self.largest_term} {self.breakdown[self.largest_term]:.1f} GiB")

    def to_dict(self) -> dict:
        return {"total_gib": self.total_gib, "capacity_gib": self.capacity_gib, "fits": self.fits,
                "largest_term": self.largest_term, "reason": self.reason, "breakdown_gib": self.breakdown}


def memory_result(mem: MemoryBreakdown, total_bytes, i: int, hbm_bytes: float) -> MemoryResult:
    """The MemoryResult of layout ``i`` of a batch's memory breakdown and its total bytes."""
    bd = {k: scalar(getattr(mem, k), i) / GIB for k in TERMS}
    total = scalar(total_bytes, i)
    largest = max(bd, key=lambda k: bd[k])
    return MemoryResult(total_gib=total / GIB, capacity_gib=hbm_bytes / GIB, fits=total <= hbm_bytes,
                        largest_term=largest, breakdown=bd)


def checkpoint_bytes(model: ModelSpec) -> float:
    """Bytes of a full training checkpoint: 16-bit weights + fp32 master weights and Adam moments
    (14 B/param, the BLOOM checkpoint convention)."""
    return float(param_counts(model).total * CHECKPOINT_BYTES_PER_PARAM)
