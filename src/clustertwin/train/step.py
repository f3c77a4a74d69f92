"""Step time of a training layout, with a breakdown (vectorised over layouts): the composer.

Every term comes from its own module, which states its formula and source:

* one layer, one micro-batch: ``layer = max(host, gpu)``, ``gpu`` = GEMMs and element-wise kernels
  (:mod:`layer`, :mod:`gemm`, FFN / experts :mod:`moe`) + attention core (:mod:`attention`) + recompute
  (``full`` re-runs the layer forward, ``selective`` the attention core) + exposed TP (:mod:`tensor_parallel`),
  CP (:mod:`attention`) and EP (:mod:`moe`) communication; ``host`` = kernels x ``kernel_host_overhead_s``;
* stages and the pipeline: :mod:`pipeline` (stage plan, send/recv, ``sum_i t_i + (m - 1) t_max``), the
  end blocks :mod:`output_layer`;
* group sizes and ranks per node: :mod:`placement`; collective costs: :mod:`collectives`;
* data parallelism and ZeRO: :mod:`overlap`; optimizer: :mod:`optimizer`; stragglers: :mod:`stragglers`;
* memory: :mod:`memory`; the typed breakdowns: :mod:`breakdown`.

    step = pipe + stragglers + exposed DP reduction + exposed ZeRO-3 gathers + optimizer

The breakdown splits the steady state (m x the slowest stage) by term and adds bubble, stragglers, DP,
ZeRO-3 and optimizer; its terms add up to the step time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.train import flops as F
from clustertwin.train.attention import KERNELS_FLASH_ATTENTION, attention_core, cp_exposed
from clustertwin.train.breakdown import BREAKDOWN_KEYS, MEMORY_TERMS, StepBreakdown
from clustertwin.train.collectives import collective_time
from clustertwin.train.gemm import Gemm
from clustertwin.train.hardware import Hardware, hardware
from clustertwin.train.layer import layer_compute, model_shape
from clustertwin.train.layout import LAYOUT_FIELDS, RECOMPUTE_CODES, Layouts, as_float, fmax, where
from clustertwin.train.memory import memory_breakdown
from clustertwin.train.moe import ep_exposed, ffn_cost
from clustertwin.train.optimizer import optimizer_time
from clustertwin.train.output_layer import end_blocks
from clustertwin.train.overlap import data_parallel_time, largest_stage
from clustertwin.train.params import TrainParams
from clustertwin.train.pipeline import FIRST, LAST, p2p_time, pipeline_time, select, stage_plan
from clustertwin.train.placement import Group, groups
from clustertwin.train.stack import Stack, resolve_stack
from clustertwin.train.stragglers import straggler_time
from clustertwin.train.tensor_parallel import tp_exposed
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


def evaluate_layouts(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, global_batch: int,
                     precision: str, params: TrainParams, seq_len: int | None = None,
                     calibration: Calibration | None = None, with_memory: bool = True,
                     stack: Stack | None = None) -> dict[str, np.ndarray]:
    """Step time, throughput, MFU/HFU, breakdown and memory of every layout (arrays of len(lay);
    Python floats when ``lay`` holds one scalar layout).

    Keys: ``step_time_s``, ``tokens_per_s``, ``mfu``, ``hfu``, ``model_tflops_per_gpu``,
    ``hardware_tflops_per_gpu``, ``bd_<term>`` for every :data:`BREAKDOWN_KEYS` (seconds per step) and,
    with memory, ``mem_<term>`` for every :data:`MEMORY_TERMS`, ``mem_total`` (bytes) and ``fits``.
    ``stack``: the software stack (default: by GPU generation, :func:`~clustertwin.train.stack.resolve_stack`)."""
    if not lay.is_scalar and len(lay) <= SCALAR_LOOP_MAX:
        rows = []
        for i in range(len(lay)):
            one = Layouts(*(int(getattr(lay, f)[i]) for f in LAYOUT_FIELDS))  # type: ignore[arg-type]
            rows.append(_evaluate(model, cluster, one, global_batch, precision, params, seq_len, calibration,
                                  with_memory, stack))
        return {k: np.array([r[k] for r in rows]) for k in rows[0]}
    return _evaluate(model, cluster, lay, global_batch, precision, params, seq_len, calibration, with_memory, stack)


def _evaluate(model: ModelSpec, cluster: ClusterSpec, lay: Layouts, global_batch: int, precision: str,
              params: TrainParams, seq_len: int | None, calibration: Calibration | None,
              with_memory: bool, stack: Stack | None) -> dict:
    s = seq_len or model.seq_len
    st = stack or resolve_stack("auto", cluster, params)
    hw = hardware(cluster, precision, params, st)
    g = Gemm(hw, params, precision)
    c = model_shape(model, s)
    pc = c.pc
    T = lay.mbs * (s / lay.cp)  # local tokens of the micro-batch
    bw = hw.hbm_bytes_per_s * params.hbm_efficiency
    grp = groups(lay, hw.gpus_per_node)
    full = lay.recompute == RECOMPUTE_CODES["full"]
    sel = lay.recompute == RECOMPUTE_CODES["selective"]
    full_f = as_float(full) if isinstance(full, np.ndarray) else float(full)

    def coll(op: str, nbytes, group: Group):
        return collective_time(cluster, op, nbytes, group.size, group.ranks_per_node, calibration)

    passes = 2 + full_f  # forward + backward (+ recomputed forward)
    tp_layer, tp_kernels = tp_exposed(lay, T, c.h, passes, coll, grp.tp, hw, params)
    core = attention_core(c, s, lay, T, hw, g, params, bw)
    cp_exp = cp_exposed(c, s, lay, core, full_f, coll, grp.cp, params)
    lt = LayerTime()
    for moe, share in ((False, 1.0 - c.moe_share), (True, c.moe_share)):
        if share <= 0:
            continue
        lc = layer_compute(c, lay, T, g, bw, precision, ffn_cost(model, c, lay, T, g, moe))
        compute = lc.fwd_s + lc.bwd_s + core.fwd_s + core.bwd_s + where(full, lc.fwd_s + core.fwd_s, 0.0) + \
            where(sel, core.fwd_s, 0.0)
        ep_exp = ep_exposed(model, c, T, passes, coll, grp.ep, params) if moe else 0.0
        kernels = (lc.kernels + core.kernels + tp_kernels) * (1 + BWD_KERNEL_FACTOR + full_f) + \
            where(sel, KERNELS_FLASH_ATTENTION, 0)
        lt.gpu = lt.gpu + share * (compute + tp_layer + cp_exp + ep_exp)
        lt.host = lt.host + share * kernels * params.kernel_host_overhead_s
        lt.backward = lt.backward + share * (lc.bwd_s + core.bwd_s)
        lt.forward = lt.forward + share * (lc.fwd_s + core.fwd_s)
        lt.compute = lt.compute + share * compute
        lt.tp = lt.tp + share * tp_layer
        lt.cp = lt.cp + share * cp_exp
        lt.ep = lt.ep + share * ep_exp

    plan = stage_plan(model, lay, global_batch)
    m = as_float(plan.microbatches)
    layer_time = fmax(lt.gpu, lt.host)
    host_stall = fmax(lt.host - lt.gpu, 0.0)
    ends = end_blocks(c, lay.tp, T, g, bw, params)
    p2p_comm, p2p_host = p2p_time(lay, T, c.h, coll, grp.pp, params)
    p2p = p2p_comm + p2p_host
    pt = pipeline_time(plan, layer_time, p2p, ends.embedding_s, ends.logits_s)
    pipe = pt.pipe_s
    stragglers = straggler_time(pipe, as_float(lay.gpus), params)

    # data-parallel gradient reduction, ZeRO gathers, optimizer: on the stage with the most parameters
    dense_local, exp_local, layers_p = largest_stage(pc, plan, lay)
    dpt = data_parallel_time(dense_local, exp_local, lay.zero, m, layers_p * lt.backward, layers_p * lt.forward,
                             pipe, coll, grp.dp, grp.edp, params, st.overlap_grad_reduce, st.overlap_param_gather,
                             hw.value_bytes)
    opt = optimizer_time(dense_local + exp_local, lay.zero, grp.dp.size, bw)
    step = pipe + stragglers + dpt.dp_s + dpt.zero3_s + opt

    # breakdown: the steady state (m x the slowest stage) by term, then the rest
    single = lay.pp == 1
    k = pt.slowest
    layers_k = select(k, plan.first_layers, plan.middle_layers, plan.last_layers)
    extra_gpu = where(single, ends.logits_gpu_s + ends.embedding_s,
                      where(k == FIRST, ends.embedding_s, where(k == LAST, ends.logits_gpu_s, 0.0)))
    extra = where(single, ends.logits_s + ends.embedding_s,
                  where(k == FIRST, ends.embedding_s, where(k == LAST, ends.logits_s, 0.0)))
    bd = StepBreakdown(
        compute=m * (layers_k * lt.compute + extra_gpu),
        host_overhead=m * (layers_k * host_stall + extra - extra_gpu + p2p_host),
        tp_comm=m * layers_k * lt.tp, cp_comm=m * layers_k * lt.cp, ep_comm=m * layers_k * lt.ep,
        pp_comm=m * p2p_comm, bubble=pt.bubble_s, stragglers=stragglers, dp_comm=dpt.dp_s,
        zero3_gather=dpt.zero3_s, optimizer=opt)

    gpus = as_float(lay.gpus)
    fpt = F.flops_per_token(model, s)
    tokens = global_batch * s
    model_flops = fpt.model * tokens
    hw_extra = where(full, F.flops_per_token(model, s, "full").recompute,
                     where(sel, F.flops_per_token(model, s, "selective").recompute, 0.0))
    hw_flops = (fpt.model + hw_extra) * tokens
    out = {
        "step_time_s": step, "tokens_per_s": tokens / step,
        "model_tflops_per_gpu": model_flops / (step * gpus) / TFLOP,
        "hardware_tflops_per_gpu": hw_flops / (step * gpus) / TFLOP,
        "mfu": model_flops / (step * gpus * hw.peak_flops), "hfu": hw_flops / (step * gpus * hw.peak_flops),
        "model_flops_per_step": model_flops, "hardware_flops_per_step": hw_flops,
        "plan_first_layers": plan.first_layers, "plan_middle_layers": plan.middle_layers,
        "plan_last_layers": plan.last_layers,
    }
    for name, v in bd.as_dict().items():
        out[f"bd_{name}"] = v
    if with_memory:
        mem = memory_breakdown(model, lay, plan, grp, precision, hw.flash, params, s)
        for name, v in mem.as_dict().items():
            out[f"mem_{name}"] = v
        out["mem_total"] = mem_total = mem.total()
        out["fits"] = mem_total <= hw.hbm_bytes
    return out
