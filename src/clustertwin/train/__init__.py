"""LLM training performance model: FLOPs, memory, step time, layout search, scaling, time-to-train.

Entry points: :func:`estimate` (one layout), :func:`search` (ranked layouts), :func:`scale` (scaling
curve), :func:`time_to_train`; :func:`param_count` and :func:`checkpoint_bytes` for other layers.
Derivations and conventions: docs/train.md.
"""

from clustertwin.train.estimate import TrainEstimate, estimate
from clustertwin.train.flops import (
    flops_per_token,
    hardware_flops_per_step,
    model_flops_per_step,
    param_count,
)
from clustertwin.train.memory import MemoryResult, checkpoint_bytes, korthikanti_activation_bytes
from clustertwin.train.params import DEFAULT_PARAMS, TrainParams
from clustertwin.train.scale import ScaleResult, TimeToTrain, scale, time_to_train
from clustertwin.train.search import SearchResult, search

__all__ = [
    "DEFAULT_PARAMS",
    "MemoryResult",
    "ScaleResult",
    "SearchResult",
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
    "scale",
    "search",
    "time_to_train",
]
