"""Process grids: the P x Q grid of HPL and the x-y(-z) domain decomposition of a stencil, and how their
rows and columns fall onto nodes (one process per GPU, each node's GPUs a compact block of the grid)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustertwin.errors import SpecError


def near_square(n: int) -> tuple[int, int]:
    """(P, Q) with P x Q = n, P <= Q and P the largest divisor of n at most sqrt(n) (HPL's advice)."""
    p = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return p, n // p


MAX_ASPECT = 4
"""Longest Q/P that HPL runs use (tuning guides: P:Q between 1:1 and 1:4)."""
MAX_IDLE_FRACTION = 0.03
"""Largest share of GPUs a default HPL grid leaves idle to reach a usable P x Q shape."""


def hpl_gpus(gpus: int, gpus_per_node: int) -> int:
    """GPUs a default HPL run uses: all of them when ``near_square`` gives Q/P <= MAX_ASPECT, else the
    largest count of whole nodes within MAX_IDLE_FRACTION that does (23,536 = 16 x 1,471 has no usable
    grid; 23,520 = 140 x 168 has); the most square candidate when none does."""
    step = max(1, min(gpus_per_node, gpus))
    lowest = max(step, int(gpus * (1 - MAX_IDLE_FRACTION)))
    best, best_aspect = gpus, math.inf
    g = gpus
    while g >= lowest:
        p, q = near_square(g)
        if q / p <= MAX_ASPECT:
            return g
        if q / p < best_aspect:
            best, best_aspect = g, q / p
        g = (g - 1) // step * step if g % step else g - step
    return best


@dataclass(frozen=True)
class Grid:
    """A P x Q process grid on nodes of ``gpus_per_node``; each node holds a ``p_local x q_local`` block,
    so a process row spans ``Q / q_local`` nodes with ``q_local`` ranks on each (columns likewise)."""

    p: int
    q: int
    p_local: int
    q_local: int

    @property
    def size(self) -> int:
        return self.p * self.q


def grid(gpus: int, gpus_per_node: int, p: int | None = None, q: int | None = None) -> Grid:
    """The grid of ``gpus`` processes (P, Q given or near-square) and its node-local block."""
    if p is None and q is None:
        p, q = near_square(gpus)
    elif p is None:
        assert q is not None
        if gpus % q:
            raise SpecError(f"Q={q} does not divide {gpus} GPUs", path=("q",))
        p = gpus // q
    elif q is None:
        if gpus % p:
            raise SpecError(f"P={p} does not divide {gpus} GPUs", path=("p",))
        q = gpus // p
    if p * q != gpus:
        raise SpecError(f"P x Q = {p} x {q} = {p * q}, expected the {gpus} GPUs", path=("p",))
    g = min(gpus_per_node, gpus)
    best = (1, 1)
    for pl in range(1, g + 1):
        if g % pl or p % pl:
            continue
        ql = g // pl
        if q % ql:
            continue
        # the most square local block: fewest ranks per node on the longer communication direction
        if abs(pl - ql) < abs(best[0] - best[1]) or best == (1, 1):
            best = (pl, ql)
    return Grid(p=p, q=q, p_local=best[0], q_local=best[1])
