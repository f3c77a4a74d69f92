"""Step time of a training layout, with a breakdown (vectorised over layouts): the composer.

Every term comes from its own module, which states its formula and source:

* one layer, one micro-batch: ``layer = max(host, gpu)``, ``gpu`` = GEMMs and element-wise kernels
  (:mod:`layer`, :mod:`gemm`, FFN / experts :mod:`moe`) + attention core (:mod:`attention`) + recompute
  (``full`` re-runs the layer forward, ``selective`` the attention core, or with torchtitan's op-level
  policy the unsaved GEMMs: :func:`~clustertwin.train.memory_fsdp.op_sac_recompute_share`) + exposed TP (:mod:`tensor_parallel`),
  CP (:mod:`attention`) and EP (:mod:`moe`) communication; ``host`` = kernels x ``kernel_host_overhead_s``;
* stages and the pipeline: :mod:`pipeline` (stage plan, send/recv, ``sum_i t_i + (m - 1) t_max``), the
  end blocks :mod:`output_layer`;
* group sizes and ranks per node: :mod:`placement`; collective costs: :mod:`collectives`;
* data parallelism and ZeRO: :mod:`overlap`; optimizer: :mod:`optimizer`; stragglers: :mod:`stragglers`;
* memory: :mod:`memory`; the typed breakdowns: :mod:`breakdown`;
* every group's share of the network under concurrent traffic on the topology and placement:
  :mod:`topology_comm`; the data path: :mod:`data`.

    step = pipe + stragglers + exposed DP reduction + exposed ZeRO-3 gathers + optimizer + data stall

The breakdown splits the steady state (m x the slowest stage) by term and adds bubble, stragglers, DP,
ZeRO-3 and optimizer; its terms add up to the step time.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.train import flops as F
from clustertwin.train.attention import attention_core, cp_exposed
from clustertwin.train.breakdown import BREAKDOWN_KEYS, MEMORY_TERMS, StepBreakdown
from clustertwin.train.collectives import collective_time
from clustertwin.train.data import DEFAULT_DATASET, data_stall_time
from clustertwin.train.gemm import FP8_BYTES, Gemm
from clustertwin.train.hardware import Hardware, hardware
from clustertwin.train.layer import layer_compute, model_shape
from clustertwin.train.layout import (
    LAYOUT_FIELDS,
    MOE_OVERLAP_CODES,
    Layouts,
    as_float,
    fmax,
    where,
)
from clustertwin.train.memory import memory_breakdown
from clustertwin.train.memory_fsdp import op_sac_recompute_share
from clustertwin.train.moe import (
    dispatch_combine_s,
    dualpipe_bubble_factor,
    ep_exposed,
    ffn_cost,
    imbalance,
    module_recompute_s,
    overlap_code,
    sync_stall,
)
from clustertwin.train.moe_layout import expert_groups
from clustertwin.train.optimizer import optimizer_time
from clustertwin.train.output_layer import EndBlocks, end_blocks, with_mtp
from clustertwin.train.overlap import data_parallel_time, largest_stage
from clustertwin.train.params import TrainParams
from clustertwin.train.physics import check_peak
from clustertwin.train.pipeline import FIRST, LAST, p2p_time, pipeline_time, select, stage_plan
from clustertwin.train.placement import Group, groups, ranks_per_node
from clustertwin.train.recompute import Recompute
from clustertwin.train.result import StageLayers, StageTimes, StepResult
from clustertwin.train.stack import Stack, resolve_stack
from clustertwin.train.stragglers import straggler_time
from clustertwin.train.tensor_parallel import tp_exposed
from clustertwin.train.topology_comm import with_topology
from clustertwin.units import TFLOP

__all__ = ["BREAKDOWN_KEYS", "MEMORY_TERMS", "SCALAR_LOOP_MAX", "Hardware", "evaluate_layouts", "hardware"]

#: backward kernels per forward kernel
BWD_KERNEL_FACTOR = 2
#: batches of at most this many layouts are evaluated one by one on Python scalars (faster than
#: numpy on tiny arrays); larger batches vectorise
SCALAR_LOOP_MAX = 16


@dataclass
class LayerTime:
    """Seconds of one (share-weighted) layer and micro-batch, by term."""

    gpu: object = 0.0
    host: object = 0.0
    backward: object = 0.0
    forward: object = 0.0
    compute: object = 0.0
    tp: object = 0.0
    cp: object = 0.0
    ep: object = 0.0
    sync: object = 0.0
    """GPU idle behind the MoE dispatcher's host sync (moe.sync_stall)"""


def _stage_extras(ends: EndBlocks, k: object, single: object, pair_k: object) -> tuple[object, object]:
    """(GPU, with host dispatch) seconds per micro-batch of the end blocks on the slowest stage ``k``: both
    with one stage, the embedding on the first, the output layer (and MTP modules) on the last, half of
    both on DualPipe's first/last pair (``pair_k``)."""
    gpu = where(single, ends.logits_gpu_s + ends.embedding_s,
                where(k == FIRST, ends.embedding_s, where(k == LAST, ends.logits_gpu_s, 0.0)))
    total = where(single, ends.logits_s + ends.embedding_s,
                  where(k == FIRST, ends.embedding_s, where(k == LAST, ends.logits_s, 0.0)))
    return (where(pair_k, 0.5 * (ends.embedding_s + ends.logits_gpu_s), gpu),
            where(pair_k, 0.5 * (ends.embedding_s + ends.logits_s), total))


def evaluate_layouts(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, global_batch: int,
                     precision: str, params: TrainParams, seq_len: int | None = None,
                     calibration: Calibration | None = None, with_memory: bool = True,
                     stack: Stack | None = None, placement="contiguous",
                     dataset=DEFAULT_DATASET) -> StepResult:
    """Step time, throughput, MFU/HFU, breakdown and memory of every layout (arrays of len(lay);
    Python floats when ``lay`` holds one scalar layout).

    A :class:`~clustertwin.train.result.StepResult`: step time, tokens/s, MFU/HFU, FLOPs, the typed step
    breakdown (seconds per step by :data:`BREAKDOWN_KEYS` term), the stage plan and, with memory, the
    typed memory breakdown (bytes per GPU by :data:`MEMORY_TERMS` term), its total and ``fits``.
    ``stack``: the software stack (default: by GPU generation, :func:`~clustertwin.train.stack.resolve_stack`);
    ``placement``: the job's nodes (:mod:`~clustertwin.train.topology_comm`); ``dataset``: what the job
    reads (:mod:`~clustertwin.train.data`; None: no data term). SpecError when a layout's MFU or HFU passes 1
    (:func:`~clustertwin.train.physics.check_peak`)."""
    if not lay.is_scalar and len(lay) <= SCALAR_LOOP_MAX:
        rows = []
        for i in range(len(lay)):
            one = Layouts(*(int(getattr(lay, f)[i]) for f in LAYOUT_FIELDS))  # type: ignore[arg-type]
            rows.append(_evaluate(model, cluster, one, global_batch, precision, params, seq_len, calibration,
                                  with_memory, stack, placement, dataset))
        out = StepResult.stack(rows)
    else:
        out = _evaluate(model, cluster, lay, global_batch, precision, params, seq_len, calibration, with_memory,
                        stack, placement, dataset)
    check_peak(out, lay, model, params, calibration)  # MFU/HFU <= 1 for every layout (physics.py)
    return out


def _evaluate(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, global_batch: int, precision: str,
              params: TrainParams, seq_len: int | None, calibration: Calibration | None,
              with_memory: bool, stack: Stack | None, placement="contiguous", dataset=DEFAULT_DATASET) -> StepResult:
    s = seq_len or model.seq_len
    st = stack or resolve_stack("auto", cluster, params)
    hw = hardware(cluster, precision, params, st)
    g = Gemm(hw, params, precision)
    c = model_shape(model, s)
    pc = c.pc
    T = lay.mbs * (s / lay.cp)  # local tokens of the micro-batch
    bw = hw.hbm_bytes_per_s * params.hbm_efficiency
    grp = with_topology(cluster, lay, groups(lay, hw.gpus_per_node), hw.gpus_per_node, placement)
    rc = Recompute.of(lay, model, st.selective_policy)  # what is recomputed: time and FLOPs (recompute.py)

    def coll(op: str, nbytes, group: Group):
        return collective_time(cluster, op, nbytes, group.size, group.ranks_per_node, calibration, group.net_fraction,
                               group.net_hops)

    lt, moe_code = _layer_times(model, cluster, c, s, lay, T, hw, g, bw, grp, rc, st, params, precision,
                                calibration, coll)

    plan = stage_plan(model, lay, global_batch)
    m = as_float(plan.microbatches)
    layer_time = fmax(lt.gpu, lt.host) + lt.sync
    host_stall = fmax(lt.host - lt.gpu, 0.0) + lt.sync
    ends = with_mtp(end_blocks(c, lay.tp, T, g, bw, params, st.fused_cross_entropy), c, model.mtp_layers, lay.tp,
                    T, g, lt.gpu, layer_time)  # the MTP modules run on the last stage (output_layer.py)
    p2p_comm, p2p_host = p2p_time(lay, T, c.h, coll, grp.pp, params)
    p2p = p2p_comm + p2p_host
    paired = (moe_code == MOE_OVERLAP_CODES["dualpipe"]) if model.moe else False
    pt = pipeline_time(plan, layer_time, p2p, ends.embedding_s, ends.logits_s, paired & (lay.pp > 1))
    if model.moe:  # DualPipe's bubble shape (moe.py)
        bubble = where(moe_code == MOE_OVERLAP_CODES["dualpipe"], pt.bubble_s * dualpipe_bubble_factor(lay.pp),
                       pt.bubble_s)
        pt.pipe_s, pt.bubble_s = pt.pipe_s - pt.bubble_s + bubble, bubble
    pipe = pt.pipe_s
    stragglers = straggler_time(pipe, as_float(lay.gpus), params)

    # data-parallel gradient reduction, ZeRO gathers, optimizer: on the stage with the most parameters
    dense_local, exp_local, layers_p = largest_stage(pc, plan, lay)
    dpt = data_parallel_time(dense_local, exp_local, lay.zero, m, layers_p * lt.backward, layers_p * lt.forward,
                             pipe, coll, grp.dp, grp.edp, params, st.overlap_grad_reduce, st.overlap_param_gather,
                             hw.value_bytes, FP8_BYTES if precision == "fp8" and st.fp8_param_gather else None)
    opt = optimizer_time(dense_local + exp_local, lay.zero, grp.dp.size, bw)
    step = pipe + stragglers + dpt.dp_s + dpt.zero3_s + opt
    data = data_stall_time(cluster, dataset, step, lay.gpus, global_batch, s)
    step = step + data

    # breakdown: the steady state (m x the slowest stage) by term, then the rest
    single = lay.pp == 1
    k = pt.slowest
    pair_k = paired & ~single & (k == FIRST)  # DualPipe's first/last stage pair (pipeline_time)
    layers_k = where(pair_k, 0.5 * (plan.first_layers + plan.last_layers),
                     select(k, plan.first_layers, plan.middle_layers, plan.last_layers))
    extra_gpu, extra = _stage_extras(ends, k, single, pair_k)
    bd = StepBreakdown(
        compute=m * (layers_k * lt.compute + extra_gpu),
        host_overhead=m * (layers_k * host_stall + extra - extra_gpu + p2p_host),
        tp_comm=m * layers_k * lt.tp, cp_comm=m * layers_k * lt.cp, ep_comm=m * layers_k * lt.ep,
        pp_comm=m * p2p_comm, bubble=pt.bubble_s, stragglers=stragglers, dp_comm=dpt.dp_s,
        zero3_gather=dpt.zero3_s, optimizer=opt, data_stall=data)

    gpus = as_float(lay.gpus)
    fpt = F.flops_per_token(model, s, **st.flops_convention)
    tokens = global_batch * s
    model_flops = fpt.model * tokens
    hw_flops = (fpt.model + rc.flops_per_token(model, s, st.causal_flops)) * tokens
    out = StepResult(
        step_time_s=step, tokens_per_s=tokens / step,
        model_tflops_per_gpu=model_flops / (step * gpus) / TFLOP,
        hardware_tflops_per_gpu=hw_flops / (step * gpus) / TFLOP,
        mfu=model_flops / (step * gpus * hw.peak_flops), hfu=hw_flops / (step * gpus * hw.peak_flops),
        model_flops_per_step=model_flops, hardware_flops_per_step=hw_flops, breakdown=bd,
        stages=StageLayers(plan.first_layers, plan.middle_layers, plan.last_layers),
        schedule=StageTimes(m, rc.passes, layer_time, lt.forward, lt.compute, lt.tp, lt.cp, lt.ep, host_stall, p2p_comm,
                            p2p_host, ends.embedding_s, ends.logits_s, pipe))
    if with_memory:
        out.memory = memory_breakdown(model, lay, plan, grp, precision, hw.flash, params, s, st)
        out = out.with_fits(hw.hbm_bytes)
    return out


def _layer_times(model: ModelSpec, cluster: ClusterSpec, c, s, lay: Layouts, T, hw: Hardware, g: Gemm, bw,
                 grp, rc: Recompute, st: Stack, params: TrainParams, precision: str,
                 calibration: Calibration | None, coll) -> tuple[LayerTime, object]:
    """One layer and micro-batch by term, weighted over the dense and MoE layer shares (:class:`LayerTime`),
    and the layouts' MoE overlap code: GEMMs and element-wise kernels, attention core, recompute, exposed
    TP / CP / EP communication, the host's kernel launches and the MoE dispatcher's host sync."""
    full_f = rc.full_fraction
    passes = rc.passes
    tp_layer, tp_kernels = tp_exposed(lay, T, c.h, passes, coll, grp.tp, hw, params)
    core = attention_core(c, s, lay, T, hw, g, params, bw)
    cp_exp = cp_exposed(c, s, lay, core, full_f, coll, grp.cp, params)
    lt = LayerTime()
    # MoE (moe.py): expert groups, load of the busiest rank, dispatch/combine and its overlap mode
    eg = expert_groups(lay, hw.gpus_per_node, ranks_per_node)
    load = imbalance(model, params, st.moe_force_balanced)
    moe_code = overlap_code(lay, st.moe_overlaps, bool(model.moe and model.moe.shared_experts))
    for moe, share in ((False, 1.0 - c.moe_share), (True, c.moe_share)):
        if share <= 0:
            continue
        ffn = ffn_cost(model, c, lay, T, g, moe, params, eg, load)
        lc = layer_compute(c, lay, T, g, bw, precision, ffn, st.fp8_recipe)
        compute = lc.fwd_s + lc.bwd_s + core.fwd_s + core.bwd_s + rc.layer_s(
            lc.fwd_s, core.fwd_s, module_recompute_s(c, lay, T, g, bw, ffn, core.fwd_s, moe),
            op_sac_recompute_share(model, moe))
        a2a = dispatch_combine_s(model, cluster, c, lay, T, eg, st.moe_dispatcher, precision, load,
                                 calibration) if moe else 0.0
        ep_exp = ep_exposed(a2a, passes, moe_code, compute, ffn.shared_s, params) if moe else 0.0
        if moe and st.moe_host_sync:
            lt.sync = lt.sync + share * sync_stall(ffn, a2a, full_f, params, BWD_KERNEL_FACTOR)
        kernels = (lc.kernels + core.kernels + tp_kernels) * (1 + BWD_KERNEL_FACTOR + full_f) + \
            rc.extra_kernels(lc.kernels)
        lt.gpu = lt.gpu + share * (compute + tp_layer + cp_exp + ep_exp)
        lt.host = lt.host + share * kernels * params.kernel_host_overhead_s
        lt.backward = lt.backward + share * (lc.bwd_s + core.bwd_s)
        lt.forward = lt.forward + share * (lc.fwd_s + core.fwd_s)
        lt.compute = lt.compute + share * compute
        lt.tp = lt.tp + share * tp_layer
        lt.cp = lt.cp + share * cp_exp
        lt.ep = lt.ep + share * ep_exp
    return lt, moe_code
