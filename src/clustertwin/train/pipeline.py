"""Pipeline stages as data (:class:`StagePlan`) and the pipeline time of a step.

**Stage plan**: the layers of each pipeline stage (first, the ``p - 2`` middle ones, last) and of each
of its ``v`` virtual chunks; the first stage holds the embedding, the last the output layer and loss.
Step time (per-stage compute) and memory (per-stage weights and activations) both read it. Layers that
do not divide evenly give every stage ``ceil(L / p)`` (the busiest stage sets the pace).

**Pipeline time** of m micro-batches over p stages with stage times ``t_i = body_i + extra_i`` (body:
layers and send/recv, split over the v chunks; extra: embedding or output layer, in one chunk):

    pipe   = sum_i t_i + (m - 1) t_max                                  (1F1B, v = 1)
           = m t_max + bubble,
    bubble = (sum_i body_i - body_k) / v + (sum_i extra_i - extra_k),    k = the slowest stage

the first micro-batch crosses every stage once, the other m - 1 follow at the slowest stage's pace; the
interleaved schedule crosses each stage's chunks in 1/v of the time (Narayanan et al. 2021: with equal
stages the bubble is (p - 1)/(m v) of the pipelined time).

**Send/recv**: activations forward and their gradients backward per chunk (Megatron's scatter-gather
optimisation sends 1/t of the activation per TP rank), ``pp_overlap`` hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.specs.model import ModelSpec
from clustertwin.train.gemm import BF16_BYTES
from clustertwin.train.layout import Layouts, as_float, ceil, fmax, where
from clustertwin.train.params import TrainParams

KERNELS_P2P = 4

#: stage classes of a plan
FIRST, MIDDLE, LAST = 0, 1, 2


@dataclass
class StagePlan:
    """Layers per stage class (first, each middle stage, last) of every layout, and micro-batches."""

    pp: object
    vpp: object
    first_layers: object
    middle_layers: object
    last_layers: object
    middle_stages: object
    """stages between the first and the last: max(p - 2, 0)"""
    microbatches: object
    """m = global batch / (micro-batch x dp)"""
    moe_share: float
    """fraction of the layers that are MoE"""

    @property
    def busiest_layers(self):
        """Layers on the stage that holds the most."""
        return fmax(fmax(self.first_layers, self.last_layers), where(self.middle_stages > 0, self.middle_layers, 0))

    def chunk_layers(self, stage: int):
        """Layers of one virtual chunk of a stage class."""
        return (self.first_layers, self.middle_layers, self.last_layers)[stage] / as_float(self.vpp)


def stage_plan(model: ModelSpec, lay: Layouts, global_batch: int) -> StagePlan:
    """The stage plan of every layout: ``ceil(L / p)`` layers per stage."""
    lps = ceil(model.layers / lay.pp)
    m = fmax(1, global_batch // (lay.mbs * lay.dp))
    return StagePlan(pp=lay.pp, vpp=lay.vpp, first_layers=lps, middle_layers=lps, last_layers=lps,
                     middle_stages=fmax(lay.pp - 2, 0), microbatches=m,
                     moe_share=model.n_moe_layers / model.layers)


def p2p_time(lay: Layouts, T, h: int, coll, pp_group, params: TrainParams):
    """Exposed send/recv seconds per micro-batch on a stage (all chunks) and their host dispatch."""
    has_pp = lay.pp > 1
    vpp = as_float(lay.vpp)
    nbytes = T * h * BF16_BYTES / as_float(lay.tp)
    comm = where(has_pp, 2 * vpp * coll("send_recv", nbytes, pp_group) * (1 - params.pp_overlap), 0.0)
    host = where(has_pp, 2 * vpp * KERNELS_P2P * params.kernel_host_overhead_s, 0.0)
    return comm, host


@dataclass
class PipelineTime:
    """Pipeline time of one step and which stage class is the slowest."""

    pipe_s: object
    bubble_s: object
    slowest: object
    """FIRST, MIDDLE or LAST"""


def select(k, first, middle, last):
    """Element-wise pick of a per-stage-class quantity for stage class ``k``."""
    return where(k == FIRST, first, where(k == MIDDLE, middle, last))


def pipeline_time(plan: StagePlan, body: tuple, extra_first, extra_last) -> PipelineTime:
    """The general formula of the module docstring over the three stage classes; ``body`` holds the
    per-micro-batch body seconds (first, middle, last). One stage (p = 1) holds both extras."""
    m = as_float(plan.microbatches)
    b_f, b_m, b_l = body
    t_f, t_m, t_l = b_f + extra_first, b_m, b_l + extra_last
    single = plan.pp == 1
    has_mid = plan.middle_stages > 0
    k = where(t_l > t_f, LAST, FIRST)
    t_k = fmax(t_f, t_l)
    k = where(has_mid & (t_m > t_k), MIDDLE, k)
    t_max = where(has_mid, fmax(t_k, t_m), t_k)
    sum_body = b_f + plan.middle_stages * b_m + b_l
    bubble = (sum_body - select(k, b_f, b_m, b_l)) / as_float(plan.vpp) + \
        (extra_first + extra_last - select(k, extra_first, 0.0, extra_last))
    t_one = b_f + extra_first + extra_last
    return PipelineTime(pipe_s=where(single, m * t_one, m * t_max + bubble), bubble_s=where(single, 0.0, bubble),
                        slowest=where(single, FIRST, k))
