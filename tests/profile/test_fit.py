"""calibrate --profile: a trace synthesized from the twin with known parameters is fitted back to them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from clustertwin import specs
from clustertwin.errors import SpecError
from clustertwin.profile.compare import measured_terms
from clustertwin.profile.fit import FIT_TERMS, fit_profile, with_attention
from clustertwin.profile.report import profile
from clustertwin.profile.synth import synth_traces
from clustertwin.specs import ParallelismSpec
from clustertwin.specs.calibration import Calibration
from clustertwin.train import estimate
from clustertwin.train.breakdown import BREAKDOWN_KEYS
from tests.conftest import run_cli

CLUSTER = specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")
MODEL = specs.load(specs.ModelSpec, "llama3-8b", kind="model")
KNOWN = {"gemm_efficiency": 0.71, "attention_efficiency": 0.31, "kernel_host_overhead_s": 80e-6, "tp_comm_overlap": 0.35,
         "hbm_efficiency": 0.6, "rank_jitter_cv": 0.04}
#: (layout, sequence length): one compute-bound, one where the host is slower than the GPU
LAYOUTS = [(dict(tp=2, pp=1, dp=4, micro_batch=1, global_batch=64), None),
           (dict(tp=8, pp=1, dp=2, micro_batch=1, global_batch=16), 1024)]


def _measured(est, tmp_path: Path, attention_s: float = 0.0) -> dict[str, float]:
    for doc in synth_traces(est, MODEL.layers, attention_s=attention_s):
        (tmp_path / f"rank{doc['distributedInfo']['rank']}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    rep = profile([tmp_path])
    assert rep.damage == {}
    return measured_terms(rep)


def _predictor(par: ParallelismSpec, seq: int | None):
    return with_attention(
        lambda over: estimate(MODEL, CLUSTER, par, seq_len=seq, calibration=Calibration(train=over)).breakdown)


@pytest.mark.parametrize(("layout", "seq"), LAYOUTS)
def test_the_synthesized_trace_measures_the_estimate_terms(layout, seq, tmp_path):
    par = ParallelismSpec(**layout)
    est = estimate(MODEL, CLUSTER, par, seq_len=seq, calibration=Calibration(train=KNOWN))
    attention_s = _predictor(par, seq)(KNOWN)["attention"]
    assert 0.01 * est.breakdown["compute"] < attention_s < 0.5 * est.breakdown["compute"]
    measured = _measured(est, tmp_path, attention_s)
    for k in BREAKDOWN_KEYS:
        assert measured[k] == pytest.approx(est.breakdown[k], rel=1e-3, abs=1e-9), k
    assert sum(measured[k] for k in BREAKDOWN_KEYS) == pytest.approx(est.step_time_s, rel=1e-3)
    assert measured["attention"] == pytest.approx(attention_s, rel=1e-3)  # the attention kernels, inside compute


def test_pipeline_bubble_is_idle_the_profile_counts_host_bound(tmp_path):
    par = ParallelismSpec(tp=2, pp=2, dp=2, micro_batch=1, global_batch=16)
    est = estimate(MODEL, CLUSTER, par)
    assert est.breakdown["bubble"] > 0
    measured = _measured(est, tmp_path)
    assert measured["bubble"] == 0.0
    assert sum(measured[k] for k in BREAKDOWN_KEYS) == pytest.approx(est.step_time_s, rel=1e-3)
    assert measured["host_overhead"] >= est.breakdown["host_overhead"] + 0.5 * est.breakdown["bubble"]


@pytest.mark.parametrize(("layout", "seq"), LAYOUTS)
def test_round_trip_recovers_the_known_parameters_within_2_percent(layout, seq, tmp_path):
    par = ParallelismSpec(**layout)
    est = estimate(MODEL, CLUSTER, par, seq_len=seq, calibration=Calibration(train=KNOWN))
    predict = _predictor(par, seq)
    fit = fit_profile(_measured(est, tmp_path, predict(KNOWN)["attention"]), predict)
    host_bound = est.breakdown["host_overhead"] > 0
    expect = {k for k in KNOWN if k != "kernel_host_overhead_s" or host_bound}
    assert set(fit.params) == expect, (fit.params, fit.left_out)
    for name, value in fit.params.items():
        assert value == pytest.approx(KNOWN[name], rel=0.02), name
        lo, hi = fit.bounds[name]
        assert lo <= value <= hi
    assert fit.max_term_error_before > 0.05 and fit.max_term_error_after < 1e-3
    if not host_bound:
        assert "host_overhead" in fit.left_out["kernel_host_overhead_s"]
    assert "cp_comm" in fit.left_out["cp_overlap"]


def test_unknown_fit_names_and_empty_steps_are_one_line_errors():
    par = ParallelismSpec(**LAYOUTS[0][0])
    with pytest.raises(SpecError, match="did you mean 'gemm_efficiency'"):
        fit_profile({"compute": 1.0}, _predictor(par, None), ["gem_efficiency"])
    with pytest.raises(SpecError, match="measured step is empty"):
        fit_profile({}, _predictor(par, None))
    with pytest.raises(SpecError, match="exercises none"):
        fit_profile({"compute": 1.0}, _predictor(par, None), ["cp_overlap"])
    assert set(FIT_TERMS.values()) <= {*BREAKDOWN_KEYS, "attention"}


def test_attention_left_out_when_the_trace_has_no_attention_kernels(tmp_path):
    par = ParallelismSpec(**LAYOUTS[0][0])
    est = estimate(MODEL, CLUSTER, par, calibration=Calibration(train=KNOWN))
    fit = fit_profile(_measured(est, tmp_path), _predictor(par, None))  # compute written as GEMMs only
    assert "attention" in fit.left_out["attention_efficiency"] and "gemm_efficiency" in fit.params


def test_cli_trace_out_then_calibrate_profile_round_trip(tmp_path):
    known = tmp_path / "known.yaml"
    known.write_text(yaml.safe_dump({"train": KNOWN}))
    run = ["--model", "llama3-8b", "--tp", "8", "-b", "16", "--seq-len", "1024"]
    r = run_cli("train", "estimate", *run, "--gpus", "16", "--strict-layout", "--calibration", str(known),
                "--trace-out", str(tmp_path / "twin"), "--json")
    assert r.code == 0, r.stderr
    step_known = json.loads(r.stdout)["step_time_s"]
    assert sorted(p.name for p in (tmp_path / "twin").iterdir()) == ["rank0.json.gz"]
    out = tmp_path / "fitted.yaml"
    r = run_cli("calibrate", "--profile", str(tmp_path / "twin"), *run, "-o", str(out), "--json")
    assert r.code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["gpus"] == 16 and summary["max_term_error_after"] < 1e-3
    for name, f in summary["fitted"].items():
        assert f["value"] == pytest.approx(KNOWN[name], rel=0.02) and f["term"] == FIT_TERMS[name]
    r = run_cli("train", "estimate", *run, "--gpus", "16", "--strict-layout", "--calibration", str(out), "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["step_time_s"] == pytest.approx(step_known, rel=1e-3)


def test_cli_calibrate_profile_errors(tmp_path):
    gloo = Path(__file__).parent.parent / "fixtures" / "profile" / "gloo_tp2dp2" / "plain"
    r = run_cli("calibrate", "--profile", str(gloo), "-o", str(tmp_path / "x.yaml"))
    assert r.code == 2 and "needs --model and --global-batch" in r.stderr
    r = run_cli("calibrate", "--profile", "--nccl-tests", str(gloo))
    assert r.code == 2 and "one source" in r.stderr
    assert not (tmp_path / "x.yaml").exists()
