"""Failure model: calibration on the Llama 3 counts, scaling with job size, rate overrides, and the
54-day 16,384-GPU snapshot reproduced by the Monte Carlo."""

from __future__ import annotations

import math

import pytest

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.reliability import FailureModel, estimate, job_failure_rates
from clustertwin.reliability.failures import (
    COMPONENT_CLASSES,
    LLAMA3_DAYS,
    LLAMA3_PLANNED,
    LLAMA3_UNEXPECTED,
    units_of_job,
)

LLAMA3_HOURS = LLAMA3_DAYS * 24.0


def test_calibration_reproduces_published_counts():
    rates = job_failure_rates(16384, 8, 8)
    assert rates.unexpected_per_h * LLAMA3_HOURS == pytest.approx(LLAMA3_UNEXPECTED, rel=1e-9)
    assert rates.planned_per_h * LLAMA3_HOURS == pytest.approx(LLAMA3_PLANNED, rel=1e-9)
    assert rates.mtbf_h == pytest.approx(LLAMA3_HOURS / 419, rel=1e-9)  # 3.09 h
    assert rates.mtbf_h == pytest.approx(3.09, abs=0.01)
    for c, r in zip(rates.causes, rates.rate_per_h, strict=True):
        assert r * LLAMA3_HOURS == pytest.approx(c.llama3_count, rel=1e-9), c.name
    gpu_share = sum(v for k, v in rates.by_class_per_h().items() if k in ("gpu", "gpu_memory")) / rates.unexpected_per_h
    assert gpu_share == pytest.approx(268 / 419, rel=1e-9)  # 64.0 %, not the paper's 58.7 %


def test_published_percentage_error_is_documented():
    faulty = next(c for c in FailureModel.default().causes if c.name == "faulty_gpu")
    assert faulty.llama3_published_pct == 30.1
    assert faulty.llama3_count / 419 == pytest.approx(0.353, abs=1e-3)


def test_rates_scale_with_units_the_job_spans():
    full, half = job_failure_rates(16384, 8, 8), job_failure_rates(8192, 8, 8)
    assert half.unexpected_per_h == pytest.approx(full.unexpected_per_h / 2, rel=1e-12)
    # fewer NIC ports per node: only NIC and switch/cable causes shrink
    few = job_failure_rates(16384, 8, 4).by_class_per_h()
    base = full.by_class_per_h()
    assert few["nic"] == pytest.approx(base["nic"] / 2) and few["network"] == pytest.approx(base["network"] / 2)
    assert few["gpu"] == pytest.approx(base["gpu"])
    assert units_of_job(12, 8, 8) == {"gpu": 12, "node": 2, "nic_port": 16, "leaf_switch": 8}


def test_rate_overrides_by_cause_and_class():
    fm = FailureModel.default().with_rates({"faulty_gpu": 0.0, "software": 1e-5})
    r = job_failure_rates(1000, 8, 8, fm)
    assert r.by_cause_per_h()["faulty_gpu"] == 0.0
    assert r.by_class_per_h()["software"] > 0
    with pytest.raises(SpecError, match="did you mean 'gpu_memory'"):
        FailureModel.default().with_rates({"gpu_memroy": 1e-6})
    with pytest.raises(SpecError, match=">= 0"):
        FailureModel.default().with_rates({"gpu": -1.0})


def test_bad_job_shape():
    with pytest.raises(SpecError):
        job_failure_rates(0, 8, 8)


@pytest.fixture(scope="module")
def llama_window():
    cl = catalog.get("cluster", "ref-1k-h100")
    cl = cl.model_copy(update={"nodes": 2048, "gpus": None})
    return estimate(cl, 16384, model=catalog.get("model", "llama3-405b"), horizon_s=LLAMA3_DAYS * 86400,
                    trials=400, seed=3)


def test_54_day_snapshot_interruptions_within_15_percent(llama_window):
    s = llama_window.monte_carlo.summary()
    assert abs(s["unexpected_interruptions"]["mean"] / 419 - 1) < 0.15
    assert abs(llama_window.analytic.unexpected_interruptions / 419 - 1) < 0.15
    assert abs((s["unexpected_interruptions"]["mean"] + s["planned_interruptions"]["mean"]) / 466 - 1) < 0.15


def test_54_day_snapshot_split_by_cause(llama_window):
    mc = llama_window.monte_carlo.by_cause_mean
    causes = {c.name: c.llama3_count for c in FailureModel.default().causes}
    for name, count in causes.items():
        # Monte Carlo mean of a Poisson count over 400 trials: 4 standard errors plus 2 % bias allowance
        tol = 4 * math.sqrt(count / 400) + 0.02 * count
        assert abs(mc[name] - count) <= tol, (name, mc[name], count)
    by_class = {k: 0.0 for k in COMPONENT_CLASSES}
    for c in FailureModel.default().causes:
        by_class[c.component] += mc[c.name]
    unexpected = sum(v for k, v in by_class.items() if k != "planned")
    assert (by_class["gpu"] + by_class["gpu_memory"]) / unexpected == pytest.approx(0.64, abs=0.02)
