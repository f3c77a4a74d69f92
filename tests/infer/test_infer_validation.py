"""The inference model against the measured serving cases of validation/infer.yaml."""

from __future__ import annotations

import statistics

from tests.conftest import VALIDATION, need_shared

from clustertwin import validate


def test_infer_yaml_within_tolerance():
    path = need_shared(VALIDATION / "infer.yaml")
    out = validate.run([path], kinds={"infer"})
    cases = out["cases"]
    failed = [c for c in cases if "error" in c]
    assert not failed, failed
    errs = []
    for c in cases:
        for k, e in c["rel_error"].items():
            errs.append(abs(e))
            print(f"{c['id']:48s} {k:24s} measured {c['measured'][k]:>10.4g} predicted {c['predicted'][k]:>10.4g} "
                  f"{e:+.1%}")
    med, mx = statistics.median(errs), max(errs)
    print(f"infer.yaml: {len(cases)} cases, {len(errs)} values, median |rel err| {med:.1%}, max {mx:.1%}")
    assert med <= 0.10
    assert mx <= 0.35


def test_case_without_tp_or_lengths_reports_assumptions():
    from clustertwin.infer.validation import evaluate

    pred = evaluate({"id": "x", "kind": "infer", "model": "llama2-70b", "node": "dgx-h100", "gpus": 4,
                     "precision": "fp8", "measured": {"output_tokens_per_s": 1.0}})
    assert pred["assumed"]["tp"] in (2, 4)
    assert pred["assumed"]["input_len"] > 0 and pred["assumed"]["output_len"] > 0
    assert pred["layout"]["replicas"] * pred["layout"]["tp"] == 4
