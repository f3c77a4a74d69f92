"""Monte Carlo against the analytical expectation and Daly's optimum; reproducibility; ETTR of a
405B-class run; hot spares and asynchronous checkpoints never lower ETTR (property test)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.reliability import Scenario, analytic, daly_interval_s, estimate, simulate
from clustertwin.units import DAY_S, HOUR_S


def one_cause(mtbf_s: float, delta_s: float, tau_s: float, work_s: float, restart_s: float) -> Scenario:
    """Exponential failures of one cause, synchronous checkpoints of ``delta_s``, one restart time."""
    return Scenario(gpus=8, work_s=work_s, horizon_s=None, cause_names=("fault",), rate_per_s=(1 / mtbf_s,),
                    replaces_node=(False,), planned=(False,), restart_s=(restart_s,), replace_s=0.0,
                    policy="restart", hot_spares=0, repair_s=0.0, elastic_unit_fraction=0.125,
                    elastic_min_fraction=0.5, interval_s=tau_s, snapshot_s=0.0, write_s=delta_s,
                    async_checkpoint=False)


@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.5])
def test_monte_carlo_mean_matches_analytical_for_exponential_failures(ratio):
    m = HOUR_S
    scn = one_cause(m, ratio * m, daly_interval_s(ratio * m, m), 50 * m, 0.1 * m)
    mc = simulate(scn, trials=2000, seed=11)
    assert mc.wall_s.mean() == pytest.approx(analytic(scn).wall_s, rel=0.02)


@pytest.fixture(scope="module")
def llama3():
    cl = catalog.get("cluster", "ref-1k-h100").model_copy(update={"nodes": 2048, "gpus": None})
    return cl, catalog.get("model", "llama3-405b")


@pytest.mark.parametrize("kw", [{}, {"policy": "spares"}, {"policy": "elastic"},
                                {"policy": "spares", "async_checkpoint": True}])
def test_monte_carlo_mean_matches_analytical_for_the_default_causes(llama3, kw):
    cl, m = llama3
    r = estimate(cl, 16384, model=m, ideal_time_s=54 * DAY_S, trials=300, seed=5, **kw)
    assert r.monte_carlo.wall_s.mean() == pytest.approx(r.analytic.wall_s, rel=0.02)
    assert r.monte_carlo.ettr.mean() == pytest.approx(r.analytic.ettr, rel=0.02)


@pytest.mark.parametrize("ratio", [0.01, 0.03, 0.1, 0.3, 0.5])
def test_interval_minimising_simulated_wall_time_is_dalys(ratio):
    """Simulate a grid of intervals around Daly's with common random numbers, fit a parabola in log τ to
    the mean wall time, and compare its minimum with Daly's formula (δ/M from 0.01 to 0.5)."""
    m, delta = HOUR_S, ratio * HOUR_S
    daly = daly_interval_s(delta, m)
    grid = daly * np.exp(np.linspace(np.log(0.45), np.log(2.2), 9))
    means = [simulate(one_cause(m, delta, tau, 80 * m, 0.05 * m), trials=600, seed=1).wall_s.mean()
             for tau in grid]
    c2, c1, _ = np.polyfit(np.log(grid), means, 2)
    assert c2 > 0
    best = float(np.exp(-c1 / (2 * c2)))
    assert best / daly == pytest.approx(1.0, abs=0.10)


def test_fixed_seed_reproduces_bit_for_bit(llama3):
    cl, m = llama3
    kw = dict(model=m, ideal_time_s=20 * DAY_S, policy="spares", trials=200)
    a, b = estimate(cl, 16384, seed=7, **kw), estimate(cl, 16384, seed=7, **kw)
    c = estimate(cl, 16384, seed=8, **kw)
    for field in ("wall_s", "productive_s", "unexpected", "planned", "checkpoint_s", "downtime_s"):
        assert np.array_equal(getattr(a.monte_carlo, field), getattr(b.monte_carlo, field)), field
    assert a.monte_carlo.by_cause_mean == b.monte_carlo.by_cause_mean
    assert not np.array_equal(a.monte_carlo.wall_s, c.monte_carlo.wall_s)


def test_405b_run_with_spares_and_async_checkpoints_keeps_ettr_above_90_percent(llama3):
    cl, m = llama3
    r = estimate(cl, 16384, model=m, ideal_time_s=54 * DAY_S, policy="spares", async_checkpoint=True,
                 trials=300, seed=0)
    assert r.analytic.ettr >= 0.90
    assert np.percentile(r.monte_carlo.ettr, 10) >= 0.90
    # the same run restarting without spares, synchronously, loses more
    base = estimate(cl, 16384, model=m, ideal_time_s=54 * DAY_S, trials=0)
    assert base.analytic.ettr < r.analytic.ettr


def test_without_failures_wall_time_is_work_plus_checkpoint_stalls():
    scn = dataclasses.replace(one_cause(HOUR_S, 60.0, 600.0, 6000.0, 0.0), rate_per_s=(0.0,))
    mc = simulate(scn, trials=3, seed=0)
    assert np.all(mc.wall_s == 6000.0 + 9 * 60.0)  # 10 periods, no checkpoint after the last
    assert analytic(scn).wall_s == pytest.approx(6000.0 + 9 * 60.0)


def test_bad_inputs_are_spec_errors(llama3):
    cl, m = llama3
    with pytest.raises(SpecError, match="exactly one"):
        estimate(cl, 8, ideal_time_s=DAY_S, horizon_s=DAY_S)
    with pytest.raises(SpecError, match="policy"):
        estimate(cl, 8, ideal_time_s=DAY_S, policy="pray")
    with pytest.raises(SpecError, match="needs 32,768 GPUs"):
        estimate(cl, 32768, ideal_time_s=DAY_S)
    with pytest.raises(SpecError, match="hot spares need policy 'spares'"):
        estimate(cl, 8, ideal_time_s=DAY_S, policy="elastic", hot_spares=2)
    with pytest.raises(SpecError, match="host memory"):
        estimate(cl, 8, model=m, ideal_time_s=DAY_S, async_checkpoint=True)
    with pytest.raises(SpecError, match="trials"):
        simulate(one_cause(HOUR_S, 60.0, 600.0, 6000.0, 0.0), trials=0)


# ---- property: hot spares and asynchronous checkpoints never lower ETTR ----

scenarios = st.fixed_dictionaries({
    "mtbf_h": st.floats(0.3, 30.0),
    "hw_share": st.floats(0.0, 1.0),
    "planned_share": st.floats(0.0, 0.3),
    "restart_s": st.floats(0.0, 3600.0),
    "replace_s": st.floats(0.0, 7200.0),
    "repair_h": st.floats(0.5, 72.0),
    "spares": st.integers(0, 4),
    "more": st.integers(1, 4),
    "snapshot_s": st.floats(0.0, 60.0),
    "write_s": st.floats(1.0, 3600.0),
    "interval_s": st.floats(30.0, 36000.0),
    "runs_of_mtbf": st.floats(0.5, 8.0),
    "window": st.booleans(),
    "async_": st.booleans(),
})


def _scenario(p: dict, policy: str, spares: int, async_: bool) -> Scenario:
    mtbf_s = p["mtbf_h"] * HOUR_S
    unplanned = 1.0 / mtbf_s
    span = p["runs_of_mtbf"] * mtbf_s
    return Scenario(
        gpus=64, work_s=None if p["window"] else span, horizon_s=span if p["window"] else None,
        cause_names=("hw", "sw", "planned"),
        rate_per_s=(unplanned * p["hw_share"], unplanned * (1 - p["hw_share"]), unplanned * p["planned_share"]),
        replaces_node=(True, False, False), planned=(False, False, True),
        restart_s=(p["restart_s"], p["restart_s"], p["restart_s"]), replace_s=p["replace_s"], policy=policy,
        hot_spares=spares, repair_s=p["repair_h"] * HOUR_S, elastic_unit_fraction=1 / 8,
        elastic_min_fraction=0.5, interval_s=p["interval_s"], snapshot_s=p["snapshot_s"], write_s=p["write_s"],
        async_checkpoint=async_,
    )


def _ettr(scn: Scenario) -> tuple[np.ndarray, float]:
    return simulate(scn, trials=40, seed=2024).ettr, analytic(scn).ettr


TOL = 1e-9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_hot_spares_never_lower_ettr(p):
    base_mc, base_an = _ettr(_scenario(p, "restart", 0, p["async_"]))
    few_mc, few_an = _ettr(_scenario(p, "spares", p["spares"], p["async_"]))
    more_mc, more_an = _ettr(_scenario(p, "spares", p["spares"] + p["more"], p["async_"]))
    assert np.all(few_mc >= base_mc - TOL) and np.all(more_mc >= few_mc - TOL)
    assert few_an >= base_an - TOL and more_an >= few_an - TOL


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios, st.sampled_from(["restart", "spares", "elastic"]))
def test_async_checkpoints_never_lower_ettr(p, policy):
    spares = p["spares"] if policy == "spares" else 0
    sync_mc, sync_an = _ettr(_scenario(p, policy, spares, False))
    async_mc, async_an = _ettr(_scenario(p, policy, spares, True))
    assert np.all(async_mc >= sync_mc - TOL)
    assert async_an >= sync_an - TOL
