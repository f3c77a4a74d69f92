"""Interval arithmetic on sorted, disjoint lists of ``(start, end)`` pairs (microseconds).

Every measured term is a length of such a set: busy = the union of a rank's device intervals, exposed
communication = communication minus computation, idle = the step window minus busy. ``merge`` is HTA's
``merge_kernel_intervals`` (sort by start, fuse overlapping or touching intervals).
"""

from __future__ import annotations

from collections.abc import Iterable

Intervals = list[tuple[float, float]]


def merge(spans: Iterable[tuple[float, float]]) -> Intervals:
    """Union of possibly overlapping spans as a sorted disjoint list (empty spans dropped)."""
    out: Intervals = []
    for s, e in sorted(x for x in spans if x[1] > x[0]):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def length(a: Intervals) -> float:
    """Total length of a disjoint list."""
    return sum(e - s for s, e in a)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """``a ∩ b`` of two disjoint sorted lists (two-pointer sweep, O(len a + len b))."""
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """``a \\ b`` of two disjoint sorted lists."""
    out: Intervals = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            if b[k][1] >= e:
                break
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def clip(a: Intervals, start: float, end: float) -> Intervals:
    """The part of ``a`` inside ``[start, end)``."""
    return intersect(a, [(start, end)]) if end > start else []


def union(*sets: Intervals) -> Intervals:
    """Union of several disjoint lists."""
    return merge(x for s in sets for x in s)
