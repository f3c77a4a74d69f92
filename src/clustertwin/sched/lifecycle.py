"""Job lifecycle of the scheduler simulator (mixed into :class:`~clustertwin.sched.engine.Simulator`): a job
starts on an allocation, stops (releasing GPUs and the backfill reservation), ends, is killed or requeued, and
node failures kill the jobs on the node until it is repaired."""

from __future__ import annotations

import bisect
import heapq

from clustertwin.errors import SpecError
from clustertwin.sched.job_states import COMPLETED, END_EVENT, KILLED, REPAIR_EVENT, RUNNING
from clustertwin.sched.state import Allocation


class LifecycleMixin:
    """Start, stop, end, kill and failure handling; the state they change is the Simulator's."""

    def _start(self, j: int, alloc: Allocation, t: float) -> None:
        if not self._in_backfill:
            self._res = None
        self.state.apply(alloc, -1)
        self.starts += 1
        self.alloc[j] = alloc
        self.job_state[j] = RUNNING
        if self.first_start[j] != self.first_start[j]:  # NaN: never started before
            self.first_start[j] = t
        self.start[j] = t
        epoch = self.epoch[j] + 1
        self.epoch[j] = epoch
        # elastic jobs started on fewer GPUs take proportionally longer (fixed GPU-seconds of work)
        scale = self.total_gpus_list[j] / alloc.gpus if self.min_gpus_list[j] > 0 else 1.0
        self._push(t + self.runtime_list[j] * scale, END_EVENT, j, epoch)
        key = (t + self.limit_list[j] * scale, self.seq, j)
        heapq.heappush(self.running, key)
        self.run_key[j] = key
        leaf = self.leaf_list
        first_leaf = leaf[alloc.node_list[0]]
        for nd in alloc.node_list:
            self.node_jobs[nd].add(j)
            if leaf[nd] != first_leaf:
                self.multi_leaf[j] = True
        self.held_milli += alloc.total_milli
        self.held_work += alloc.gpus * self.work_frac_list[j]
        if self.dynamic:  # (fair-share usage accrues for dynamic orders only)
            self.account_running_gpus[self.account_of[j]] += alloc.gpus
        if self.quota is not None:
            self.quota.take(j, alloc.gpus)
            self.team_queued[self.quota.team[j]] -= 1
        if self.cfg.record_allocations:
            self._open_alloc[j] = (t, alloc.nodes.copy(), alloc.milli.copy())
        if self.on_start is not None:
            self.on_start(j)

    def _stop(self, j: int, t: float) -> None:
        self.stop_version += 1
        alloc = self.alloc.pop(j)
        key = self.run_key.pop(j)
        res = self._res
        release = False
        if res is not None:
            rel = res[2]
            r = bisect.bisect_left(rel, key)
            if r < len(rel) and rel[r] == key:
                del rel[r]  # already free in the projection
            else:
                res[1].freeze(alloc.node_list)
                release = True
        self.state.apply(alloc, +1)
        # (the key stays in the heap of running jobs until the heap is next compacted)
        self.running_stale += 1
        if self.running_stale > len(self.run_key) // 4 + 32:
            live = self.run_key
            self.running = [k for k in self.running if live.get(k[2]) is k]
            heapq.heapify(self.running)
            self.running_stale = 0
        if release:
            self._res_release(alloc)
        for nd in alloc.node_list:
            self.node_jobs[nd].discard(j)
        self.held_milli -= alloc.total_milli
        self.held_work -= alloc.gpus * self.work_frac_list[j]
        if self.dynamic:
            self.account_running_gpus[self.account_of[j]] -= alloc.gpus
        if self.quota is not None:
            self.quota.release(j, alloc.gpus)
        if self.cfg.record_allocations:
            t0, nodes, milli = self._open_alloc.pop(j)
            self.allocations.append((j, t0, t, nodes, milli))

    def _on_end(self, j: int, epoch: int, t: float) -> None:
        if self.epoch[j] != epoch or self.job_state[j] != RUNNING:
            return
        self._stop(j, t)
        self.end[j] = t
        if self.timeout_list[j]:
            self.job_state[j] = KILLED
            self.killed_by_timeout += 1
        else:
            self.job_state[j] = COMPLETED

    def _kill(self, j: int, t: float, *, requeue: bool) -> None:
        self._stop(j, t)
        self.epoch[j] += 1
        if requeue:
            self.requeues[j] += 1
            self.total_requeues += 1
            if self.total_requeues > self.cfg.max_requeues:
                raise SpecError(f"more than {self.cfg.max_requeues:,} requeue events (failures and preemptions) "
                                f"by t = {t:,.0f} s; raise --max-requeues or lower the failure rate")
            self._enqueue(j)
        else:
            self.job_state[j] = KILLED
            self.end[j] = t

    def _on_fail(self, node: int, i: int, t: float) -> None:
        for j in sorted(self.node_jobs[node]):
            self.failure_kills += 1
            self._kill(j, t, requeue=self.cfg.requeue_on_failure)
        self.state.set_down(node)
        self._res = None
        self.stop_version += 1
        self._push(t + float(self.failures.repair_s[i]), REPAIR_EVENT, node)

    # ------------------------------------------------------------------ scheduling
