"""Typed results of the step-time and memory models: one named field per term.

Everything that lists the terms is generated from these dataclasses: the ``bd_*`` / ``mem_*`` keys of
:func:`clustertwin.train.step.evaluate_layouts`, :data:`BREAKDOWN_KEYS`, :data:`MEMORY_TERMS`, the JSON
``breakdown`` of a :class:`~clustertwin.train.estimate.TrainEstimate`, the CLI tables and the loss
attribution of ``train scale`` (each step term names its ``group``). A new term is one new field.

Fields hold floats (one layout) or numpy arrays (a batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

#: the groups ``train scale`` attributes the step to (the step terms' ``group`` metadata)
COMPUTE, COMM, BUBBLE, STRAGGLERS, DATA = "compute", "communication", "bubble", "stragglers", "data"
STEP_GROUPS = (COMPUTE, COMM, BUBBLE, STRAGGLERS, DATA)


def _meta(group: str, doc: str) -> dict[str, str]:
    return {"group": group, "doc": doc}


@dataclass
class StepBreakdown:
    """Seconds per optimizer step by term; the terms add up to the step time."""

    compute: Any = field(default=0.0, metadata=_meta(COMPUTE, "GEMMs, attention, element-wise kernels and end blocks of the slowest stage"))
    host_overhead: Any = field(default=0.0, metadata=_meta(COMPUTE, "GPU idle while the host dispatches kernels"))
    tp_comm: Any = field(default=0.0, metadata=_meta(COMM, "exposed tensor-parallel collectives"))
    cp_comm: Any = field(default=0.0, metadata=_meta(COMM, "exposed context-parallel KV exchange"))
    ep_comm: Any = field(default=0.0, metadata=_meta(COMM, "exposed MoE dispatch/combine all-to-all"))
    pp_comm: Any = field(default=0.0, metadata=_meta(COMM, "exposed pipeline send/recv"))
    bubble: Any = field(default=0.0, metadata=_meta(BUBBLE, "pipeline fill and drain"))
    stragglers: Any = field(default=0.0, metadata=_meta(STRAGGLERS, "waiting for the slowest GPU at the step's synchronisation"))
    dp_comm: Any = field(default=0.0, metadata=_meta(COMM, "exposed data-parallel gradient reduction / parameter gather"))
    zero3_gather: Any = field(default=0.0, metadata=_meta(COMM, "exposed ZeRO-3 per-micro-batch parameter gathers"))
    optimizer: Any = field(default=0.0, metadata=_meta(COMPUTE, "optimizer step (HBM-bound)"))
    data_stall: Any = field(default=0.0, metadata=_meta(DATA, "GPUs waiting for the data path (storage to host) after prefetch overlap"))

    def total(self) -> Any:
        """Sum of the terms (the step time)."""
        out: Any = 0.0
        for name in BREAKDOWN_KEYS:
            out = out + getattr(self, name)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in BREAKDOWN_KEYS}


@dataclass
class MemoryBreakdown:
    """Bytes per GPU by term on the busiest pipeline stage; ``total`` is their sum."""

    weights: Any = field(default=0.0, metadata={"doc": "16-bit weights (and FP8 copies, ZeRO-3 gathers)"})
    gradients: Any = field(default=0.0, metadata={"doc": "fp32 main gradients"})
    optimizer: Any = field(default=0.0, metadata={"doc": "fp32 master weights and Adam moments"})
    activations: Any = field(default=0.0, metadata={"doc": "saved activations of the micro-batches in flight"})
    logits: Any = field(default=0.0, metadata={"doc": "output-layer logits and loss buffers"})
    reserved: Any = field(default=0.0, metadata={"doc": "CUDA context, NCCL buffers, workspaces"})
    fragmentation: Any = field(default=0.0, metadata={"doc": "caching-allocator fragmentation"})

    def total(self) -> Any:
        out: Any = 0.0
        for name in MEMORY_TERMS:
            out = out + getattr(self, name)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in MEMORY_TERMS}


BREAKDOWN_KEYS: tuple[str, ...] = tuple(f.name for f in fields(StepBreakdown))
MEMORY_TERMS: tuple[str, ...] = tuple(f.name for f in fields(MemoryBreakdown))
#: step term -> its group
TERM_GROUP: dict[str, str] = {f.name: f.metadata["group"] for f in fields(StepBreakdown)}
#: step term -> one-line description
TERM_DOC: dict[str, str] = {f.name: f.metadata["doc"] for f in fields(StepBreakdown)}


def group_fractions(breakdown: dict[str, float], step_time_s: float) -> dict[str, float]:
    """Share of the step by :data:`STEP_GROUPS` (sums to 1 when the terms add up to the step)."""
    out = dict.fromkeys(STEP_GROUPS, 0.0)
    for name, v in breakdown.items():
        out[TERM_GROUP[name]] += v / step_time_s
    return out
