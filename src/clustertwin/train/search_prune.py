"""Dominance pruning of a layout grid before the step-time model (used for MoE grids, which EP x ETP make
~10x larger than dense ones).

Of layouts that differ only in recompute mode and ZeRO stage, only the cheapest that fits in memory is
timed: recompute ``none`` < ``selective`` < ``full`` only adds forward work, and ZeRO-1 (Megatron's
distributed optimizer: reduce-scatter + all-gather, the all-reduce's volume) < ZeRO-2 (the same
communication, less gradient memory) < ZeRO-0 (an all-reduce and no optimizer sharding; kept after
ZeRO-1 and -2, which need the stack's distributed optimizer) < ZeRO-3 (adds the parameter gathers).
Memory is evaluated level by level in that order, only for the groups that have no fitting layout yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from clustertwin.train.layout import LAYOUT_FIELDS, Layouts

#: ZeRO stage -> rank in the cost order of the module docstring
ZERO_RANK = np.array([2, 0, 1, 3])
#: columns that define a group (every layout field but recompute and zero)
GROUP_FIELDS = tuple(f for f in LAYOUT_FIELDS if f not in ("recompute", "zero"))


@dataclass
class Pruned:
    keep: np.ndarray
    """indices (grid order) of the cheapest fitting layout of every group that has one"""
    oom_terms: np.ndarray
    """largest memory term index of every evaluated layout that did not fit"""
    evaluated: int
    """layouts whose memory was evaluated"""


def group_ids(lay: Layouts) -> np.ndarray:
    """Group number of every layout (equal in every field but recompute and zero)."""
    cols = [np.asarray(getattr(lay, f)) for f in GROUP_FIELDS]
    order = np.lexsort(cols[::-1])
    new = np.zeros(len(order), dtype=bool)
    new[0] = True
    for c in cols:
        cs = c[order]
        new[1:] |= cs[1:] != cs[:-1]
    gid = np.empty(len(order), dtype=np.int64)
    gid[order] = np.cumsum(new) - 1
    return gid


def cheapest_fitting(lay: Layouts, memory: Callable[[Layouts], tuple[np.ndarray, np.ndarray]]) -> Pruned:
    """The cheapest fitting layout of each group; ``memory(sub)`` returns (fits, largest term index)."""
    if len(lay) == 0:
        return Pruned(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0)
    gid = group_ids(lay)
    cost = np.asarray(lay.recompute, dtype=np.int64) * 4 + ZERO_RANK[np.asarray(lay.zero, dtype=np.int64)]
    done = np.zeros(int(gid.max()) + 1, dtype=bool)
    keep, terms, evaluated = [], [], 0
    for level in np.unique(cost):
        rows = np.flatnonzero((cost == level) & ~done[gid])
        if len(rows) == 0:
            continue
        fits, largest = memory(lay.take(rows))
        evaluated += len(rows)
        keep.append(rows[fits])
        terms.append(largest[~fits])
        done[gid[rows[fits]]] = True
    return Pruned(np.sort(np.concatenate(keep)), np.concatenate(terms), evaluated)
