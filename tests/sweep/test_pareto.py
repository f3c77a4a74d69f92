"""Pareto fronts: exactly the non-dominated points."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from clustertwin.sweep import pareto_mask


def test_hand_example() -> None:
    """(1,5), (2,3), (4,1) trade off; (3,4) is beaten by (2,3); NaN never counts."""
    x = np.array([1.0, 2.0, 3.0, 4.0, np.nan])
    y = np.array([5.0, 3.0, 4.0, 1.0, 0.0])
    assert pareto_mask(x, y).tolist() == [True, True, False, True, False]


def test_duplicates_keep_one() -> None:
    """Of identical points only the first is on the front."""
    assert pareto_mask(np.array([1.0, 1.0]), np.array([2.0, 2.0])).tolist() == [True, False]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=30))
def test_matches_brute_force(points) -> None:
    """The mask equals the O(n^2) definition (first of duplicates kept)."""
    a = np.array(points, dtype=float)
    x, y = a[:, 0], a[:, 1]
    expected = []
    for i in range(len(a)):
        dominated = any((x[j] <= x[i] and y[j] <= y[i] and (x[j] < x[i] or y[j] < y[i]))
                        or (x[j] == x[i] and y[j] == y[i] and j < i) for j in range(len(a)))
        expected.append(not dominated)
    assert pareto_mask(x, y).tolist() == expected
