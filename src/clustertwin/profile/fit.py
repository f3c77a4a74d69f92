"""Fit the training model's named efficiency terms to a measured step (``calibrate --profile``).

Each fitted parameter has the measured term that identifies it (:data:`FIT_TERMS`): the GEMM efficiency the
compute time, the fused-attention efficiency the attention kernels' share of it (the profile's ``attention``
class against :func:`with_attention`), the host time per kernel the host-bound idle, the overlap fractions the exposed share of their
communication, the HBM efficiency the optimizer step, the speed spread of GPUs the wait for the slowest.
A parameter is fitted when the trace exercises it: its term is at least :data:`MIN_SHARE` of the measured
step, and the twin's prediction of that term moves when the parameter does (a 10% change of the parameter
changes the term by at least :data:`MIN_SENSITIVITY` of itself; the host time per kernel, for one, shows only
where the host is slower than the GPU). The others are left out, each with the reason.

The fit is bounded least squares (``scipy.optimize.least_squares``, trust-region reflective) over the fitted
parameters, in units of their defaults, with each parameter's physical range (:func:`clustertwin.train.params.
bound_problem`: efficiencies in [0.001, 1], overlaps in [0, 1], the speed spread in [0, 0.2], times >= 0);
the residual of term ``k`` is ``(predicted_k(theta) - measured_k) / measured step``. The result reports the
values, their bounds, and the largest term error before and after.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.train.breakdown import BREAKDOWN_KEYS
from clustertwin.train.params import DEFAULT_PARAMS, MIN_EFFICIENCY, RANGES

#: parameter -> the measured step term that identifies it
FIT_TERMS: dict[str, str] = {
    "gemm_efficiency": "compute",
    "attention_efficiency": "attention",
    "kernel_host_overhead_s": "host_overhead",
    "tp_comm_overlap": "tp_comm",
    "cp_overlap": "cp_comm",
    "pp_overlap": "pp_comm",
    "hbm_efficiency": "optimizer",
    "rank_jitter_cv": "stragglers",
}
MIN_SHARE = 0.002
"""Smallest share of the measured step a term must have for its parameter to be fitted."""
MIN_SENSITIVITY = 1e-3
"""Smallest relative change of the predicted term under a 10% change of the parameter."""

Predict = Callable[[dict[str, float]], dict[str, float]]

ATTENTION_PROBE = 1.1
"""Factor on ``attention_efficiency`` of the second prediction :func:`with_attention` differences."""


def with_attention(predict: Predict) -> Predict:
    """``predict`` with the twin's fused-attention time added as the term ``attention`` (seconds of the
    ``compute`` term spent in attention kernels). The fused kernel's time is ``FLOPs / (peak x a)`` plus a
    launch latency (:func:`clustertwin.train.attention.attention_core`), so with ``C(a)`` the predicted
    compute at attention efficiency ``a``: ``attention = (C(a) - C(k a)) / (1 - 1/k)``, ``k =``
    :data:`ATTENTION_PROBE` (exact while ``k a`` stays under the peak cap; the latency stays in the rest of
    compute). 0 for unfused attention, which does not depend on ``a``."""

    def predict_with_attention(over: dict[str, float]) -> dict[str, float]:
        out = dict(predict(over))
        a = _default("attention_efficiency", over)
        probe = predict({**over, "attention_efficiency": a * ATTENTION_PROBE})
        out["attention"] = max(0.0, (out.get("compute", 0.0) - probe.get("compute", 0.0)) / (1.0 - 1.0 / ATTENTION_PROBE))
        return out

    return predict_with_attention


def bounds_of(name: str) -> tuple[float, float]:
    """The physical range of ``name`` (module docstring)."""
    if name in RANGES:
        lo, hi, _ = RANGES[name]
        return lo, hi
    if name.endswith("_efficiency"):
        return MIN_EFFICIENCY, 1.0
    if name.endswith("_overlap"):
        return 0.0, 1.0
    return 0.0, math.inf


@dataclass
class ProfileFit:
    """Fitted values (with bounds), what was left out and why, and the term errors before and after."""

    params: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    left_out: dict[str, str]
    measured: dict[str, float]
    before: dict[str, float]
    after: dict[str, float]
    max_term_error_before: float = 0.0
    """Largest |predicted - measured| over the fitted terms, as a share of the measured step."""
    max_term_error_after: float = 0.0
    start: dict[str, float] = field(default_factory=dict)


def _default(name: str, base: dict[str, float]) -> float:
    return float(base.get(name, getattr(DEFAULT_PARAMS, name)))


def exercised(measured: dict[str, float], predict: Predict, names: list[str],
              base: dict[str, float]) -> tuple[list[str], dict[str, str]]:
    """(parameters to fit, left-out parameter -> reason) of ``names`` (module docstring)."""
    step = sum(measured.get(k, 0.0) for k in BREAKDOWN_KEYS)
    at_start = predict(dict(base))
    keep, left = [], {}
    for n in names:
        term = FIT_TERMS[n]
        if measured.get(term, 0.0) < MIN_SHARE * step:
            left[n] = f"its term {term} is {measured.get(term, 0.0) / step:.1%} of the measured step (< {MIN_SHARE:.1%})"
            continue
        lo, hi = bounds_of(n)
        x0 = _default(n, base)
        moved = min(hi, x0 * 1.1) if x0 * 1.1 <= hi else max(lo, x0 * 0.9)
        if x0 == 0.0:
            moved = min(hi, 1e-6 if n.endswith("_s") else 0.01)
        t0, t1 = at_start.get(term, 0.0), predict({**base, n: moved}).get(term, 0.0)
        if abs(t1 - t0) < MIN_SENSITIVITY * max(abs(t0), 1e-12) or t0 == t1:
            left[n] = f"the twin's {term} does not move with it at this layout"
            continue
        keep.append(n)
    return keep, left


def fit_profile(measured: dict[str, float], predict: Predict, names: list[str] | None = None,
                base: dict[str, float] | None = None) -> ProfileFit:
    """Fit ``names`` (default: every :data:`FIT_TERMS` parameter the trace exercises) so that
    ``predict(overrides)``'s terms match ``measured`` (module docstring). ``base``: overrides the prediction
    starts from (a calibration already in use)."""
    from scipy.optimize import least_squares

    base = dict(base or {})
    for n in names or []:
        if n not in FIT_TERMS:
            raise SpecError(f"--fit: '{n}' is not a parameter a profile can fit{did_you_mean(n, FIT_TERMS)}; "
                            f"choose from {', '.join(FIT_TERMS)}")
    step = sum(measured.get(k, 0.0) for k in BREAKDOWN_KEYS)
    if step <= 0.0:
        raise SpecError("calibrate --profile: the measured step is empty (0 s), nothing to fit")
    fit_names, left = exercised(measured, predict, list(names or FIT_TERMS), base)
    before = predict(dict(base))
    if not fit_names:
        raise SpecError("calibrate --profile: the trace exercises none of the parameters asked ("
                        + "; ".join(f"{n}: {why}" for n, why in left.items()) + ")")
    scale = np.array([_default(n, base) or (1e-6 if n.endswith("_s") else 0.01) for n in fit_names])
    lo = np.array([bounds_of(n)[0] for n in fit_names]) / scale
    hi = np.array([bounds_of(n)[1] for n in fit_names]) / scale
    terms = [FIT_TERMS[n] for n in fit_names]
    want = np.array([measured.get(t, 0.0) for t in terms])

    def values(u: np.ndarray) -> dict[str, float]:
        return {**base, **{n: float(v) for n, v in zip(fit_names, u * scale, strict=True)}}

    def residual(u: np.ndarray) -> np.ndarray:
        got = predict(values(u))
        return (np.array([got.get(t, 0.0) for t in terms]) - want) / step

    u0 = np.clip(np.array([_default(n, base) for n in fit_names]) / scale, lo, hi)
    sol = least_squares(residual, u0, bounds=(lo, hi), x_scale=1.0, diff_step=1e-4, xtol=1e-10, ftol=1e-12,
                        gtol=1e-12, max_nfev=400)
    fitted = values(sol.x)
    after = predict(fitted)
    err = lambda got: max(abs(got.get(t, 0.0) - measured.get(t, 0.0)) / step for t in terms)  # noqa: E731
    return ProfileFit(params={n: fitted[n] for n in fit_names}, bounds={n: bounds_of(n) for n in fit_names},
                      left_out=left, measured=dict(measured), before=before, after=after,
                      max_term_error_before=err(before), max_term_error_after=err(after),
                      start={n: _default(n, base) for n in fit_names})
