"""Projected cluster states for backfill reservations and preemption: "would the request fit if these
allocations were released / taken?", answered on copies of the touched nodes' rows without changing the
real :class:`~clustertwin.sched.state.ClusterState`."""

from __future__ import annotations

from clustertwin.sched.jobs import MILLI_PER_GPU
from clustertwin.sched.state import Allocation, ClusterState, Request


def row_contribution(req: Request, node: int, row: list[int], res: list[int] | None = None) -> int:
    """:meth:`ClusterState.contribution` of one node whose free slots are ``row`` and free
    ``[cpu, memory]`` is ``res`` (plain Python, for the projected states of backfill and preemption)."""
    if not req.eligible[node]:
        return 0
    if req.has_res and res is not None and (res[0] < req.cpu or res[1] < req.mem):
        return 0
    if req.kind == "share":
        return 1 if max(row) >= req.m else 0
    whole = row.count(MILLI_PER_GPU)
    if req.kind == "whole":
        return 1 if whole >= req.g else 0
    return whole


class Projection:
    """A copy-on-write view of ``free`` used to ask "would the request fit if these allocations were
    released / taken?" without touching the real state. Tracks the request's total contribution."""

    def __init__(self, state: ClusterState, req: Request) -> None:
        self.state = state
        self.req = req
        self.rows: dict[int, list[int]] = {}
        self.res: dict[int, list[int]] = {}
        self._fast = req.kind == "whole" and not req.has_res and req.all_eligible
        """Whole-GPU units on any node: a node's contribution is ``[wholly free GPUs >= g]``."""
        self._spread = req.kind == "spread" and req.all_eligible
        """GPUs spread over any nodes: the contribution total is the count of wholly free GPUs."""
        if self._spread:
            self.total = state.whole_sum
        elif req.kind == "whole" and not req.has_res:
            self.total = state.nodes_with_whole(req.g, req.elig_mask).bit_count()
        else:
            self.total = int(state.contribution(req).sum())

    def row(self, node: int) -> list[int]:
        r = self.rows.get(node)
        if r is None:
            r = self.state.rows[node].copy()
            self.rows[node] = r
            self.res[node] = [int(self.state.cpu_free[node]), int(self.state.mem_free[node])]
        return r

    def freeze(self, nodes: tuple[int, ...]) -> None:
        """Copy these rows now: call before the real state of ``nodes`` changes, so that the projection
        stays "state when created + its own releases and takes"."""
        for n in nodes:
            self.row(n)

    def _change(self, alloc: Allocation, sign: int) -> int:
        """Apply ``sign * alloc`` to the projected rows; return the change of the contribution total."""
        req = self.req
        rows, res = self.rows, self.res
        nodes = alloc.node_list
        for n in nodes:
            if n not in rows:
                self.row(n)
        if req.kind == "whole" and not req.has_res and req.all_eligible:
            # (the common case, inlined: row_contribution of a whole-GPU unit on any node)
            g = req.g
            before = 0
            for n in nodes:
                before += rows[n].count(MILLI_PER_GPU) >= g
            for n, s, m in alloc.entries:
                rows[n][s] += sign * m
            after = 0
            for n in nodes:
                after += rows[n].count(MILLI_PER_GPU) >= g
            return after - before
        before = 0
        for n in nodes:
            before += row_contribution(req, n, rows[n], res[n])
        for n, s, m in alloc.entries:
            rows[n][s] += sign * m
        if alloc.cpu or alloc.mem:
            for n in nodes:
                r = res[n]
                r[0] += sign * alloc.cpu
                r[1] += sign * alloc.mem
        after = 0
        for n in nodes:
            after += row_contribution(req, n, rows[n], res[n])
        return after - before

    def _fast_delta(self, alloc: Allocation, sign: int) -> int:
        """The contribution change ``sign * alloc`` would make (fast case only; rows not changed). An
        allocation's ``(node, slot)`` pairs are distinct."""
        rows = self.rows
        g = self.req.g
        if len(alloc.node_list) == 1:
            n = alloc.node_list[0]
            row = rows.get(n)
            if row is None:
                row = self.row(n)
            before = after = row.count(MILLI_PER_GPU)
            for _, s, m in alloc.entries:
                v = row[s]
                after += (v + sign * m == MILLI_PER_GPU) - (v == MILLI_PER_GPU)
            return (after >= g) - (before >= g)
        groups = alloc.groups
        if groups is not None:  # whole GPUs, one group per distinct node
            d = sign * MILLI_PER_GPU
            delta = 0
            for n, slots in groups:
                row = rows.get(n)
                if row is None:
                    row = self.row(n)
                before = after = row.count(MILLI_PER_GPU)
                for s in slots:
                    v = row[s]
                    after += (v + d == MILLI_PER_GPU) - (v == MILLI_PER_GPU)
                delta += (after >= g) - (before >= g)
            return delta
        counts: dict[int, list[int]] = {}
        for n, s, m in alloc.entries:
            c = counts.get(n)
            row = rows.get(n)
            if row is None:
                row = self.row(n)
            if c is None:
                w = row.count(MILLI_PER_GPU)
                c = counts[n] = [w, w]
            v = row[s]
            c[1] += (v + sign * m == MILLI_PER_GPU) - (v == MILLI_PER_GPU)
        return sum((after >= g) - (before >= g) for before, after in counts.values())

    def _spread_delta(self, alloc: Allocation, sign: int) -> int:
        """The change of wholly free GPUs ``sign * alloc`` would make (rows not changed)."""
        rows = self.rows
        delta = 0
        groups = alloc.groups
        if groups is not None:
            d = sign * MILLI_PER_GPU
            for n, slots in groups:
                row = rows.get(n)
                if row is None:
                    row = self.row(n)
                for s in slots:
                    v = row[s]
                    delta += (v + d == MILLI_PER_GPU) - (v == MILLI_PER_GPU)
            return delta
        for n, s, m in alloc.entries:
            row = rows.get(n)
            if row is None:
                row = self.row(n)
            v = row[s]
            delta += (v + sign * m == MILLI_PER_GPU) - (v == MILLI_PER_GPU)
        return delta

    def _apply_rows(self, alloc: Allocation, sign: int) -> None:
        rows = self.rows
        groups = alloc.groups
        if groups is not None:
            d = sign * MILLI_PER_GPU
            for n, slots in groups:
                row = rows[n]
                for s in slots:
                    row[s] += d
            return
        for n, s, m in alloc.entries:
            rows[n][s] += sign * m

    def release(self, alloc: Allocation) -> None:
        if self._fast or self._spread:
            self.total += self._spread_delta(alloc, +1) if self._spread else self._fast_delta(alloc, +1)
            self._apply_rows(alloc, +1)
            return
        self.total += self._change(alloc, +1)

    def take_if_still_fits(self, alloc: Allocation) -> bool:
        """Take ``alloc`` if the request still fits afterwards; otherwise leave the projection unchanged."""
        if self._fast or self._spread:
            delta = self._spread_delta(alloc, -1) if self._spread else self._fast_delta(alloc, -1)
            if self.total + delta < self.req.need:
                return False
            self._apply_rows(alloc, -1)
            self.total += delta
            return True
        delta = self._change(alloc, -1)
        if self.total + delta >= self.req.need:
            self.total += delta
            return True
        self._change(alloc, +1)
        return False

    def refuses_spread(self, gpus: int) -> bool:
        """True if taking ``gpus`` GPUs that are wholly free in the real state cannot leave a spread head
        (any node) fitting: for such a head the total is the count of wholly free GPUs, and the projected
        rows are never below the real ones (the projection is the real state plus the releases it expects
        by the shadow time), so each such GPU is wholly free here too and the total falls by ``gpus``.
        False when the head is not of that kind (nothing is decided here)."""
        return self._spread and self.total - gpus < self.req.need

    @property
    def fits(self) -> bool:
        return self.total >= self.req.need
