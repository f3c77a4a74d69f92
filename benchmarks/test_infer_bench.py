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


# ---------------------------------------------------------------- issue 18: trace-driven fleet serving
FLEET_TRACE_TARGET_CPU_S = 5.0
SIZE_TRACE_TARGET_CPU_S = 10.0


def _fleet_hour():
    """One hour at 50 req/s (180k Poisson requests, lognormal lengths) on 2 replicas of Llama-3-8B FP8."""
    from clustertwin.infer import FleetPolicy, simulate_fleet
    from clustertwin.infer.synthetic import SyntheticSpec, generate

    dep = Deployment(catalog.get("model", "llama3-8b"), catalog.get("node", "dgx-h100"), tp=1, precision="fp8")
    tr = generate(SyntheticSpec(kind="poisson", rate=50, duration_s=3600, input_len=512, output_len=256,
                                length_cv=0.5, seed=7))
    return simulate_fleet(dep, tr, FleetPolicy(replicas=2), slo_ttft_ms=500, slo_tpot_ms=50)


def _size_trace(nodes):
    """``infer size --trace`` on 30 minutes of bursty traffic (10 req/s mean, peak-to-mean 4) for
    Llama-3-70B on one node type, TP 1/2/4/8 x BF16/FP8, fixed and autoscaled."""
    from clustertwin.infer.sizing_trace import size_for_trace
    from clustertwin.infer.synthetic import SyntheticSpec, generate

    tr = generate(SyntheticSpec(kind="bursty", rate=10, duration_s=1800, peak_to_mean=4, input_len=1024,
                                output_len=256, length_cv=0.5, seed=1))
    return size_for_trace(catalog.get("model", "llama3-70b"), nodes[:1], tr, slo_ttft_ms=1000, slo_tpot_ms=60,
                          attainment=0.99)


def _timed(fn, *args):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return out, wall, cpu


def test_one_hour_fleet_trace_at_50_rps_under_5s_cpu(benchmark):
    res = benchmark.pedantic(_fleet_hour, rounds=1, iterations=1)
    assert res.metrics["completed"] > 175_000
    assert res.metrics["request_throughput"] == pytest.approx(TRACE_RATE, rel=0.05)
    _, wall, cpu = _timed(_fleet_hour)
    print(f"1 h fleet trace at 50 req/s: wall {wall:.2f} s, CPU {cpu:.2f} s")
    assert cpu < FLEET_TRACE_TARGET_CPU_S, f"1-hour fleet trace took {cpu:.2f} s CPU"


def test_size_for_trace_under_10s_cpu(benchmark, nodes):
    res = benchmark.pedantic(_size_trace, args=(nodes,), rounds=1, iterations=1)
    assert res.fixed is not None and res.fixed.slo_attainment >= 0.99
    _, wall, cpu = _timed(_size_trace, nodes)
    print(f"infer size --trace (30 min bursty, 8 candidates): wall {wall:.2f} s, CPU {cpu:.2f} s, "
          f"{res.simulations} simulations")
    assert cpu < SIZE_TRACE_TARGET_CPU_S, f"infer size --trace took {cpu:.2f} s CPU"
