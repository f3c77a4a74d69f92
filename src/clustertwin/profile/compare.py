"""Measured step terms against a predicted step: one row per :class:`~clustertwin.train.breakdown.StepBreakdown`
term and the largest gap named in one sentence.

Measured term ``m_k`` is the mean over every rank's complete steps of the profile's ``breakdown`` (the
twin's names, built by :mod:`clustertwin.profile.steps`); the predicted term ``p_k`` is the estimate's
breakdown (``TrainEstimate.breakdown`` / ``StepBreakdown.as_dict()``). The gap is ``g_k = m_k - p_k`` and
its share of the measured step ``g_k / sum_k m_k``; the largest ``|g_k|`` is named when its share is at
least ``min_share`` (default 5 %), otherwise the sentence says measured and predicted agree. The step row
compares ``sum_k m_k`` with ``sum_k p_k`` (the terms add up to the step, as the twin's do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.train.breakdown import BREAKDOWN_KEYS, TERM_DOC


@dataclass(frozen=True)
class CompareRow:
    """One term, seconds per step: measured, predicted, gap (measured - predicted), gap / measured step."""

    term: str
    measured_s: float
    predicted_s: float
    gap_s: float
    gap_share: float


def measured_breakdown(report: Any) -> dict[str, float]:
    """Mean per-term seconds over every rank's complete steps (all steps when none is complete)."""
    steps = [s for r in report.ranks for s in r.steps if s.get("breakdown")]
    full = [s for s in steps if not s["partial"]] or steps
    if not full:
        raise SpecError("profile: no step with a breakdown to compare (no ProfilerStep or --step-range window)")
    return {k: sum(float(s["breakdown"].get(k, 0.0)) for s in full) / len(full) for k in BREAKDOWN_KEYS}


def measured_terms(report: Any) -> dict[str, float]:
    """:func:`measured_breakdown` plus ``attention``: the mean seconds per step of the attention kernel class
    (flash / fused attention, softmax, rotary; part of ``compute``), the term ``attention_efficiency`` is
    fitted to (:mod:`clustertwin.profile.fit`)."""
    out = measured_breakdown(report)
    steps = [s for r in report.ranks for s in r.steps if s.get("breakdown")]
    full = [s for s in steps if not s["partial"]] or steps
    out["attention"] = sum(float(s.get("compute_by_class_s", {}).get("attention", 0.0)) for s in full) / len(full)
    return out


def compare_terms(measured: dict[str, float], predicted: dict[str, float], min_share: float = 0.05,
                  reference_name: str = "predicted") -> tuple[list[CompareRow], str]:
    """Rows per term plus a ``step`` row, and the sentence naming the largest gap (module docstring);
    ``reference_name`` says what ``predicted`` is (the twin's prediction, or a ``baseline`` run's terms)."""
    step_m = sum(measured.get(k, 0.0) for k in BREAKDOWN_KEYS)
    step_p = sum(float(predicted.get(k, 0.0)) for k in BREAKDOWN_KEYS)
    if step_m <= 0.0:
        raise SpecError("profile: the measured step is empty (0 s), nothing to compare")
    rows = []
    for k in BREAKDOWN_KEYS:
        m, p = measured.get(k, 0.0), float(predicted.get(k, 0.0))
        rows.append(CompareRow(k, m, p, m - p, (m - p) / step_m))
    rows.append(CompareRow("step", step_m, step_p, step_m - step_p, (step_m - step_p) / step_m))
    worst = max(rows[:-1], key=lambda r: abs(r.gap_s))
    if abs(worst.gap_share) < min_share:
        return rows, (f"measured and predicted agree within {100 * min_share:.0f}% of the step on every term "
                      f"(largest gap {worst.term}, {1e3 * worst.gap_s:+.2f} ms)")
    more = "more" if worst.gap_s > 0 else "less"
    than = "the twin expects" if reference_name == "predicted" else f"the {reference_name}"
    return rows, (f"the largest gap is {worst.term} ({TERM_DOC[worst.term]}): measured {1e3 * worst.measured_s:.2f} ms "
                  f"against {1e3 * worst.predicted_s:.2f} ms {reference_name}, {abs(100 * worst.gap_share):.0f}% of "
                  f"the measured step {more} than {than}")


def largest_gap(rows: list[CompareRow], min_share: float = 0.05) -> str | None:
    """The term with the largest gap when it is at least ``min_share`` of the measured step, else None."""
    worst = max((r for r in rows if r.term != "step"), key=lambda r: abs(r.gap_s))
    return worst.term if abs(worst.gap_share) >= min_share else None
