"""Data-parallel gradient reduction, ZeRO parameter gathers and how much of them the backward hides.

Per step, on the stage's local parameters (dense ones over the DP x CP group, experts over expert-DP):

* ZeRO 0: gradient all-reduce; ZeRO 1-2: gradient reduce-scatter + parameter all-gather (Megatron's
  distributed optimizer); ZeRO 3: the last micro-batch's gradient reduce-scatter (the earlier ones hide
  behind later micro-batches);
* exposed = ``max((1 - dp_overlap) t_dp, t_dp - backward of the stage's layers)`` (bucketed reduction
  during the last backward);
* ZeRO-3 (FSDP) gathers the weights for every micro-batch's forward and backward and reduce-scatters the
  gradients of all but the last: ``m 2 t_ag + (m - 1) t_rs``, prefetched behind the pipeline up to
  ``zero3_overlap``.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.train.layout import fmax, where
from clustertwin.train.params import TrainParams

#: bytes of gradient communicated per parameter (16-bit reduction)
GRAD_COMM_BYTES = 2
#: bytes of parameters gathered per parameter (16-bit)
PARAM_COMM_BYTES = 2


@dataclass
class DataParallelTime:
    """Exposed seconds per step of the DP reduction and of the ZeRO-3 gathers."""

    dp_s: object
    zero3_s: object


def data_parallel_time(dense_params, expert_params, zero, m, backward_s, pipe_s, coll, dp_group, edp_group,
                       params: TrainParams) -> DataParallelTime:
    """DP / ZeRO exposure of the module docstring; ``*_params`` are the stage's local parameters."""
    gb_d, gb_e = dense_params * GRAD_COMM_BYTES, expert_params * GRAD_COMM_BYTES
    t_ar = coll("all_reduce", gb_d, dp_group) + coll("all_reduce", gb_e, edp_group)
    t_rs = coll("reduce_scatter", gb_d, dp_group) + coll("reduce_scatter", gb_e, edp_group)
    t_ag = coll("all_gather", dense_params * PARAM_COMM_BYTES, dp_group) + \
        coll("all_gather", expert_params * PARAM_COMM_BYTES, edp_group)
    t_dp = where(zero == 0, t_ar, where(zero >= 3, t_rs, t_rs + t_ag))
    dp_exp = fmax((1 - params.dp_overlap) * t_dp, t_dp - backward_s)
    z3 = m * 2 * t_ag + (m - 1) * t_rs
    z3_exp = where(zero >= 3, fmax((1 - params.zero3_overlap) * z3, z3 - pipe_s), 0.0)
    return DataParallelTime(dp_exp, z3_exp)
