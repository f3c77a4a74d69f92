"""The typed result of the step model: :class:`StepResult`, what :func:`~clustertwin.train.step.evaluate_layouts`
returns for a batch of layouts (floats for one scalar layout, numpy arrays for a batch).

The step's breakdown (:class:`~clustertwin.train.breakdown.StepBreakdown`) and memory
(:class:`~clustertwin.train.breakdown.MemoryBreakdown`) stay typed from the model to the estimate, the search
and the sweep; nothing takes result keys apart by prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

import numpy as np

from clustertwin.train.breakdown import MemoryBreakdown, StepBreakdown


@dataclass
class StageLayers:
    """Layers of the first, the busiest middle and the last pipeline stage (:mod:`~clustertwin.train.pipeline`)."""

    first: Any
    middle: Any
    last: Any


@dataclass
class StageTimes:
    """Seconds of one micro-batch as the step model composes them (what ``train estimate --timeline`` and
    ``export chakra`` lay out): per layer (share-weighted over dense and MoE layers) unless noted.
    ``layer_s = layer_compute_s + layer_tp_s + layer_cp_s + layer_ep_s + layer_host_s``."""

    microbatches: Any
    passes: Any
    """forward + backward + recomputed forward passes (:class:`~clustertwin.train.recompute.Recompute`)"""
    layer_s: Any
    layer_forward_s: Any
    """forward kernels of the layer (the rest of ``layer_compute_s`` is backward and recompute)"""
    layer_compute_s: Any
    layer_tp_s: Any
    layer_cp_s: Any
    layer_ep_s: Any
    layer_host_s: Any
    """GPU idle behind the host (launch-bound) and the MoE host sync"""
    p2p_comm_s: Any
    """exposed send/recv of a micro-batch on a stage, all chunks, both directions"""
    p2p_host_s: Any
    embedding_s: Any
    logits_s: Any
    pipe_s: Any
    """the pipeline term of the step (:func:`~clustertwin.train.pipeline.pipeline_time`)"""


@dataclass
class StepResult:
    """Step time, throughput, FLOPs, breakdown, stage plan and memory of every layout of a batch."""

    step_time_s: Any
    tokens_per_s: Any
    mfu: Any
    """model FLOPs / (step x GPUs x peak)"""
    hfu: Any
    """hardware FLOPs (with recomputation) / (step x GPUs x peak)"""
    model_tflops_per_gpu: Any
    hardware_tflops_per_gpu: Any
    model_flops_per_step: Any
    hardware_flops_per_step: Any
    breakdown: StepBreakdown
    """seconds per step by term; they add up to ``step_time_s``"""
    stages: StageLayers
    memory: MemoryBreakdown | None = None
    """bytes per GPU by term on the busiest stage (None when memory was not asked for)"""
    memory_total_bytes: Any = None
    fits: Any = None
    """``memory_total_bytes <= HBM``"""
    schedule: StageTimes | None = None
    """per-micro-batch times behind the pipeline term"""

    @staticmethod
    def stack(rows: list[StepResult]) -> StepResult:
        """One batch result from per-layout results (every field becomes an array over ``rows``)."""
        return _stack(rows)  # type: ignore[return-value]

    def with_fits(self, hbm_bytes: float) -> StepResult:
        """This result with ``memory_total_bytes`` and ``fits`` filled from ``memory``."""
        if self.memory is None:
            return self
        total = self.memory.total()
        return replace(self, memory_total_bytes=total, fits=total <= hbm_bytes)


def _stack(rows: list[Any]) -> Any:
    first = rows[0]
    if first is None:
        return None
    if is_dataclass(first) and not isinstance(first, type):
        return type(first)(**{f.name: _stack([getattr(r, f.name) for r in rows]) for f in fields(first)})
    return np.array(rows)
