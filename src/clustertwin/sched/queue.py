"""The scheduler's queue as a mixin of :class:`clustertwin.sched.engine.Simulator`: enqueue and withdraw a
job, map queue entries to jobs, accrue fair-share usage and re-sort a dynamic (multifactor) order.

A static order keeps the queue as a sorted list of ranks (``bisect.insort``); a dynamic order keeps job ids
and re-sorts them by ``priorities`` at every pass. Fair-share usage decays by ``2**(-dt / half_life)`` and
gains the running GPU-seconds (Slurm classic fair-share, :mod:`clustertwin.sched.policy`).
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from clustertwin.sched.job_states import PENDING, QUEUED


class QueueMixin:
    """Queue operations; the simulator supplies the state (``queue``, ``rank``, ``job_state``, ``quota`` ...)."""

    queue: Any
    rank: Any
    job_state: Any
    job_of_rank_list: Any
    dynamic: bool
    quota: Any
    team_queued: Any
    usage_t: float
    account_usage: Any
    account_running_gpus: Any
    cfg: Any
    order: Any

    def withdraw(self, j: int) -> None:
        """Take queued job ``j`` out of this cluster's queue (it started elsewhere in a federation)."""
        if self.job_state[j] != QUEUED:
            return
        if self.dynamic:
            self.queue.remove(j)
        else:
            r = int(self.rank[j])
            i = bisect.bisect_left(self.queue, r)
            del self.queue[i]
        self.job_state[j] = PENDING

    def _enqueue(self, j: int) -> None:
        self.job_state[j] = QUEUED
        if self.quota is not None:
            self.team_queued[self.quota.team[j]] += 1
        if self.dynamic:
            self.queue.append(j)
        else:
            bisect.insort(self.queue, int(self.rank[j]))

    def _job(self, q: int) -> int:
        return q if self.dynamic else self.job_of_rank_list[q]

    def _accrue(self, t: float) -> None:
        """Fair-share usage: decay by 2**(-dt / half_life), add running GPU-seconds."""
        dt = t - self.usage_t
        if dt <= 0 or not self.dynamic:
            self.usage_t = max(self.usage_t, t)
            return
        decay = 2.0 ** (-dt / self.cfg.weights.half_life_s)
        self.account_usage = self.account_usage * decay + self.account_running_gpus * dt
        self.usage_t = t

    def _order_dynamic(self, t: float) -> None:
        q = np.array(self.queue, dtype=np.int64)
        prio = self.order.priorities(t, q, self)
        self.queue = q[np.lexsort((q, -prio))].tolist()
