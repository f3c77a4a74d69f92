"""Data-parallel gradient reduction, ZeRO parameter gathers and how much of them compute hides.

Per step, on the stage's local parameters (dense ones over the DP x CP group, experts over expert-DP):
ZeRO 0 all-reduces the gradients; ZeRO 1-2 (Megatron's distributed optimizer) reduce-scatters them and
all-gathers the updated parameters; ZeRO 3 reduce-scatters the last micro-batch's gradients. Stacks
that keep FP8 weights (``Stack.fp8_param_gather``: Transformer Engine ``fp8_model_init`` with Megatron's
``--fp8-param-gather``) gather 1 byte per parameter in FP8 training instead of 2.

**Bucket schedule** (Megatron-Core ``--overlap-grad-reduce``): the gradients are reduced in ``n`` buckets
of ``max(40M, 1M x dp)`` parameters (Megatron-Core's default bucket size), each launched when the last
micro-batch's backward has produced it; with the backward of the stage's layers taking ``W`` and one
bucket's collective ``t_b`` (the collective model at the bucket's size), bucket ``i`` is ready at
``(i + 1) W / n`` and the collectives run one after another, so after the backward

    exposed = max(t_b, n t_b - W (1 - 1/n))

(only the last bucket when the network keeps up). ``--overlap-param-gather`` hides the parameter
all-gather the same way behind the next step's first forward (window: the forward of the stage's
layers). A stack without the overlap exposes the whole collective. Hidden is not free: the collective's
NCCL kernels occupy SMs (one per channel, up to 32 channels: about a quarter of an H100's 132 SMs) and
HBM bandwidth while the GEMMs run, so each hidden second costs ``overlap_interference`` seconds of
slower compute.

**ZeRO-3 (FSDP)** gathers the weights for every micro-batch's forward and backward and reduce-scatters
the gradients of all but the last: ``m 2 t_ag + (m - 1) t_rs``, prefetched behind the pipeline up to
``zero3_overlap``.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.train.layout import Layouts, as_float, ceil, fmax, where
from clustertwin.train.memory import stage_params
from clustertwin.train.params import TrainParams
from clustertwin.train.pipeline import FIRST, LAST, MIDDLE, StagePlan, select

#: bytes of gradient communicated per parameter (16-bit reduction)
GRAD_COMM_BYTES = 2
#: bytes of parameters gathered per parameter (16-bit)
PARAM_COMM_BYTES = 2
#: Megatron-Core DDP bucket size: max(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP_RANK x dp) parameters
BUCKET_MIN_PARAMS = 40e6
BUCKET_PARAMS_PER_DP_RANK = 1e6


@dataclass
class DataParallelTime:
    """Exposed seconds per step of the DP reduction and of the ZeRO-3 gathers."""

    dp_s: object
    zero3_s: object


def bucket_exposed(n_buckets, one_bucket_s, window_s, overlapped: bool):
    """Exposed seconds of ``n_buckets`` collectives of ``one_bucket_s`` each, the i-th launched at
    ``(i + 1) window / n`` (module docstring); all of it when not ``overlapped``."""
    total = n_buckets * one_bucket_s
    if not overlapped:
        return total
    return fmax(one_bucket_s, total - window_s * (1.0 - 1.0 / n_buckets))


def with_interference(exposed, total, params: TrainParams):
    """Exposed seconds plus the compute slowdown of the hidden part (``overlap_interference``)."""
    return exposed + params.overlap_interference * fmax(total - exposed, 0.0)


def _buckets(local_params, dp_size):
    size = fmax(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP_RANK * as_float(dp_size))
    return fmax(ceil(local_params / size), 1.0)


def largest_stage(pc, plan: StagePlan, lay: Layouts):
    """Local dense and expert parameters and layers of the stage plan's stage with the most parameters
    (first: + embedding, last: + output layer; one stage: both): its reduction finishes last."""
    t, ep = as_float(lay.tp), as_float(lay.ep)
    d_f, e_f = stage_params(pc, plan, plan.first_layers, t, ep)
    d_m, e_m = stage_params(pc, plan, plan.middle_layers, t, ep)
    d_l, e_l = stage_params(pc, plan, plan.last_layers, t, ep)
    d_f = d_f + where(lay.pp == 1, pc.embedding + pc.output, pc.embedding) / t
    d_l = d_l + pc.output / t
    n_f, n_m, n_l = d_f + e_f, where(plan.middle_stages > 0, d_m + e_m, 0.0), d_l + e_l
    k = where(lay.pp == 1, FIRST, where((n_m > n_f) & (n_m > n_l), MIDDLE, where(n_l > n_f, LAST, FIRST)))
    return select(k, d_f, d_m, d_l), select(k, e_f, e_m, e_l), select(k, plan.first_layers, plan.middle_layers,
                                                                       plan.last_layers)


def data_parallel_time(dense_params, expert_params, zero, m, backward_s, forward_s, pipe_s, coll, dp_group,
                       edp_group, params: TrainParams, overlap_grad: bool,
                       overlap_param: bool, value_bytes: int = GRAD_COMM_BYTES,
                       param_bytes: int | None = None) -> DataParallelTime:
    """DP / ZeRO exposure of the module docstring; ``*_params`` are the stage's local parameters,
    ``backward_s`` / ``forward_s`` one micro-batch's backward / forward of the stage's layers;
    ``value_bytes`` per communicated gradient/parameter (2 = 16-bit, 4 in FP32/TF32 training);
    ``param_bytes`` per gathered parameter when it differs (1 with FP8 parameter gather)."""
    dp_s = 0.0
    t_ag_all = 0.0
    t_rs_all = 0.0
    for n_params, group in ((dense_params, dp_group), (expert_params, edp_group)):
        n = _buckets(n_params, group.size)
        g_bytes = n_params * GRAD_COMM_BYTES * value_bytes / 2 / n
        p_bytes = n_params * (param_bytes or PARAM_COMM_BYTES * value_bytes / 2) / n
        ar = coll("all_reduce", g_bytes, group)
        rs = coll("reduce_scatter", g_bytes, group)
        ag = coll("all_gather", p_bytes, group)
        red = where(zero == 0, ar, rs)
        grad = with_interference(bucket_exposed(n, red, backward_s, overlap_grad), n * red, params)
        gather = where((zero >= 1) & (zero < 3),
                       with_interference(bucket_exposed(n, ag, forward_s, overlap_param), n * ag, params), 0.0)
        dp_s = dp_s + grad + gather
        t_ag_all = t_ag_all + n * ag
        t_rs_all = t_rs_all + n * rs
    z3 = m * 2 * t_ag_all + (m - 1) * t_rs_all
    z3_exp = where(zero >= 3, fmax((1 - params.zero3_overlap) * z3, z3 - pipe_s), 0.0)
    return DataParallelTime(dp_s, z3_exp)
