"""Pareto fronts of sweep results: the points that no other point beats on both objectives (both
minimised), e.g. time-to-train against cost or against energy."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

FRONTS: dict[str, tuple[str, str]] = {
    "time_vs_cost": ("wall_days", "cost_usd"),
    "time_vs_energy": ("wall_days", "energy_mwh"),
}
"""Fronts ``clustertwin sweep`` prints: name -> (x column, y column), both minimised."""


def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Boolean mask of the non-dominated points (minimising ``x`` and ``y``; NaN/inf never on the front).

    A point is on the front when no other point has ``x' <= x`` and ``y' <= y`` with one of them strictly
    smaller. Sorting by (x, y) and keeping each point whose y is below every y before it finds them in
    O(n log n); of exact duplicates only the first (lowest index) is kept."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"x and y differ in shape: {x.shape} vs {y.shape}")
    mask = np.zeros(x.shape, dtype=bool)
    finite = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    if len(finite) == 0:
        return mask
    order = finite[np.lexsort((finite, y[finite], x[finite]))]
    ys = y[order]
    best_before = np.minimum.accumulate(np.r_[np.inf, ys[:-1]])
    mask[order[ys < best_before]] = True
    return mask


def front(table: pa.Table, x: str, y: str) -> pa.Table:
    """Rows of ``table`` with status ``ok`` on the (x, y) Pareto front, sorted by ``x``."""
    ok = np.asarray(table["status"].to_numpy(zero_copy_only=False) == "ok")
    xs = np.where(ok, table[x].to_numpy(zero_copy_only=False).astype(np.float64), np.nan)
    ys = np.where(ok, table[y].to_numpy(zero_copy_only=False).astype(np.float64), np.nan)
    idx = np.flatnonzero(pareto_mask(xs, ys))
    idx = idx[np.argsort(xs[idx], kind="stable")]
    return table.take(pa.array(idx, type=pa.int64()))


def fronts_by(table: pa.Table, x: str, y: str, key: str = "model") -> dict[str, pa.Table]:
    """One (x, y) Pareto front per value of ``key`` (default: per model, in first-seen order): points of
    different models train different things and must not dominate each other."""
    keys = table[key].to_pylist()
    out: dict[str, pa.Table] = {}
    for k in dict.fromkeys(keys):
        idx = [i for i, v in enumerate(keys) if v == k]
        out[str(k)] = front(table.take(pa.array(idx, type=pa.int64())), x, y)
    return out
