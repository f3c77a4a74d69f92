"""Sizing for a request rate under TTFT/TPOT SLOs."""

from __future__ import annotations

import itertools

import pytest

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.infer import size


@pytest.fixture(scope="module")
def model():
    return catalog.get("model", "llama3-70b")


@pytest.fixture(scope="module")
def nodes():
    return [catalog.get("node", "dgx-h100"), catalog.get("node", "dgx-h200")]


def test_sizing_monotone_in_qps(model, nodes):
    kw = {"input_len": 1024, "output_len": 256, "slo_ttft_ms": 1000, "slo_tpot_ms": 50, "verify": False}
    costs, gpus = [], []
    for q in (0.5, 2, 5, 10, 20, 40, 80, 160):
        r = size(model, nodes, qps=q, **kw)
        assert r.best is not None
        costs.append(r.best.usd_per_hour)
        gpus.append(r.best.gpus)
    assert all(b >= a for a, b in itertools.pairwise(costs))
    assert gpus[-1] > gpus[0]


def test_tighter_slo_costs_more(model, nodes):
    loose = size(model, nodes, qps=20, input_len=1024, output_len=256, slo_ttft_ms=2000, slo_tpot_ms=80,
                 verify=False)
    tight = size(model, nodes, qps=20, input_len=1024, output_len=256, slo_ttft_ms=300, slo_tpot_ms=20,
                 verify=False)
    assert tight.best is not None and loose.best is not None
    assert tight.best.usd_per_hour >= loose.best.usd_per_hour
    assert tight.best.tpot_ms <= 20


def test_winner_checked_by_simulation(model, nodes):
    r = size(model, nodes, qps=10, input_len=512, output_len=256, slo_ttft_ms=1000, slo_tpot_ms=60)
    v = r.verification
    assert v["requests"] >= 200
    assert v["ttft_ms_p90"] < 1.2 * 1000 and v["tpot_ms_p90"] < 1.2 * 60
    assert r.best.usd_per_million_output_tokens > 0


def test_impossible_slo_and_bad_input(model, nodes):
    r = size(model, nodes, qps=5, input_len=1024, output_len=256, slo_ttft_ms=1, slo_tpot_ms=1, verify=False)
    assert r.best is None
    assert all(not c.feasible for c in r.candidates)
    with pytest.raises(SpecError):
        size(model, nodes, qps=-1, input_len=1, output_len=1, slo_ttft_ms=1, slo_tpot_ms=1)
    with pytest.raises(SpecError):
        size(model, nodes, qps=1, input_len=1, output_len=1, slo_ttft_ms=1, slo_tpot_ms=1, precisions=["fp9"])


def test_disaggregated_sizing(model, nodes):
    r = size(model, nodes, qps=10, input_len=4096, output_len=256, slo_ttft_ms=2000, slo_tpot_ms=40,
             disaggregated=True, verify=False)
    assert r.best is not None and r.best.disaggregated
    assert r.best.prefill_replicas >= 1 and r.best.decode_replicas >= 1


def test_verified_answer_meets_the_slo_in_simulation(model, nodes):
    """When the simulator finds the analytic optimum misses the SLO, replicas are added (and charged)
    until the simulated percentiles meet it."""
    res = size(model, nodes, qps=50, input_len=1024, output_len=256, slo_ttft_ms=200, slo_tpot_ms=50)
    v = res.verification
    assert v["meets_slo"], v
    assert v["ttft_ms_p90"] <= 200 and v["tpot_ms_p90"] <= 50
    analytic = next(c for c in res.candidates if (c.node, c.tp, c.precision) ==
                    (res.best.node, res.best.tp, res.best.precision))
    assert res.best.replicas == analytic.replicas + v["replicas_added"]
    assert res.best.usd_per_hour >= analytic.usd_per_hour
