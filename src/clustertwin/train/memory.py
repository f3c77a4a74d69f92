"""Memory per GPU of a training layout: model states, activations, framework allowance.

**Model states** (Megatron mixed precision, Ψ parameters held by a GPU): 16-bit weights (2 B), fp32
main gradients (4 B), Adam fp32 master weights + first + second moment (12 B) = 18 B/param. ZeRO over
the data-parallel group of size N_d (dp x cp for dense weights, dp x cp / ep for experts) divides:
stage 1 (= Megatron distributed optimizer) the 12 B of optimizer state (6 + 12/N_d), stage 2 also the
gradients (2 + 16/N_d), stage 3 also the weights (18/N_d, plus two gathered layers in flight).
FP8 training keeps an extra 1-byte weight copy per parameter. FP32/TF32 training (no 16-bit copy) holds
fp32 weights (4 B, the master copy itself), fp32 gradients (4 B) and Adam's two moments (8 B) = 16 B/param,
and stores every activation value in 4 bytes (dropout masks stay 1 byte).

**Activations** per layer and micro-batch: Korthikanti et al. 2022 (Table 2) generalised to GQA, SwiGLU,
MoE, context parallelism, flash attention and FP8 (:mod:`clustertwin.train.memory_activations`).

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
from clustertwin.train.flops import param_counts
from clustertwin.train.hardware import value_bytes
from clustertwin.train.layout import RECOMPUTE_CODES, Layouts, any_true, as_float, fmax, fmin, scalar, where
from clustertwin.train.memory_activations import (  # re-exported: the activation model's public names
    ACT_BYTES,
    FP8_BYTES,
    LSE_BYTES,
    MASK_BYTES,
    activation_bytes_per_layer,
    korthikanti_activation_bytes,
)
from clustertwin.train.memory_deepseek import (
    dualpipe_layers_in_flight,
    dualpipe_pairs,
    mtp_params,
    optimizer_bytes,
    optimizer_share,
    swiglu_fp8,
)
from clustertwin.train.memory_moe import dualpipe, full_recompute_fraction
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
#: FP32/TF32 training: fp32 weights (the master copy) and Adam's first and second moment
FP32_WEIGHT_BYTES = 4
FP32_OPTIMIZER_BYTES = 8
#: ZeRO-3 keeps this many gathered layers in flight (current + prefetched)
ZERO3_GATHERED_LAYERS = 2

TERMS = MEMORY_TERMS
__all__ = ["ACT_BYTES", "FP8_BYTES", "LSE_BYTES", "MASK_BYTES", "TERMS", "MemoryResult", "activation_bytes_per_layer",
           "checkpoint_bytes", "korthikanti_activation_bytes", "memory_arrays", "memory_breakdown", "memory_result",
           "stage_params"]


def stage_params(pc, plan: StagePlan, layers, tp, ep):
    """Dense (non-expert) and expert parameters of ``layers`` transformer layers on one GPU."""
    n_moe = layers * plan.moe_share
    return ((layers - n_moe) * pc.dense_layer + n_moe * pc.moe_layer_non_expert) / tp, \
        n_moe * pc.experts_per_layer / (ep * tp)


def _stage_states_params(model: ModelSpec, pc, lay: Layouts, plan: StagePlan):
    """(dense, expert) parameters per GPU of the first, last and middle rank: the embedding on the first stage,
    the output head and the MTP modules on the last (memory_deepseek), DualPipe's stage pairs."""
    tp, pp, ep = as_float(lay.tp), as_float(lay.pp), as_float(lay.ep)
    nonexp1, experts1 = stage_params(pc, plan, plan.first_layers, tp, ep)
    nonexp2, experts2 = stage_params(pc, plan, plan.last_layers, tp, ep)
    nonexp3, experts3 = stage_params(pc, plan, plan.middle_layers, tp, ep)
    mtp_dense, mtp_exp = mtp_params(model, pc)  # on the stage of the output head (memory_deepseek)
    mtp_dense, mtp_exp = mtp_dense / tp, mtp_exp / (ep * tp)
    first_dense = nonexp1 + pc.embedding / tp + where(pp == 1, pc.output / tp + mtp_dense, 0.0)
    experts1 = experts1 + where(pp == 1, mtp_exp, 0.0)
    last_dense = nonexp2 + (pc.output or pc.embedding) / tp + mtp_dense
    experts2 = experts2 + mtp_exp
    first_dense, last_dense, nonexp3 = dualpipe_pairs(lay, first_dense, last_dense, nonexp3)
    experts1, experts2, experts3 = dualpipe_pairs(lay, experts1, experts2, experts3)
    return (first_dense, experts1), (last_dense, experts2), (nonexp3, experts3)


def _layer_activations(model: ModelSpec, lay: Layouts, plan: StagePlan, s: int, flash: bool, fp8: bool, sw8: bool,
                       vb: int, op_sac: bool):
    """Activation bytes of an average layer (dense and MoE layers by their share) for one micro-batch."""
    act_layer_dense = activation_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp, lay.sp, lay.recompute,
                                                 flash, fp8=fp8, modules=lay.rc_modules, act_bytes=vb)
    if model.moe:
        act_layer_moe = activation_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp, lay.sp, lay.recompute,
                                                   flash, moe_layer=True, fp8=fp8, modules=lay.rc_modules, act_bytes=vb,
                                                   swiglu_fp8=sw8)
    else:
        act_layer_moe = act_layer_dense
    if op_sac:  # torchtitan's op-level selective recompute (memory_fsdp)
        sel = lay.recompute == RECOMPUTE_CODES["selective"]
        act_layer_dense, act_layer_moe = (where(sel, mf.op_sac_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp,
                                                                                lay.sp, moe), a)
                                          for moe, a in ((False, act_layer_dense), (True, act_layer_moe)))
    act_layer = (1 - plan.moe_share) * act_layer_dense + plan.moe_share * act_layer_moe
    if any_true(lay.rc_layers > 0):  # block recompute of some layers only (memory_moe)
        frac = full_recompute_fraction(lay, model.layers)
        kept = [activation_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp, lay.sp, RECOMPUTE_CODES["none"], flash,
                                           moe_layer=moe, fp8=fp8, modules=lay.rc_modules, act_bytes=vb,
                                           swiglu_fp8=sw8) for moe in (False, True)]
        act_kept = (1 - plan.moe_share) * kept[0] + plan.moe_share * kept[1]
        act_layer = where((lay.recompute == RECOMPUTE_CODES["full"]) & (lay.rc_layers > 0),
                          frac * act_layer + (1 - frac) * act_kept, act_layer)
    return act_layer


def _logits(model: ModelSpec, lay: Layouts, plan: StagePlan, s: int, vb: int, stack: Stack | None):
    """Logits and loss bytes on the first rank (with pp = 1, or DualPipe's pair holding the head) and on the last."""
    tp, pp = as_float(lay.tp), as_float(lay.pp)
    sbl = s / as_float(lay.cp) * lay.mbs
    if stack is None or stack.cross_entropy == "megatron":
        logits = 2 * vb * sbl * model.hidden * (1.0 + model.vocab / model.hidden) / tp
    else:
        logits = mf.loss_peak_bytes(model, sbl, lay.tp, stack.cross_entropy)
    logits1 = where((pp == 1) | dualpipe(lay), logits, 0.0)  # DualPipe's first rank holds the head too
    if stack is not None and stack.pp_keeps_outputs:  # the last stage's kept outputs (memory_fsdp)
        logits = logits + where(pp > 1, mf.KEPT_OUTPUT_BYTES * plan.microbatches * sbl * model.vocab / tp, 0.0)
    return logits1, logits


def memory_breakdown(model: ModelSpec, lay: Layouts, plan: StagePlan, grp: Groups, precision: str, flash: bool,
                     params: TrainParams, seq_len: int, stack: Stack | None = None) -> MemoryBreakdown:
    """Per-GPU bytes by term for each layout on the fullest of the stage plan's first, second and last
    stage (the first holds the embedding and the most micro-batches in flight, the second the busiest
    middle stage with one micro-batch fewer, the last the output layer and the logits). ``stack``: the
    software stack's memory features (None: Megatron's)."""
    s = seq_len
    pc = param_counts(model)
    tp, pp = as_float(lay.tp), as_float(lay.pp)
    (first_dense, experts1), (last_dense, experts2), (nonexp3, experts3) = _stage_states_params(model, pc, lay, plan)
    dpg, edpg = as_float(grp.dp.size), as_float(grp.edp.size)
    z = lay.zero
    vb = value_bytes(precision)
    wb, ob = (FP32_WEIGHT_BYTES, FP32_OPTIMIZER_BYTES) if vb == 4 else (WEIGHT_BYTES, OPTIMIZER_BYTES)
    ob = optimizer_bytes(stack, ob) * optimizer_share(lay)  # BF16 moments; DualPipe's two holders (memory_deepseek)
    fsdp2, op_sac = stack is not None and stack.fsdp2_memory, stack is not None and stack.selective_policy == "op"
    fp8 = precision == "fp8" and (stack is None or stack.fp8_copies)  # FP8 weight and activation copies
    sw8 = swiglu_fp8(stack, fp8)  # DeepSeek-V3's FP8 SwiGLU cache (memory_deepseek)
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
        return w, g, o, unsharded

    w1, g1, o1, u1 = states(first_dense, experts1)
    w2, g2, o2, u2 = states(last_dense, experts2)
    w3, g3, o3, u3 = states(nonexp3, experts3)

    act_layer = _layer_activations(model, lay, plan, s, flash, fp8, sw8, vb, op_sac)
    interleave = where(lay.vpp > 1, 1.0 + (pp - 1) / (pp * lay.vpp), 1.0)
    working = where(lay.recompute == RECOMPUTE_CODES["full"],
                    activation_bytes_per_layer(model, s, lay.mbs, lay.tp, lay.cp, lay.sp,
                                               RECOMPUTE_CODES["none"], flash, fp8=fp8, act_bytes=vb), 0.0)
    if stack is not None and stack.cp_kv_allgather:  # the running layer's gathered K and V (memory_fsdp)
        working = working + mf.cp_allgather_bytes(model, s, lay.mbs, lay.tp, lay.cp)
    # layer-micro-batches in flight: 1F1B min(p, m) on the first stage, one on the last (+ its MTP modules);
    # DualPipe p + 1 over the stage pair (memory_deepseek)
    lf, ll, lm = dualpipe_layers_in_flight(lay, plan.first_layers + where(pp == 1, model.mtp_layers, 0),
                                           plan.last_layers + model.mtp_layers, plan.middle_layers,
                                           fmin(pp, plan.microbatches), fmin(pp - 1, plan.microbatches))
    act1, act2, act3 = act_layer * lf * interleave + working, act_layer * ll + working, \
        act_layer * lm * interleave + working
    logits1, logits = _logits(model, lay, plan, s, vb, stack)
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
