"""Collective communication cost models (NCCL-style): all_reduce, all_gather, reduce_scatter, all_to_all,
broadcast, reduce and send/recv over a GPU group placed on a cluster, plus DeepEP's expert-parallel
all_to_all. Modules by mechanism: links (bandwidths), latency (physical steps), algorithms (NCCL's
candidates), hierarchical (chunked phase composition), alltoall (NCCL pairwise and DeepEP), model
(choice and timing), nccl_tests (log reader and fit). See docs/comm.md."""

from clustertwin.comm.expert_a2a import ExpertAllToAll, expert_all_to_all
from clustertwin.comm.model import (
    ALGORITHMS,
    OPS,
    PROTOCOLS,
    Candidate,
    CollectiveResult,
    Links,
    busbw_factor,
    collective,
    links,
)
from clustertwin.comm.params import DEFAULT_PARAMS, CommParams
from clustertwin.comm.placement import Placement, nodes_placement
from clustertwin.specs.calibration import Calibration

__all__ = [
    "ALGORITHMS",
    "DEFAULT_PARAMS",
    "OPS",
    "PROTOCOLS",
    "Calibration",
    "Candidate",
    "CollectiveResult",
    "CommParams",
    "ExpertAllToAll",
    "Links",
    "Placement",
    "busbw_factor",
    "collective",
    "expert_all_to_all",
    "links",
    "nodes_placement",
]
