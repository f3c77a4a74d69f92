"""Collective communication cost models (NCCL-style): all_reduce, all_gather, reduce_scatter, all_to_all,
broadcast, reduce and send/recv over a GPU group placed on a cluster. See docs/comm.md."""

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
    "Links",
    "Placement",
    "busbw_factor",
    "collective",
    "links",
    "nodes_placement",
]
