"""Performance targets (issue 4): one training estimate <= 1 ms median; the full layout search for
Llama-3-405B on 16,384 H100 GPUs with a global batch of 2,048 sequences of 8,192 tokens <= 5 s on one core."""

from __future__ import annotations

import statistics
import time

import pytest

from clustertwin import catalog, specs
from clustertwin.train import estimate, search

ESTIMATE_TARGET_S = 1e-3
SEARCH_TARGET_S = 5.0


@pytest.fixture(scope="module")
def setup():
    model = catalog.get("model", "llama3-405b")
    big = specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 2048})
    ref = catalog.get("cluster", "ref-1k-h100")
    par = specs.ParallelismSpec(tp=8, pp=16, dp=8, vpp=1, micro_batch=1, global_batch=2048,
                                sequence_parallel=True, recompute="selective", zero=1)
    estimate(model, ref, par)  # warm the collective-model cache
    return model, big, ref, par


def test_one_estimate_under_1ms(benchmark, setup):
    model, _, ref, par = setup
    e = benchmark(estimate, model, ref, par)
    assert e.step_time_s > 0
    times = []
    for _ in range(200):
        t = time.perf_counter()
        estimate(model, ref, par)
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(f"\none estimate: median {med * 1e3:.3f} ms")
    assert med <= ESTIMATE_TARGET_S


def test_full_search_405b_16k_gpus_under_5s(benchmark, setup):
    model, big, _, _ = setup
    res = benchmark.pedantic(search, args=(model, big), kwargs={"global_batch": 2048}, rounds=1, iterations=1)
    assert res.best is not None and res.best.gpus == 16384
    t = time.perf_counter()
    res = search(model, big, global_batch=2048)
    elapsed = time.perf_counter() - t
    print(f"\nsearch: {res.evaluated:,} layouts ({res.valid:,} valid, {res.fitting:,} fit) in {elapsed:.2f} s; "
          f"best {res.best.layout} MFU {res.best.mfu:.3f}")
    assert elapsed <= SEARCH_TARGET_S
