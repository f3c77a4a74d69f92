"""The collectives of one training step, one by one: what each layer pass, pipeline hop and gradient
bucket communicates, with the size the step model costs and the collective model's time for it
(``export chakra`` writes one node per entry).

The sizes are the step model's own (nccl-tests' convention, :mod:`~clustertwin.train.collectives`):

* TP (:mod:`~clustertwin.train.tensor_parallel`): per layer and pass (forward, backward, recomputed
  forward) two all-reduces of the ``T h`` activations, or with sequence parallelism two all-gather +
  reduce-scatter pairs (Korthikanti et al. 2022);
* CP (:func:`~clustertwin.train.attention.cp_exposed`): the ring-attention KV exchange, one all-gather of
  ``mbs s kv / t`` 16-bit values in the forward, two in the backward (one more per recomputed forward);
* EP (:mod:`~clustertwin.train.moe_dispatch`): per MoE layer and pass a dispatch and a combine
  all-to-all of the rank's ``T / t`` tokens x top-k x ``h`` values;
* PP (:func:`~clustertwin.train.pipeline.p2p_time`): one send/recv of ``T h / t`` 16-bit values per
  chunk and direction;
* DP (:mod:`~clustertwin.train.overlap`): the stage's local parameters in buckets of ``max(40M, 1M x dp)``
  (Megatron-Core's default): ZeRO 0 one all-reduce per bucket, ZeRO 1-2 a reduce-scatter and an
  all-gather per bucket, ZeRO 3 two all-gathers per bucket and micro-batch and one reduce-scatter;
  expert parameters the same over expert-DP.

Times are the collective model's (:func:`~clustertwin.train.collectives.collective_time`) for the group
where the placement puts it (:mod:`~clustertwin.train.topology_comm`); the EP all-to-all time is half the
dispatch + combine pair of :func:`~clustertwin.train.moe_dispatch.dispatch_combine_s`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.train.collectives import collective_time
from clustertwin.train.gemm import BF16_BYTES, FP8_BYTES
from clustertwin.train.hardware import hardware
from clustertwin.train.layer import model_shape
from clustertwin.train.layout import Layouts
from clustertwin.train.memory import stage_params
from clustertwin.train.moe import imbalance
from clustertwin.train.moe_dispatch import dispatch_bytes_per_value, dispatch_combine_s, pair_kernel
from clustertwin.train.moe_layout import expert_groups
from clustertwin.train.overlap import (
    BUCKET_MIN_PARAMS,
    BUCKET_PARAMS_PER_DP_RANK,
    GRAD_COMM_BYTES,
    PARAM_COMM_BYTES,
)
from clustertwin.train.params import resolve_params
from clustertwin.train.pipeline import stage_plan
from clustertwin.train.placement import groups, ranks_per_node
from clustertwin.train.recompute import Recompute
from clustertwin.train.stack import resolve_stack
from clustertwin.train.topology_comm import with_topology


@dataclass(frozen=True)
class Coll:
    """One collective: its group kind (tp, cp, ep, dp, edp, pp), operation, size and modelled seconds."""

    group: str
    op: str
    nbytes: float
    seconds: float


@dataclass(frozen=True)
class StepCollectives:
    """The collectives of one step of a layout (module docstring)."""

    tp_pass: tuple[Coll, ...]
    """one layer, one pass"""
    cp_pass: tuple[Coll, ...]
    """one layer: the forward's KV all-gather (the backward runs it twice)"""
    ep_pass: tuple[Coll, ...]
    """one MoE layer, one pass: dispatch, combine"""
    p2p: Coll | None
    """one activation or gradient message between stages (None without pipeline parallelism)"""
    full_recompute_fraction: float
    """share of a chunk's layers whose backward re-runs the forward (and its collectives)"""
    moe_share: float
    zero: int
    microbatches: int
    grad_bytes: float
    """bytes per reduced gradient value (2: 16-bit, 4 in FP32/TF32 training)"""
    param_bytes: float
    """bytes per gathered parameter (1 with FP8 parameter gather)"""


@dataclass(frozen=True)
class StepPlan:
    """Everything ``export chakra`` needs besides the schedule: the collectives, the groups and a coll()."""

    collectives: StepCollectives
    groups: object
    coll: object
    """``coll(kind, op, nbytes) -> Coll`` with the collective model's time"""
    dense_params: list[float]
    """local dense parameters of every stage (embedding on the first, output layer on the last)"""
    expert_params: list[float]


def step_collectives(model: ModelSpec, cluster: ClusterSpec, par: ParallelismSpec, stage_layers: list[int],
                     calibration: Calibration | None = None, placement="contiguous") -> StepPlan:
    """The per-step collectives of layout ``par`` with ``stage_layers`` layers on each stage."""
    prm = resolve_params(None, calibration)
    st = resolve_stack(par.software_stack, cluster, prm)
    hw = hardware(cluster, par.precision, prm, st)
    lay = Layouts.from_spec(par)
    s = model.seq_len
    c = model_shape(model, s)
    T = par.micro_batch * s / par.cp
    grp = with_topology(cluster, lay, groups(lay, hw.gpus_per_node), hw.gpus_per_node, placement)

    def coll(kind: str, op: str, nbytes: float) -> Coll:
        g = getattr(grp, kind)
        return Coll(kind, op, float(nbytes), float(collective_time(cluster, op, nbytes, g.size, g.ranks_per_node,
                                                                   calibration, g.net_fraction, g.net_hops)))

    act = T * c.h * hw.value_bytes
    tp: tuple[Coll, ...] = ()
    if par.tp > 1:
        tp = (coll("tp", "all_gather", act), coll("tp", "reduce_scatter", act)) * 2 if par.sequence_parallel \
            else (coll("tp", "all_reduce", act),) * 2
    cp = (coll("cp", "all_gather", par.micro_batch * s * c.kv_pair / par.tp * BF16_BYTES),) if par.cp > 1 else ()
    ep: tuple[Coll, ...] = ()
    if model.moe and par.ep > 1:
        eg = expert_groups(lay, hw.gpus_per_node, ranks_per_node)
        kernel = pair_kernel(st.moe_dispatcher, int(eg.ep), int(eg.ep_rpn))
        b_d, b_c = dispatch_bytes_per_value(kernel, par.precision)
        pair_s = float(dispatch_combine_s(model, cluster, c, lay, T, eg, st.moe_dispatcher, par.precision,
                                          imbalance(model, prm, st.moe_force_balanced), calibration))
        tokens = T / par.tp * model.moe.top_k * c.h
        ep = (Coll("ep", "all_to_all", tokens * b_d, pair_s / 2), Coll("ep", "all_to_all", tokens * b_c, pair_s / 2))
    p2p = coll("pp", "send_recv", T * c.h * BF16_BYTES / par.tp) if par.pp > 1 else None
    plan = stage_plan(model, lay, par.global_batch)
    rc = Recompute.of(lay, model, st.selective_policy)
    pc = c.pc
    dense, expert = [], []
    for i, n in enumerate(stage_layers):
        d, e = stage_params(pc, plan, float(n), float(par.tp), float(par.ep))
        d += (pc.embedding / par.tp if i == 0 else 0.0) + (pc.output / par.tp if i == len(stage_layers) - 1 else 0.0)
        dense.append(float(d))
        expert.append(float(e))
    fp8_gather = par.precision == "fp8" and st.fp8_param_gather
    sc = StepCollectives(tp, cp, ep, p2p, float(rc.full_fraction), float(plan.moe_share), par.zero,
                         int(plan.microbatches), GRAD_COMM_BYTES * hw.value_bytes / 2,
                         FP8_BYTES if fp8_gather else PARAM_COMM_BYTES * hw.value_bytes / 2)
    return StepPlan(sc, grp, coll, dense, expert)


def buckets(plan: StepPlan, stage: int) -> list[tuple[str, int, float, float]]:
    """(group, buckets, gradient bytes, parameter bytes per bucket) of a stage's dense and expert parameters."""
    sc, out = plan.collectives, []
    for kind, n_params in (("dp", plan.dense_params[stage]), ("edp", plan.expert_params[stage])):
        size = int(getattr(plan.groups, kind).size)
        if n_params <= 0 or size <= 1:
            continue
        n = max(math.ceil(n_params / max(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP_RANK * size)), 1)
        out.append((kind, n, n_params * sc.grad_bytes / n, n_params * sc.param_bytes / n))
    return out


def dp_collectives(plan: StepPlan, stage: int) -> tuple[list[Coll], list[Coll]]:
    """(gradient reductions after a backward, parameter gathers after the optimizer) of ``stage``: all-reduce
    buckets (ZeRO 0), reduce-scatter then all-gather buckets (ZeRO 1-2), reduce-scatter buckets (ZeRO 3, after
    every micro-batch's backward)."""
    red: list[Coll] = []
    gather: list[Coll] = []
    for kind, n, g_bytes, p_bytes in buckets(plan, stage):
        zero = plan.collectives.zero
        red += [plan.coll(kind, "all_reduce" if zero == 0 else "reduce_scatter", g_bytes)] * n  # type: ignore[operator]
        if 1 <= zero < 3:
            gather += [plan.coll(kind, "all_gather", p_bytes)] * n  # type: ignore[operator]
    return red, gather


def zero3_gathers(plan: StepPlan, stage: int) -> list[Coll]:
    """ZeRO-3: the parameter all-gathers before each micro-batch's forward, and again before its backward."""
    if plan.collectives.zero < 3:
        return []
    return [plan.coll(kind, "all_gather", p_bytes) for kind, n, _, p_bytes in buckets(plan, stage)  # type: ignore[operator]
            for _ in range(n)]
