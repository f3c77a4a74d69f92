"""Measured terms against a predicted breakdown: rows per StepBreakdown term, the largest gap named."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustertwin.errors import SpecError
from clustertwin.profile.compare import compare_terms, largest_gap, measured_breakdown
from clustertwin.profile.report import profile
from clustertwin.train.breakdown import BREAKDOWN_KEYS

GLOO = Path(__file__).parent.parent / "fixtures" / "profile" / "gloo_tp2dp2"


def _measured(case: str) -> dict[str, float]:
    return measured_breakdown(profile([GLOO / case]))


def test_rows_follow_step_breakdown_and_add_up() -> None:
    measured = {"compute": 0.010, "dp_comm": 0.004, "data_stall": 0.001}
    predicted = {"compute": 0.010, "dp_comm": 0.001}
    rows, sentence = compare_terms(measured, predicted)
    assert [r.term for r in rows] == [*BREAKDOWN_KEYS, "step"]
    assert rows[-1].measured_s == pytest.approx(0.015)
    assert rows[-1].predicted_s == pytest.approx(0.011)
    assert largest_gap(rows) == "dp_comm"
    assert "dp_comm" in sentence and "3.00 ms" not in sentence and "4.00 ms" in sentence


def test_small_gaps_are_not_named() -> None:
    rows, sentence = compare_terms({"compute": 0.100, "tp_comm": 0.002}, {"compute": 0.100, "tp_comm": 0.001})
    assert largest_gap(rows) is None
    assert sentence.startswith("measured and predicted agree")


def test_empty_measured_step_is_one_error() -> None:
    with pytest.raises(SpecError):
        compare_terms({}, {"compute": 1.0})


def test_slow_loader_names_data_wait_against_plain() -> None:
    plain = _measured("plain")
    rows, sentence = compare_terms(_measured("slow_loader"), plain)
    assert largest_gap(rows) == "data_stall"
    assert sentence.startswith("the largest gap is data_stall")


def test_plain_against_itself_names_nothing() -> None:
    plain = _measured("plain")
    rows, _ = compare_terms(plain, plain)
    assert largest_gap(rows) is None


def test_extra_dp_measures_more_dp_comm_than_plain() -> None:
    rows, _ = compare_terms(_measured("extra_dp"), _measured("plain"))
    dp = next(r for r in rows if r.term == "dp_comm")
    assert dp.gap_s > 0.0



@pytest.mark.parametrize(("case", "term"), [("slow_loader", "data_stall"), ("extra_dp", "dp_comm")])
def test_cli_compare_against_baseline_names_the_injected_delay(case: str, term: str) -> None:
    import json

    from tests.conftest import run_cli

    r = run_cli("profile", str(GLOO / case), "--compare", "--baseline", str(GLOO / "plain"), "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["against"] == "baseline"
    assert out["largest_gap"].startswith(f"the largest gap is {term}")
    text = run_cli("profile", str(GLOO / case), "--compare", "--baseline", str(GLOO / "plain"))
    assert text.code == 0 and "measured vs baseline" in text.stdout and term in text.stdout


def test_cli_compare_against_the_twin_takes_world_size_from_the_trace() -> None:
    import json

    from tests.conftest import run_cli

    r = run_cli("profile", str(GLOO / "slow_loader"), "--compare", "--model", "llama3-8b", "--tp", "2", "-b", "8",
                "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["gpus"] == 4 and out["against"] == "predicted"
    rows = {row["term"]: row for row in out["rows"]}
    assert list(rows)[-1] == "step"
    assert rows["step"]["predicted_s"] == pytest.approx(sum(v["predicted_s"] for k, v in rows.items() if k != "step"))
    assert out["largest_gap"].startswith("the largest gap is")
    bad = run_cli("profile", str(GLOO / "plain"), "--compare")
    assert bad.code == 2 and "needs --model and --global-batch" in bad.stderr and "--baseline" in bad.stderr
