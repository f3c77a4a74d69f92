"""Loads on shared link bundles for one collective phase of many concurrent groups: the vectorised sums
behind :func:`clustertwin.topology.group_bandwidth`, shared by the network classes
(:mod:`clustertwin.topology.networks`).

``tier_fractions``: a tier of blocks (leaves, pods) each with one up/down bundle of capacity ``cap``; ring
traffic crosses a bundle where consecutive members sit on different blocks, all-to-all traffic leaves a block
in proportion ``(n - e)/(n - 1)`` of a member's share (``e`` the group's members on that block).
``global_link_fractions``: Dragonfly+ ``m x port`` global links between each pair of groups (minimal
routing). A group's fraction is ``min(1, capacity / load)`` over the bundles its traffic crosses.
"""

from __future__ import annotations

import numpy as np


def pair_share(a: np.ndarray) -> np.ndarray:
    """Per group: share of ordered member pairs on the same block, ``sum e (e - 1) / (n (n - 1))``."""
    n_groups, n = a.shape
    nb = int(a.max()) + 1
    key = np.repeat(np.arange(n_groups), n) * nb + a.reshape(-1)
    uk, cnt = np.unique(key, return_counts=True)
    same = np.bincount(uk // nb, weights=cnt * (cnt - 1.0), minlength=n_groups)
    return same / (n * (n - 1.0))


def tier_fractions(a: np.ndarray, a_next: np.ndarray, w: np.ndarray, pattern: str, cap: float) -> tuple[float, np.ndarray]:
    """Load/capacity of the worst block of one tier and each group's fraction through it."""
    n_groups, n = a.shape
    nb = int(max(a.max(), a_next.max())) + 1
    if pattern == "ring":
        cross = a != a_next
        out = np.bincount(a[cross], weights=w[cross], minlength=nb)
        inn = np.bincount(a_next[cross], weights=w[cross], minlength=nb)
        load = np.maximum(out, inn)
        ratio_b = np.where(load > 0, cap / np.maximum(load, 1e-300), np.inf)
        edge = np.where(cross, np.minimum(ratio_b[a], ratio_b[a_next]), np.inf)
        per_group = np.minimum(1.0, edge.min(axis=1))
    else:
        gid = np.repeat(np.arange(n_groups), n)
        key = gid * nb + a.reshape(-1)
        _, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
        e = cnt[inv].reshape(a.shape).astype(float)  # members of the row's group on the same block
        send = w * (n - e) / (n - 1)  # each member's traffic leaving its block
        load = np.bincount(a.reshape(-1), weights=send.reshape(-1), minlength=nb)  # in == out by symmetry
        ratio_b = np.where(load > 0, cap / np.maximum(load, 1e-300), np.inf)
        per_group = np.minimum(1.0, np.where(e < n, ratio_b[a], np.inf).min(axis=1))
    return float((np.where(np.isfinite(ratio_b), 1.0 / ratio_b, 0.0)).max()), per_group


def global_link_fractions(a: np.ndarray, a_next: np.ndarray, w: np.ndarray, pattern: str, ng: int,
                          cap: float) -> tuple[float, np.ndarray]:
    """Dragonfly+ global links: ``cap = m x port`` per direction between each pair of the ``ng`` groups."""
    n_groups, n = a.shape
    if cap <= 0:
        return np.inf, np.zeros(n_groups)
    if pattern == "ring":
        cross = a != a_next
        pair = a * ng + a_next
        load = np.bincount(pair[cross], weights=w[cross], minlength=ng * ng)
        edge = np.where(cross, cap / np.maximum(load[pair], 1e-300), np.inf)
        per_group = np.minimum(1.0, edge.min(axis=1))
        return float(load.max() / cap), per_group
    counts = np.zeros((n_groups, ng))
    np.add.at(counts, (np.repeat(np.arange(n_groups), n), a.reshape(-1)), 1.0)
    wg = w.mean(axis=1)[:, None] / (n - 1)
    load = (counts * wg).T @ counts  # traffic between every pair of Dragonfly+ groups
    np.fill_diagonal(load, 0.0)
    ratio = np.where(load > 0, cap / np.maximum(load, 1e-300), np.inf)
    per_group = np.ones(n_groups)
    for i in range(n_groups):  # groups touch few Dragonfly+ groups: this loop is over job groups only
        touched = np.nonzero(counts[i])[0]
        if touched.size > 1:
            per_group[i] = min(1.0, float(ratio[np.ix_(touched, touched)].min()))
    return float(load.max() / cap), per_group
