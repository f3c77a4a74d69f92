"""Sizing for a trace: the course's claim that inference fleets keep headroom for bursts and sit at low
GPU utilisation until continuous batching and FP8/INT8 raise it, reproduced on a bursty trace."""

from __future__ import annotations

import json

import pytest
from tests.conftest import TRACES

from clustertwin import catalog
from clustertwin.infer.sizing_trace import size_for_trace
from clustertwin.infer.synthetic import SyntheticSpec, generate

SLO = {"slo_ttft_ms": 2000.0, "slo_tpot_ms": 50.0, "attainment": 0.99}


@pytest.fixture(scope="module")
def bursty():
    """Peak-to-mean 4 in one-minute windows (Azure code 2023: 4.16)."""
    return generate(SyntheticSpec(kind="bursty", rate=40, duration_s=300, peak_to_mean=4, input_len=1024,
                                  output_len=128, length_cv=0.5, seed=3))


@pytest.fixture(scope="module")
def sized(bursty):
    m, nodes = catalog.get("model", "llama3-8b"), [catalog.get("node", "dgx-h100")]
    out = {}
    for batching, pr in (("static", "fp8"), ("continuous", "bf16"), ("continuous", "fp8"), ("continuous", "int8")):
        out[batching, pr] = size_for_trace(m, nodes, bursty, precisions=[pr], tps=[1], batching=batching,
                                           autoscale=False, **SLO)
    return out


def test_trace_is_bursty(bursty):
    assert 3.6 < bursty.peak_to_mean(60) < 4.6


def test_fleet_sized_for_the_mean_misses_the_ttft_slo(sized):
    for res in sized.values():
        assert res.fixed is not None and res.fixed.slo_attainment >= 0.99
        mean = res.mean_sized
        assert mean.replicas < res.fixed.replicas
        assert mean.slo_attainment < 0.9
        assert mean.metrics["p99_ttft_ms"] > 10 * SLO["slo_ttft_ms"]


def test_sized_fleet_keeps_headroom_and_low_busy_fraction(sized):
    res = sized["continuous", "fp8"]
    assert res.fixed.headroom > 2.5                       # provisioned ~ for the peak, not the mean
    assert res.fixed.metrics["gpu_busy_fraction"] < 0.35  # the GPUs mostly wait for the next burst
    assert res.fixed.metrics["gpu_busy_fraction"] < 0.5 * res.mean_sized.metrics["gpu_busy_fraction"]
    # while nvidia-smi's "utilisation" (time with a kernel running) stays high under continuous batching
    assert res.fixed.metrics["gpu_active_fraction"] > 0.8


def test_busy_fraction_rises_with_continuous_batching_and_quantisation(sized):
    busy = {k: v.fixed.metrics["gpu_busy_fraction"] for k, v in sized.items()}
    assert busy["static", "fp8"] < 0.5 * busy["continuous", "fp8"]
    assert busy["continuous", "bf16"] < busy["continuous", "fp8"]
    assert busy["continuous", "bf16"] < busy["continuous", "int8"]
    gpus = {k: v.fixed.gpus for k, v in sized.items()}
    assert gpus["continuous", "fp8"] < gpus["continuous", "bf16"] < gpus["static", "fp8"]


def test_autoscaled_policy_and_cli(cli):
    trace = TRACES / "llm-serving" / "azure_llm_code_sample.csv"
    r = cli("infer", "size", "--trace", str(trace), "--slo-ttft-ms", "3000", "--model",
            "llama3-70b", "--tp", "2", "--precision", "fp8", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["fixed"]["slo_attainment"] >= 0.99 and d["fixed"]["headroom"] > 1
    auto = d["autoscaled"]
    assert auto is not None and auto["policy"]["autoscale"] and auto["slo_attainment"] >= 0.99
    assert auto["policy"]["cold_start_s"] > 30
    assert d["mean_sized"]["replicas"] <= d["fixed"]["replicas"]
    r = cli("infer", "size", "--trace", str(trace), "--slo-ttft-ms", "3000", "--model",
            "llama3-70b", "--tp", "2", "--precision", "fp8", "--no-autoscale")
    assert r.code == 0 and "cheapest fixed" in r.stdout and "headroom" in r.stdout
