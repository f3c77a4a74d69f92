"""Pipeline stages as data (:class:`StagePlan`) and the pipeline time of a step.

**Stage plan**: the layers of each pipeline stage (first, the ``p - 2`` middle ones, last) and of its
``v`` virtual chunks; the first stage holds the embedding, the last the output layer and loss. Step time
(per-stage compute, DP reduction) and memory (per-stage weights and activations) both read it.

* explicit (Megatron ``--decoder-first/last-pipeline-num-layers``): the first and/or last stage hold the
  given layers, the other stages share the rest evenly (it must divide, and with v chunks every stage's
  layers must divide by v);
* a Megatron layout string (``parallelism.pipeline_layout``, :mod:`layout_string`): the layers it puts
  on each stage;
* balanced (default): ``S = L + e + l`` slots (``e``/``l`` = 1 when the embedding / the loss count as a
  slot: ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``) over the
  ``p v`` chunks, chunk ``j`` (on stage ``j mod p``) taking ``floor(S / p v)`` and the first
  ``S mod p v`` chunks one more (what a Megatron ``--pipeline-model-parallel-layout`` string writes for an
  uneven model). Llama 3 405B (126 layers) on 16 stages with both slots: 7 layers on the first and the
  last stage, 8 on the others (Llama Team 2024, section 3.3.2).

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
from clustertwin.train.layout import LAYOUT_FIELDS, Layouts, as_float, ceil, fmax, fmin, where
from clustertwin.train.params import TrainParams
from clustertwin.train.spec_keys import spec_key

KERNELS_P2P = 4

#: stage classes of a plan
FIRST, MIDDLE, LAST = 0, 1, 2

_PLAN_CACHE: dict[tuple, StagePlan] = {}
_PLAN_CACHE_LIMIT = 4096


@dataclass
class StagePlan:
    """Layers per stage class (first, the busiest middle stage, last) of every layout, and micro-batches."""

    pp: object
    vpp: object
    first_layers: object
    middle_layers: object
    """layers of the busiest middle stage (the second stage)"""
    last_layers: object
    middle_total_layers: object
    """layers of all middle stages together"""
    middle_stages: object
    """stages between the first and the last: max(p - 2, 0)"""
    microbatches: object
    """m = global batch / (micro-batch x dp)"""
    moe_share: float
    """fraction of the layers that are MoE"""
    valid: object
    """the plan can be built (every chunk holds a slot, explicit splits divide)"""

    @property
    def busiest_layers(self):
        """Layers on the stage that holds the most."""
        return fmax(fmax(self.first_layers, self.last_layers), where(self.middle_stages > 0, self.middle_layers, 0))


def _chunks_below(r, stage, p, v):
    """Chunks ``stage + k p`` (k < v) of a stage that lie below chunk index ``r``."""
    return fmin(fmax(ceil((r - stage) / as_float(p)), 0.0), as_float(v))


def stage_plan(model: ModelSpec, lay: Layouts, global_batch: int) -> StagePlan:
    """The stage plan of every layout (module docstring). One scalar layout's plan is cached by the model
    object, the layout's values and the batch (the layout rules and the step model both read it; a plan is
    only read, never changed)."""
    if not lay.is_scalar:
        return _plan(model, lay, global_batch)
    key = (spec_key(model), global_batch, *(getattr(lay, f) for f in LAYOUT_FIELDS))
    hit = _PLAN_CACHE.get(key)
    if hit is None:
        if len(_PLAN_CACHE) >= _PLAN_CACHE_LIMIT:
            _PLAN_CACHE.clear()
        hit = _PLAN_CACHE[key] = _plan(model, lay, global_batch)
    return hit


def _plan(model: ModelSpec, lay: Layouts, global_batch: int) -> StagePlan:
    L, p, v = model.layers, lay.pp, lay.vpp
    pf = as_float(p)
    m = fmax(1, global_batch // (lay.mbs * lay.dp))
    # balanced split of S slots over p v chunks
    slots = L + lay.emb_split + lay.loss_split
    chunks = p * v
    q, r = slots // chunks, slots % chunks
    b_first = v * q + _chunks_below(r, 0, p, v) - lay.emb_split
    b_mid = v * q + _chunks_below(r, 1, p, v)
    b_last = v * q + _chunks_below(r, p - 1, p, v) - lay.loss_split
    b_ok = (q >= 1) & (b_first >= 0) & (b_last >= 0)
    # explicit first/last stage layers; the rest split evenly
    has_f, has_l = lay.first > 0, lay.last > 0
    n_rest = p - where(has_f, 1, 0) - where(has_l, 1, 0)
    rest = L - lay.first - lay.last
    each = rest / fmax(as_float(n_rest), 1.0)
    e_first = where(has_f, lay.first, each)
    e_last = where(has_l, lay.last, each)
    e_ok = (p > 1) & (n_rest >= 0) & (rest >= 0) & where(n_rest > 0, (rest % fmax(n_rest, 1) == 0) & (each >= 1),
                                                         rest == 0)
    e_ok = e_ok & ((v == 1) | ((e_first % v == 0) & (e_last % v == 0) & (each % v == 0)))
    explicit = has_f | has_l
    single = p == 1
    s_str = lay.from_string > 0  # a parsed layout string (checked when parsed)
    first = where(single, float(L), where(s_str, lay.first, where(explicit, e_first, b_first)))
    last = where(single, float(L), where(s_str, lay.last, where(explicit, e_last, b_last)))
    middle = where(s_str, lay.mid, where(explicit, each, b_mid))
    ok = where(s_str, True, where(explicit, e_ok, b_ok))
    return StagePlan(pp=p, vpp=v, first_layers=first, middle_layers=middle, last_layers=last,
                     middle_total_layers=where(single, 0.0, L - first - last), middle_stages=fmax(p - 2, 0),
                     microbatches=m, moe_share=model.n_moe_layers / model.layers,
                     valid=where(single, slots - lay.emb_split - lay.loss_split >= 1, ok) & (pf >= 1))


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


def pipeline_time(plan: StagePlan, layer_s, p2p_s, extra_first, extra_last, paired=False) -> PipelineTime:
    """The general formula of the module docstring over the stage plan: a stage's body is its layers x
    ``layer_s`` + ``p2p_s`` per micro-batch; the first stage adds ``extra_first``, the last
    ``extra_last``. One stage (p = 1) holds both extras. ``paired`` (DualPipe, where rank r runs stage r and
    stage p - 1 - r for the two directions' micro-batches, DeepSeek-AI 2024 section 3.2.1): the first and
    last stages share a rank, whose micro-batch costs their mean (the deepest layers and the output head sit
    with the embedding and the shallowest ones)."""
    m = as_float(plan.microbatches)
    b_f = plan.first_layers * layer_s + p2p_s
    b_m = plan.middle_layers * layer_s + p2p_s
    b_l = plan.last_layers * layer_s + p2p_s
    t_f, t_m, t_l = b_f + extra_first, b_m, b_l + extra_last
    pair = 0.5 * (t_f + t_l)
    t_f, t_l = where(paired, pair, t_f), where(paired, pair, t_l)
    single = plan.pp == 1
    has_mid = plan.middle_stages > 0
    k = where(t_l > t_f, LAST, FIRST)
    t_k = fmax(t_f, t_l)
    k = where(has_mid & (t_m > t_k), MIDDLE, k)
    t_max = where(has_mid, fmax(t_k, t_m), t_k)
    sum_body = b_f + b_l + plan.middle_total_layers * layer_s + plan.middle_stages * p2p_s
    bubble = (sum_body - select(k, b_f, b_m, b_l)) / as_float(plan.vpp) + \
        (extra_first + extra_last - select(k, extra_first, 0.0, extra_last))
    t_one = plan.first_layers * layer_s + extra_first + extra_last
    return PipelineTime(pipe_s=where(single, m * t_one, m * t_max + bubble), bubble_s=where(single, 0.0, bubble),
                        slowest=where(single, FIRST, k))
