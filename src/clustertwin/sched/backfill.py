"""EASY backfill and preemption of the scheduler simulator (mixed into :class:`~clustertwin.sched.engine.Simulator`):
the head job's reservation (the earliest time enough GPUs are free, from the running jobs' end times), jobs
started ahead of it only where they end before that time or do not touch its reserved capacity, the
reservation updated as allocations are released, and preemption of lower-priority jobs for the head."""

from __future__ import annotations

import bisect
import math

import numpy as np

from clustertwin.sched.state import Allocation, Projection, Request

_NEVER = 1 << 62
"""A time later than any simulated event (an unreachable reservation)."""


class BackfillMixin:
    """The backfill and preemption methods; the state they read is the Simulator's."""

    def _shrink(self, j: int) -> Allocation | None:
        """An elastic head that does not fit whole starts on the most GPUs that fit, down to its minimum."""
        req = self.requests[j]
        largest = self.cluster.max_gpus_per_node
        for g in range(int(self.jobs.gpus_per_unit[j]) - 1, int(self.jobs.min_gpus[j]) - 1, -1):
            kind = "whole" if g <= largest else "spread"
            alloc = self.placer.place(self.state, Request(kind, g, 0, 1, req.eligible, req.cpu, req.mem))
            if alloc is not None:
                return alloc
        return None

    def _preempt_for(self, head: int, t: float) -> bool:
        """Kill lower-priority running jobs until ``head`` fits; False (nothing killed) if it cannot."""
        prio = self.jobs.priority
        victims = [k for k in self.alloc if prio[k] < prio[head]]
        if not victims:
            return False
        victims.sort(key=lambda k: (prio[k], -self.start[k], -k))
        proj = Projection(self.state, self.requests[head])
        chosen = []
        for k in victims:
            proj.release(self.alloc[k])
            chosen.append(k)
            if proj.fits:
                break
        if not proj.fits:
            return False
        for k in chosen:
            self.preemptions += 1
            self._kill(k, t, requeue=True)
        return True

    def _reserve(self, head: int, t: float) -> tuple[float, Projection]:
        """The head's shadow time (when it fits if running jobs end at their limits) and the projected
        state then: the smallest prefix of the running jobs, by limit end, whose release lets it fit.

        Kept between passes while the head is the same: a job that ends early and was not in the prefix
        is released in the projection and the prefix shrinks from its end while the head still fits
        (so the shadow only moves earlier, exactly as a recomputation would place it); backfilled starts
        update the projection themselves. A node failure or repair, or a start outside backfill, drops it."""
        res = self._res
        if res is None or res[0] != head:
            proj = Projection(self.state, self.requests[head])
            rel: list[tuple[float, int, int]] = []
            for key in self.running:
                proj.release(self.alloc[key[2]])
                rel.append(key)
                if proj.fits:
                    break
            res = self._res = [head, proj, rel]
        proj, rel = res[1], res[2]
        if not proj.fits:
            return math.inf, proj
        return (max(rel[-1][0], t) if rel else t), proj

    def _res_release(self, alloc: Allocation) -> None:
        """A job outside the reservation's prefix ended: free it in the projection, then give back the
        prefix's last jobs while the head still fits without them."""
        _, proj, rel = self._res
        proj.release(alloc)
        if proj.fits:  # (if the prefix was every running job and the head did not fit, it may now)
            while rel and proj.take_if_still_fits(self.alloc[rel[-1][2]]):
                rel.pop()

    def _backfill(self, t: float, h: int = 0) -> None:
        """EASY backfill behind the head at queue position ``h`` (jobs before it wait for quota)."""
        q = self.queue
        head = self._job(q[h])
        shadow, proj = self._reserve(head, t)
        rel = self._res[2]
        self.first_reservation.setdefault(head, shadow)
        last = min(len(q), h + self.cfg.backfill_window + 1)
        if last <= h + 1:
            return
        st = self.state
        free_milli = int(st.tot.sum())
        if free_milli <= 0:
            return
        # vectorised pre-filter: a job that cannot fit the whole free pool, the largest free node or the
        # largest free share now never fits during this pass (the state only shrinks)
        ranks = np.array(q[h + 1:last], dtype=np.int64)
        cand = ranks if self.dynamic else self.job_of_rank[ranks]
        kind = self.req_kind[cand]
        g = self.req_g[cand]
        ok = (self.req_milli[cand] <= free_milli) & np.where(
            kind == 0, g <= int(st.whole.max()), np.where(kind == 1, self.req_m[cand] <= int(st.top.max()), True))
        if not ok.any():
            return
        started = []
        # Between releases the state only shrinks, so a shape that does not fit now never will (no_fit keeps
        # the smallest failing size per shape family); a shape refused for the head's sake stays refused
        # until the next start changes the state (refused).
        # (no_fit also holds across passes while nothing was released: the state has only shrunk since)
        if self._bf_no_fit[0] != self.stop_version:
            self._bf_no_fit = (self.stop_version, {})
        no_fit: dict[tuple, int] = self._bf_no_fit[1]
        refused: set[tuple] = set()
        limit = self.limit_list
        quota = self.quota
        total_gpus = self.total_gpus_list
        cand_l = cand.tolist()
        milli_l = self.req_milli[cand].tolist()
        requests = self.requests
        for i in np.flatnonzero(ok).tolist():
            if milli_l[i] > free_milli:  # (cheapest test first: every test here only skips)
                continue
            j = cand_l[i]
            req = requests[j]
            family = req.family
            if req.g >= no_fit.get(family, _NEVER):
                continue
            if quota is not None and not quota.admits(j, total_gpus[j]):
                continue
            short = t + limit[j] <= shadow
            if not short and (family, req.g) in refused:
                continue
            alloc = self.placer.place(st, req)
            if alloc is None:
                no_fit[family] = min(req.g, no_fit.get(family, _NEVER))
                continue
            if short:
                proj.freeze(alloc.node_list)
            elif not proj.take_if_still_fits(alloc):
                refused.add((family, req.g))
                continue
            self._in_backfill = True
            self._start(j, alloc, t)
            self._in_backfill = False
            if short:
                bisect.insort(rel, self.run_key[j])  # free again by the shadow time
            free_milli -= alloc.total_milli
            refused.clear()
            started.append(h + 1 + i)
            if free_milli <= 0:
                break
        for pos in reversed(started):
            del q[pos]

    # ------------------------------------------------------------------ metrics over time
