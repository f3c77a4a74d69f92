"""LLM training performance model: FLOPs, memory, step time, layout search, scaling, time-to-train.

Entry points: :func:`estimate` (one layout), :func:`search` (ranked layouts), :func:`scale` (scaling
curve), :func:`time_to_train`; :func:`resolve_parallelism` (layout defaults), :func:`resolve_stack` and
:data:`STACKS` (software stacks), the typed :class:`StepBreakdown` / :class:`MemoryBreakdown`;
:func:`param_count` and :func:`checkpoint_bytes` for other layers. Failure-adjusted time-to-train:
:func:`clustertwin.reliability.train_run.time_to_train_with_failures`.
Derivations and conventions: docs/train.md.
"""

from clustertwin.train.breakdown import BREAKDOWN_KEYS, MEMORY_TERMS, MemoryBreakdown, StepBreakdown
from clustertwin.train.estimate import TrainEstimate, estimate
from clustertwin.train.flops import (
    flops_per_token,
    hardware_flops_per_step,
    model_flops_per_step,
    param_count,
)
from clustertwin.train.memory import MemoryResult, checkpoint_bytes, korthikanti_activation_bytes
from clustertwin.train.params import DEFAULT_PARAMS, TrainParams
from clustertwin.train.resolve import resolve_parallelism
from clustertwin.train.scale import ScaleResult, TimeToTrain, scale, time_to_train
from clustertwin.train.search import SearchResult, search
from clustertwin.train.stack import STACKS, Stack, resolve_stack

__all__ = [
    "BREAKDOWN_KEYS",
    "DEFAULT_PARAMS",
    "MEMORY_TERMS",
    "STACKS",
    "MemoryBreakdown",
    "MemoryResult",
    "ScaleResult",
    "SearchResult",
    "Stack",
    "StepBreakdown",
    "TimeToTrain",
    "TrainEstimate",
    "TrainParams",
    "checkpoint_bytes",
    "estimate",
    "flops_per_token",
    "hardware_flops_per_step",
    "korthikanti_activation_bytes",
    "model_flops_per_step",
    "param_count",
    "resolve_parallelism",
    "resolve_stack",
    "scale",
    "search",
    "time_to_train",
]
