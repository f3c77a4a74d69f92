"""Performance targets (issue 8): an ``infer size`` search (3 node types x TP 1/2/4/8 x 2 precisions,
every KV-feasible batch size, plus the simulated check of the winner) in under 2 s, and a 10-minute
simulated serving trace at 50 req/s (30,000 Poisson requests, lognormal lengths) in under 5 s."""

from __future__ import annotations

import time

import pytest

from clustertwin import catalog
from clustertwin.infer import Deployment, Workload, simulate, size

SIZE_TARGET_S = 2.0
TRACE_TARGET_S = 5.0
TRACE_RATE = 50.0
TRACE_SECONDS = 600.0


@pytest.fixture(scope="module")
def nodes():
    return [catalog.get("node", n) for n in ("dgx-h100", "dgx-h200", "dgx-a100-80gb")]


def _size(nodes):
    return size(catalog.get("model", "llama3-70b"), nodes, qps=50, input_len=1024, output_len=256,
                slo_ttft_ms=1000, slo_tpot_ms=50)


def _trace():
    dep = Deployment(catalog.get("model", "llama3-8b"), catalog.get("node", "dgx-h100"), tp=1, precision="fp8")
    wl = Workload(512, 256, request_rate=TRACE_RATE, num_requests=int(TRACE_RATE * TRACE_SECONDS),
                  length_cv=0.5, seed=7)
    return simulate(dep, wl)


def test_size_search_under_2s(benchmark, nodes):
    res = benchmark.pedantic(_size, args=(nodes,), rounds=3, iterations=1)
    assert res.best is not None and len(res.candidates) == 3 * 4 * 2
    t0 = time.perf_counter()
    _size(nodes)
    elapsed = time.perf_counter() - t0
    assert elapsed < SIZE_TARGET_S, f"infer size took {elapsed:.2f} s"


def test_ten_minute_trace_at_50_rps_under_5s(benchmark):
    res = benchmark.pedantic(_trace, rounds=2, iterations=1)
    assert res.requests == int(TRACE_RATE * TRACE_SECONDS)
    assert res.duration_s >= 0.95 * TRACE_SECONDS
    assert res.request_throughput_per_s == pytest.approx(TRACE_RATE, rel=0.1)
    t0 = time.perf_counter()
    _trace()
    elapsed = time.perf_counter() - t0
    assert elapsed < TRACE_TARGET_S, f"10-minute trace took {elapsed:.2f} s"
