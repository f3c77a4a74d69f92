"""validate: the case runner's contract (README of the validation set): errors per case never abort the run,
relative errors are (predicted - measured) / measured, summaries by kind."""

from __future__ import annotations

import json

import pytest

from clustertwin import validate
from tests.conftest import VALIDATION, need_shared, run_cli


def test_rel_error_definition():
    assert validate.rel_error(110.0, 100.0) == pytest.approx(0.10)
    assert validate.rel_error(90.0, 100.0) == pytest.approx(-0.10)


def test_bad_case_is_reported_not_fatal(tmp_path):
    f = tmp_path / "cases.yaml"
    f.write_text(
        "cases:\n"
        "- {id: good, kind: collective, node: dgx-h100, nodes: 1, gpus: 8, op: all_reduce, bytes: 4294967296,"
        " measured: {busbw_gb_per_s: 360}}\n"
        "- {id: typo, kind: colective, measured: {x: 1}}\n"
        "- {id: badop, kind: collective, node: dgx-h100, nodes: 1, gpus: 8, op: all_reduse, bytes: 8,"
        " measured: {busbw_gb_per_s: 1}}\n"
    )
    out = validate.run([f])
    by_id = {c["id"]: c for c in out["cases"]}
    assert "error" not in by_id["good"]
    assert by_id["good"]["rel_error"]["busbw_gb_per_s"] == pytest.approx(
        (by_id["good"]["predicted"]["busbw_gb_per_s"] - 360) / 360)
    assert "did you mean 'collective'" in by_id["typo"]["error"]
    assert "all_reduce" in by_id["badop"]["error"]
    assert out["summary"]["count"] == 3 and out["summary"]["failed"] == 2


def test_cli_json_follows_the_documented_schema():
    need_shared(VALIDATION / "collective.yaml")
    res = run_cli("validate", str(VALIDATION / "collective.yaml"), "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert set(data) == {"cases", "summary"}
    case = data["cases"][0]
    assert {"id", "kind", "source", "measured", "predicted", "rel_error"} <= set(case)
    s = data["summary"]
    assert {"count", "median_abs_rel_error", "max_abs_rel_error", "by_kind"} <= set(s)
    assert s["by_kind"]["collective"]["count"] == len(data["cases"])


def test_missing_case_file_exits_2(tmp_path):
    res = run_cli("validate", str(tmp_path / "nope.yaml"))
    assert res.code == 2
    assert "nope.yaml" in res.stderr and "Traceback" not in res.stderr


def test_validate_with_no_argument_runs_every_shipped_file() -> None:
    """`clustertwin validate` alone scores the repository's validation/ folder, with a per-file summary."""
    import json

    res = run_cli("validate", "--json", "-k", "reliability", "-k", "collective")
    assert res.code == 0, res.stderr
    by_file = json.loads(res.stdout)["summary"]["by_file"]
    assert {"collective.yaml", "collective_tables.yaml", "reliability.yaml"} <= set(by_file)


def test_provenance_keys_never_fail_a_case():
    """``confidence``, ``date``, ``url`` and ``tags`` describe a source: every kind takes them (a typo of an
    input still fails, naming the nearest key)."""
    case = {"id": "a100-8", "kind": "collective", "node": "dgx-a100-80gb", "nodes": 1, "gpus": 8,
            "op": "all_reduce", "bytes": 2**32, "measured": {"busbw_gb_per_s": 232.5},
            "confidence": "high", "date": "2024-05-01", "url": "https://example.org/log", "tags": ["nccl"]}
    assert validate.evaluate_case(case).error is None
    bad = validate.evaluate_case({**case, "algoritm": "ring"})
    assert "algorithm" in bad.error
