"""Performance target (issues 3, 16): 1,000 (op, size, group) collective evaluations in under 20 ms of CPU time,
vectorised over message sizes: 7 ops x 4 group sizes x 36 sizes = 1,008 evaluations per round."""

from __future__ import annotations

import time

import numpy as np
import pytest

from clustertwin import specs
from clustertwin.comm import OPS, collective

SIZES = 2.0 ** np.arange(0, 36)  # 1 B .. 32 GiB
GROUPS = (8, 64, 512, 1024)
TARGET_S = 0.020
EVALUATIONS = len(OPS) * len(GROUPS) * len(SIZES)


@pytest.fixture(scope="module")
def ref_cluster() -> specs.ClusterSpec:
    c = specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")
    collective(c, "all_reduce", SIZES, 1024)  # warm the topology cache
    return c


def sweep(cluster: specs.ClusterSpec) -> int:
    n = 0
    for op in OPS:
        for gpus in GROUPS:
            n += collective(cluster, op, SIZES, gpus).time_s.size
    return n


def test_thousand_evaluations_under_20ms(benchmark, ref_cluster):
    assert EVALUATIONS >= 1000
    count = benchmark(sweep, ref_cluster)
    assert count == EVALUATIONS
    best = min(_timed(ref_cluster) for _ in range(5))
    assert best < TARGET_S, f"{EVALUATIONS} evaluations took {best * 1e3:.1f} ms"


def _timed(cluster: specs.ClusterSpec) -> float:
    w0, c0 = time.perf_counter(), time.process_time()
    sweep(cluster)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(f"{EVALUATIONS} evaluations: wall {wall * 1e3:.1f} ms, CPU {cpu * 1e3:.1f} ms")
    return cpu
