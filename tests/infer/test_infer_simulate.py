"""Continuous-batching simulation: consistency with the analytical steady state, load behaviour,
chunked prefill, disaggregation."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin import catalog
from clustertwin.infer import Deployment, Workload, simulate, steady_state


@pytest.fixture(scope="module")
def dep():
    return Deployment(catalog.get("model", "llama3-8b"), catalog.get("node", "dgx-h100"), tp=1, precision="fp8")


def test_underloaded_throughput_equals_offered_rate(dep):
    r = simulate(dep, Workload(512, 128, request_rate=5.0, num_requests=1000, seed=3))
    # throughput over the whole run (drain included) matches the offered load
    assert r.request_throughput_per_s == pytest.approx(5.0, rel=0.1)
    assert r.ttft_ms["p99"] >= r.ttft_ms["p50"] > 0
    assert r.gpu_busy_fraction < 1


def test_simulated_tpot_matches_steady_state(dep):
    lam, isl, osl = 40.0, 512, 256
    r = simulate(dep, Workload(isl, osl, request_rate=lam, num_requests=3000, seed=1))
    ss = steady_state(dep.step_model(), isl, osl, np.array([r.mean_batch]))
    assert r.tpot_ms["mean"] == pytest.approx(float(ss["iteration_s"][0]) * 1e3, rel=0.15)


def test_latency_grows_with_load_and_saturates(dep):
    rates = [5.0, 40.0, 400.0]
    res = [simulate(dep, Workload(512, 256, request_rate=q, num_requests=1500, seed=2)) for q in rates]
    assert res[0].tpot_ms["mean"] < res[1].tpot_ms["mean"] < res[2].tpot_ms["mean"]
    assert res[2].ttft_ms["mean"] > 10 * res[1].ttft_ms["mean"]  # beyond capacity the queue builds
    assert res[2].request_throughput_per_s < 400.0


def test_closed_loop_concurrency_bounds_batch(dep):
    r = simulate(dep, Workload(256, 128, num_requests=200, concurrency=16), warmup=16)
    assert r.max_batch <= 16
    assert r.mean_batch > 8


def test_chunked_prefill_protects_decode_from_long_prompts(dep):
    wl = Workload(6000, 64, request_rate=3.0, num_requests=300, seed=4)
    chunked = simulate(dep, wl, chunked_prefill=True, max_batch_tokens=1024)
    whole = simulate(dep, wl, chunked_prefill=False, max_batch_tokens=1024)
    # whole-prompt iterations stall every decoding sequence for a full 6k-token prefill
    assert chunked.tpot_ms["p99"] < whole.tpot_ms["p99"]


def test_disaggregated_serving_removes_prefill_interference(dep):
    wl = Workload(2048, 256, request_rate=8.0, num_requests=600, seed=5)
    agg = simulate(dep, wl)
    dis = simulate(dep, wl, disaggregated=True)
    assert dis.tpot_ms["mean"] < agg.tpot_ms["mean"]
    assert dis.breakdown["kv_transfer_ms_mean"] > 0
    assert dis.requests > 0.9 * 600


def test_length_distribution_is_used(dep):
    arr, isl, _osl = Workload(512, 128, request_rate=10, num_requests=2000, length_cv=0.5, seed=0).sample()
    assert isl.mean() == pytest.approx(512, rel=0.05)
    assert isl.std() / isl.mean() == pytest.approx(0.5, rel=0.15)
    assert np.all(np.diff(arr) >= 0)
