"""Stragglers: the step waits for the slowest of the ranks that synchronise.

Empirical log-law: the pipelined time grows by ``straggler_per_doubling`` per doubling of the node
count (0.8% per doubling, ~6% at 128 nodes)."""

from __future__ import annotations

from clustertwin.train.layout import fmax, log2
from clustertwin.train.params import TrainParams


def straggler_time(pipe_s, nodes, params: TrainParams):
    """Seconds per step lost to stragglers."""
    return pipe_s * params.straggler_per_doubling * log2(fmax(nodes, 1.0))
