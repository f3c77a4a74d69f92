"""EASY backfill and preemption of the scheduler simulator (mixed into :class:`~clustertwin.sched.engine.Simulator`):
the head job's reservation (the earliest time enough GPUs are free, from the running jobs' end times), jobs
started ahead of it only where they end before that time or do not touch its reserved capacity, the
reservation updated as allocations are released, and preemption of lower-priority jobs for the head."""

from __future__ import annotations

import bisect
import heapq
import math

from clustertwin.sched.projection import Projection
from clustertwin.sched.state import Allocation, Request

_FEW_SHAPES = 64
"""Up to this many job shapes, backfill keeps its per-shape tests in a list and stops once none is open."""


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
        (so the shadow only moves earlier); backfilled starts update the projection themselves. A node
        failure or repair, or a start outside backfill, drops it. The kept reservation is not always the
        one a fresh walk would build: on seeded traces with preemption, multifactor priorities or
        failures a from-scratch recomputation differs in about half the cases (known limitation; the
        real-Slurm cross-check agrees within its tolerance, docs/sched.md)."""
        res = self._res
        if res is None or res[0] != head:
            proj = Projection(self.state, self.requests[head])
            rel: list[tuple[float, int, int]] = []
            live = self.run_key
            running = self.running
            while running and live.get(running[0][2]) is not running[0]:
                heapq.heappop(running)  # stale keys on top go for good
                self.running_stale -= 1
            pending = running.copy()  # (a heap: popped in key order, as a sorted walk would visit)
            while pending:
                key = heapq.heappop(pending)
                if live.get(key[2]) is not key:
                    continue  # stale: that job stopped
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

    def _refuse_with(self) -> tuple[tuple[int, ...], ...]:
        """Per shape, the shapes a refusal for the head's sake also refuses until the next start: itself, and
        for spread shapes on any node under first-fit / best-fit the larger ones of its family too (their
        allocation on the same state takes a superset of its GPUs, and every contribution to the head's
        fit only falls as GPUs are taken, so they cannot leave the head fitting either)."""
        out = getattr(self, "_refuse_with_cache", None)
        if out is None:
            nested = getattr(self.placer, "variant", self.placer.name) in ("first-fit", "best-fit")
            out = tuple(larger if nested and r.kind == "spread" and r.all_eligible else (s,)
                        for s, (r, larger) in enumerate(zip(self.shapes.requests, self.shapes.larger_in_family,
                                                            strict=True)))
            self._refuse_with_cache = out
            self._spread_any = [r.kind == "spread" and r.all_eligible for r in self.shapes.requests]
            self._shape_g = [r.g for r in self.shapes.requests]
        return out

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
        free_milli = st.free_total
        if free_milli <= 0:
            return
        # Nothing started or stopped since a pass that started nothing, same head, same window: every job
        # in it was refused then on the same state and projection, and would be again (a job that was
        # short only gets longer relative to the shadow), so the pass would start nothing.
        window = q[h + 1:last]
        mark = (self.stop_version, self.starts, head)
        if self._bf_idle == mark and self._bf_idle_window == window:
            return
        # Between releases the state only shrinks, so a shape that does not fit now never will until the
        # next release (dead: that shape and the larger ones of its family); a shape refused for the
        # head's sake stays refused until the next start changes the state (refused).
        if self._bf_dead[0] != self.stop_version:
            self._bf_dead = (self.stop_version, set())
        dead = self._bf_dead[1]
        # a whole-GPU shape needing more free GPUs than the freest node has, or a share larger than the
        # largest free share, cannot start during this pass (the state only shrinks)
        wmax = st.whole_max()
        tmax = int(st.top.max()) if self._has_shares else 0
        whole_need, share_need = self._whole_need, self._share_need
        shape_q, limit_q = self._shape_list_q, self._limit_list_q
        job_of = None if self.dynamic else self.job_of_rank_list
        started = []
        refused: set[int] = set()
        quota = self.quota
        total_gpus = self.total_gpus_list
        requests = self.shapes.requests
        milli_s = self._shape_milli
        larger = self.shapes.larger_in_family
        refuse_with = self._refuse_with()
        spread_any, gpus_s = self._spread_any, self._shape_g
        place = self.placer.place
        # with few shapes, the tests above are kept per shape (open_), and the pass ends once no shape is open
        n_shapes = len(requests)
        open_: list[bool] | None = None
        if n_shapes <= _FEW_SHAPES:
            open_ = [o not in dead and milli_s[o] <= free_milli and whole_need[o] <= wmax and share_need[o] <= tmax
                     for o in range(n_shapes)]
            n_open = sum(open_)
        for i in range(h + 1, last):
            if open_ is not None and not n_open:
                break
            e = q[i]
            s = shape_q[e]
            if open_ is not None:
                if not open_[s]:
                    continue
            elif s in dead or milli_s[s] > free_milli or whole_need[s] > wmax or share_need[s] > tmax:
                continue
            short = t + limit_q[e] <= shadow
            if not short and s in refused:
                continue
            j = e if job_of is None else job_of[e]
            if quota is not None and not quota.admits(j, total_gpus[j]):
                continue
            if not short and spread_any[s] and proj.refuses_spread(gpus_s[s]):
                refused.update(refuse_with[s])  # (as take_if_still_fits would on its allocation)
                continue
            alloc = place(st, requests[s])
            if alloc is None:
                dead.update(larger[s])
                if open_ is not None:
                    for o in larger[s]:
                        if open_[o]:
                            open_[o] = False
                            n_open -= 1
                continue
            if short:
                proj.freeze(alloc.node_list)
            elif not proj.take_if_still_fits(alloc):
                refused.update(refuse_with[s])
                continue
            self._in_backfill = True
            self._start(j, alloc, t)
            self._in_backfill = False
            if short:
                bisect.insort(rel, self.run_key[j])  # free again by the shadow time
            free_milli -= alloc.total_milli
            refused.clear()
            started.append(i)
            if free_milli <= 0:
                break
            if open_ is not None:
                wmax = st.whole_max()
                for o in range(n_shapes):
                    if open_[o] and (milli_s[o] > free_milli or whole_need[o] > wmax):
                        open_[o] = False
                        n_open -= 1
        if not started:
            self._bf_idle, self._bf_idle_window = mark, window
        if len(started) > 2:  # (one slice assignment: a single move of the queue's tail)
            gone = set(started)
            q[h + 1:last] = [q[i] for i in range(h + 1, last) if i not in gone]
        else:
            for pos in reversed(started):
                del q[pos]

    # ------------------------------------------------------------------ metrics over time
