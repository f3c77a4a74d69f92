"""The hpl calibration set (validation/hpl.yaml, TOP500/Green500 systems): Rpeak, Rmax and power within the
tolerances issue 17 names, every case evaluable, with global parameters only."""

from __future__ import annotations

import statistics

import pytest

from clustertwin import validate
from tests.conftest import VALIDATION, need_shared

RPEAK_MEDIAN_TOL = 0.02
RPEAK_WITHIN_2PCT_SHARE = 0.6
"""TOP500 Rpeak is the submitter's rating (clock choice); a few entries rate the same part differently
(JUPITER vs Isambard-AI GH200, Eagle vs CHIE H100), so most, not all, entries land within 2%."""
RMAX_MEDIAN_TOL = 0.08
GFLOPS_PER_W_MEDIAN_TOL = 0.15
POWER_MEDIAN_TOL = 0.15
MIN_CASES = 30


@pytest.fixture(scope="module")
def result() -> dict:
    return validate.run([need_shared(VALIDATION / "hpl.yaml")])


def _errs(result: dict, key: str) -> list[float]:
    return [abs(c["rel_error"][key]) for c in result["cases"] if key in c.get("rel_error", {})]


def test_every_case_evaluates(result: dict) -> None:
    assert len(result["cases"]) >= MIN_CASES
    assert result["summary"]["failed"] == 0, [c for c in result["cases"] if "error" in c]


def test_rpeak_follows_the_list(result: dict) -> None:
    errs = _errs(result, "rpeak_pflops")
    assert len(errs) >= 15
    assert statistics.median(errs) <= RPEAK_MEDIAN_TOL
    assert sum(e <= 0.02 for e in errs) >= RPEAK_WITHIN_2PCT_SHARE * len(errs)


def test_rmax_median_error(result: dict) -> None:
    errs = _errs(result, "rmax_pflops")
    assert len(errs) >= MIN_CASES
    assert statistics.median(errs) <= RMAX_MEDIAN_TOL


def test_green500_efficiency_and_power(result: dict) -> None:
    gfw = _errs(result, "gflops_per_w")
    power = _errs(result, "power_kw")
    assert len(gfw) >= 10 and len(power) >= 10
    assert statistics.median(gfw) <= GFLOPS_PER_W_MEDIAN_TOL
    assert statistics.median(power) <= POWER_MEDIAN_TOL


def test_predictions_carry_the_physics(result: dict) -> None:
    by_id = {c["id"]: c for c in result["cases"]}
    # Hopper at 700 W reaches the BLAS fraction of its tensor peak; MI250X/MI300A run into their power cap
    assert by_id["chie-3"]["predicted"]["limited_by"] == "compute"
    assert by_id["frontier-2024-11"]["predicted"]["limited_by"] == "power"
    for c in result["cases"]:
        p = c["predicted"]
        assert 0.3 < p["rmax_over_rpeak"] < 1.0, c["id"]


@pytest.mark.parametrize(("case", "message"), [
    ({"gpu": "h100-sxm", "gpus": 8, "nodes": 1}, "fabric: required field missing"),
    ({"gpu": "h100-smx", "gpus": 8, "nodes": 1, "fabric": "ib-ndr"}, "did you mean 'h100-sxm'"),
    ({"gpu": "h100-sxm", "gpus": 8, "nodes": 1, "fabric": "ib-ndr", "nics": 4}, "unknown key 'nics'"),
    ({"gpu": "h100-sxm", "gpus": 4, "nodes": 8, "fabric": "ib-ndr"}, "expected 1 <= nodes <= gpus"),
])
def test_bad_cases_are_reported_not_raised(case: dict, message: str) -> None:
    res = validate.evaluate_case({"id": "bad", "kind": "hpl", "measured": {"rmax_pflops": 1.0}, **case})
    assert res.error is not None and message in res.error
