"""Hostile values at the inference boundary exit 2 with one line; scipy stays off the sizing path;
the KV budget is a fraction of the memory left after weights; labels say what they print."""

from __future__ import annotations

import json
import math

import pytest

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.infer import Deployment
from clustertwin.infer.sizing import norm_ppf


@pytest.mark.parametrize("args", [
    ("infer", "estimate", "--model", "llama3-8b", "--request-rate", "nan"),
    ("infer", "estimate", "--model", "llama3-8b", "--request-rate", "inf"),
    ("infer", "estimate", "--model", "llama3-8b", "--length-cv", "nan"),
    ("infer", "estimate", "--model", "llama3-8b", "--gpus", "-8"),
    ("infer", "estimate", "--model", "llama3-8b", "--num-requests", "-5", "--request-rate", "1"),
    ("infer", "size", "--qps", "nan", "--input-len", "10", "--output-len", "10", "--slo-ttft-ms", "100",
     "--slo-tpot-ms", "10"),
    ("infer", "size", "--qps", "1", "--input-len", "10", "--output-len", "10", "--slo-ttft-ms", "100",
     "--slo-tpot-ms", "10", "--usd-per-gpu-hour", "-3"),
])
def test_nan_and_negative_inputs_exit_2_one_line(cli, args):
    r = cli(*args)
    assert r.code == 2, (r.code, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1
    assert "must be" in r.stderr


def test_validation_case_with_negative_gpus_is_a_failed_case():
    from clustertwin.infer.validation import evaluate

    with pytest.raises(SpecError, match="gpus: must be a whole number >= 1"):
        evaluate({"id": "x", "kind": "infer", "model": "llama3-8b", "gpu": "h100-sxm", "gpus": -8,
                  "measured": {"output_tokens_per_s": 1.0}})


def test_norm_ppf_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for p in (0.5, 0.9, 0.95, 0.99, 0.999, 0.0001, 0.3):
        assert norm_ppf(p) == pytest.approx(float(stats.norm.ppf(p)), rel=1e-9, abs=1e-12)
    for bad in (0.0, 1.0, math.nan):
        with pytest.raises(SpecError):
            norm_ppf(bad)


def test_sizing_imports_no_scipy():
    import subprocess
    import sys

    code = ("import sys; from clustertwin.infer import size, simulate_fleet; "
            "print(any(m.startswith('scipy') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_kv_budget_is_a_fraction_of_memory_left_after_weights():
    dep = Deployment(catalog.get("model", "llama3-70b"), catalog.get("node", "dgx-h100"), tp=2, precision="fp8")
    mem = dep.memory()
    free = mem.hbm_bytes - mem.weights_bytes - mem.reserve_bytes
    assert mem.kv_budget_bytes == pytest.approx(dep.params.kv_cache_free_mem_fraction * free)


def test_estimate_prints_simulated_max_and_kv_limit_separately(cli):
    r = cli("infer", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--precision", "fp8",
            "--input-len", "256", "--output-len", "128", "--concurrency", "8", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["simulated_max_batch"] <= 8 < d["kv_batch_limit"]
    r = cli("infer", "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--precision", "fp8",
            "--input-len", "256", "--output-len", "128", "--concurrency", "8")
    assert "simulated max" in r.stdout and "KV-cache batch limit" in r.stdout
