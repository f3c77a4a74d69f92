"""``clustertwin reliability`` and ``clustertwin validate`` on the reliability cases."""

from __future__ import annotations

import json

import pytest
from tests.conftest import VALIDATION, need_shared, run_cli

from clustertwin.reliability import FailureModel, job_failure_rates
from clustertwin.reliability.validation import evaluate


def test_reliability_json_has_rates_checkpoint_and_distributions():
    r = run_cli("reliability", "--gpus", "512", "--model", "llama3-70b", "--days", "10", "--trials", "100",
                "--hot-spares", "2", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["policy"] == "spares" and d["hot_spares"] == 2 and d["gpus"] == 512
    # the CLI uses the fleet model (H100: the Llama 3 site, factor 1) with its job-size terms: a 512-GPU job
    # lives longer than 1/32 of the 16,384-GPU job's 3.09 h, as its software-hang rate per rank is lower
    fleet = job_failure_rates(512, 8, 8, FailureModel.fleet()).mtbf_h
    assert d["failures"]["mtbf_h"] == pytest.approx(fleet, rel=1e-9) and fleet > 3.09 * 16384 / 512
    ck = d["checkpoint"]
    assert ck["size_source"].startswith("model llama3-70b")
    assert ck["interval_source"] == "daly" and ck["interval_s"] == pytest.approx(ck["daly_interval_s"])
    mc = d["monte_carlo"]
    assert mc["trials"] == 100
    assert mc["wall_s"]["p10"] <= mc["wall_s"]["p50"] <= mc["wall_s"]["p90"]
    assert 0 < mc["ettr"]["p50"] <= 1
    assert d["analytic"]["wall_s"] > 10 * 86400


def test_reliability_tables_and_tokens_mode():
    r = run_cli("reliability", "--gpus", "64", "--tokens", "1e10", "--tokens-per-s", "2e5",
                "--checkpoint-interval-min", "30", "--async-checkpoint", "--trials", "50")
    assert r.code == 0, r.stderr
    for text in ("failures", "by cause", "Daly interval", "ETTR", "p90", "lost GPU-hours"):
        assert text in r.stdout


def test_window_mode_reports_interruptions_of_a_snapshot():
    r = run_cli("reliability", "--cluster", "llama3-16k-h100-roce", "--window-days", "54", "--trials", "50",
                "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["analytic"]["unexpected_interruptions"] == pytest.approx(419, rel=1e-6)
    assert d["monte_carlo"]["wall_s"]["p50"] == pytest.approx(54 * 86400)


@pytest.mark.parametrize(("args", "fragment"), [
    (["--days", "5", "--policy", "restrat"], "did you mean 'restart'"),
    (["--gpus", "16384", "--days", "5"], "has 1,024"),
    (["--gpus", "64"], "give exactly one of --days"),
    (["--days", "5", "--tokens", "1e9"], "give exactly one"),
    (["--tokens", "1e9"], "--tokens needs --tokens-per-s"),
    (["--days", "5", "--checkpoint-interval-min", "soon"], "number of minutes or 'auto'"),
    (["--days", "-1"], "--days must be > 0"),
    (["--days", "5", "--trials", "-3"], "trials must be >= 0"),
    (["--days", "5", "--policy", "elastic", "--hot-spares", "3"], "hot spares need policy 'spares'"),
    (["--days", "5", "--model", "llama9"], "unknown model 'llama9'"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    r = run_cli("reliability", *args)
    assert r.code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], r.stderr


def test_validation_case_llama3_within_15_percent():
    path = need_shared(VALIDATION / "reliability.yaml")
    r = run_cli("validate", str(path), "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    cases = [c for c in out["cases"] if c["kind"] == "reliability"]
    assert cases and all("error" not in c for c in cases)
    for c in cases:
        for k, e in c["rel_error"].items():
            assert abs(e) < 0.15, (c["id"], k, e)


def test_evaluate_accepts_node_rates_and_reports_ignored_keys():
    base = evaluate({"gpus": 1024, "days": 30})
    doubled = evaluate({"gpus": 1024, "days": 30, "node": "dgx-h100", "rates": {"gpu": 2 * 6.97e-6},
                        "parallelism": {"tp": 8}})
    assert doubled["unexpected_interruptions"] > base["unexpected_interruptions"]
    assert doubled["ignored_keys"] == ["parallelism"]
    # fleet model: 16 x the 16,384-GPU job's 3.093 h under independent nodes, a little more with size terms
    assert base["mttf_hours"] == pytest.approx(job_failure_rates(1024, 8, 8, FailureModel.fleet()).mtbf_h)
    assert base["mttf_hours"] > 3.093 * 16
    assert 0 < base["ettr"] < 1
