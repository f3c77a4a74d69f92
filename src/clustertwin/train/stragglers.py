"""Stragglers: every step waits for the slowest of the GPUs that synchronise.

GPUs of one SKU do not run at one speed: Sinha et al. 2022 (SC22, "Not All GPUs Are Created Equal",
arXiv 2208.11035) measured an average performance variation of 8% (max 22%) across the GPUs of five
clusters, outliers up to 1.5x slower than the median. With per-GPU step time ``t (1 + sigma Z)``,
Z standard normal and independent across GPUs, the step ends when the slowest of the N GPUs that
synchronise at the data-parallel reduction (all of them) is done; the expected maximum of N normals is
about ``sqrt(2 ln N)`` standard deviations (extreme-value asymptotics), so

    stragglers = pipe x rank_jitter_cv x sqrt(2 ln N)

``rank_jitter_cv`` (``TrainParams``, 2.5%) lies in the spread that the 8% average / 22% maximum ranges
over the thousands of GPUs of those clusters imply (a range of about 2 sqrt(2 ln N) ~ 8 sigma for
N ~ 10^4: 1-2.8%). The pipelined time is
what the slowest GPU stretches; communication waits are already in their own terms.
"""

from __future__ import annotations

import math

import numpy as np

from clustertwin.train.layout import is_array
from clustertwin.train.params import TrainParams


def expected_max_sigmas(n):
    """``sqrt(2 ln n)``: the expected maximum of n standard normals, in standard deviations (0 for n <= 1)."""
    if is_array(n):
        return np.sqrt(2.0 * np.log(np.maximum(n, 1.0)))
    return math.sqrt(2.0 * math.log(n)) if n > 1 else 0.0


def straggler_time(pipe_s, gpus, params: TrainParams):
    """Seconds per step lost to waiting for the slowest of ``gpus`` GPUs."""
    return pipe_s * params.rank_jitter_cv * expected_max_sigmas(gpus)
