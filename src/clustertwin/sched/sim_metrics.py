"""Metrics of the scheduler simulator (mixed into :class:`~clustertwin.sched.engine.Simulator`): the sampled
utilisation and queue timelines, the GPUs left fragmented (free but unusable by the queued shapes), and the
final :class:`SimResult`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from clustertwin.sched.jobs import MILLI_PER_GPU, JobTable
from clustertwin.sched.state import ClusterState


@dataclass
class SimResult:
    """Raw outcome of one simulation; :mod:`clustertwin.sched.metrics` turns it into metrics."""

    policy: str
    placement: str
    cluster_gpus: int
    jobs: JobTable
    state: np.ndarray
    first_start_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    requeues: np.ndarray
    unschedulable: np.ndarray
    multi_leaf: np.ndarray
    killed_by_timeout: int
    preemptions: int
    failure_kills: int
    timeline_t: np.ndarray
    timeline_alloc_gpus: np.ndarray
    timeline_running: np.ndarray
    timeline_queued: np.ndarray
    timeline_fragmented_gpus: np.ndarray
    timeline_work_gpus: np.ndarray | None = None
    """GPUs doing work: allocated GPUs x each job's own GPU utilisation (allocation where unknown)."""
    unschedulable_causes: dict[str, int] = field(default_factory=dict)
    first_reservation_s: dict[int, float] = field(default_factory=dict)
    allocations: list[tuple[int, float, float, np.ndarray, np.ndarray]] = field(default_factory=list)


class MetricsMixin:
    """The recording and result methods; the state they read is the Simulator's."""

    def _record(self, t: float) -> None:
        self.tl_t.append(t)
        self.tl_alloc.append(self.held_milli / MILLI_PER_GPU)
        self.tl_run.append(len(self.alloc))
        self.tl_queue.append(len(self.queue))
        self.tl_work.append(self.held_work)
        if t - self.frag_t >= self.cfg.fragmentation_sample_s or not self.tl_frag:
            self.frag_value = self._fragmented_milli() / MILLI_PER_GPU
            self.frag_t = t
        self.tl_frag.append(self.frag_value)

    def _window(self) -> np.ndarray:
        """Job ids of the head and the backfill window."""
        ranks = np.array(self.queue[: self.cfg.backfill_window + 1], dtype=np.int64)
        return ranks if self.dynamic else self.job_of_rank[ranks]

    def _fragmented_milli(self) -> int:
        """Free capacity no job in the queue window can use: wholly free GPUs on nodes where no queued
        whole/spread/share unit is eligible and fits, and partly free GPUs no queued share fits. Only the
        smallest whole-GPU unit and the smallest share per eligibility set matter."""
        st = self.state
        if not self.queue:
            return 0
        free_total = st.free_total
        if free_total == 0:
            return 0
        if self._frag_fast:  # one eligibility set of every node, no shares: from the whole-GPU histogram
            size, floor = self._size_of_q, self._size_floor
            smin = 1 << 62
            for e in self.queue[: self.cfg.backfill_window + 1]:
                if size[e] < smin:
                    smin = size[e]
                    if smin <= floor:
                        break
            count = st.whole_count
            return free_total - MILLI_PER_GPU * sum(w * count[w] for w in range(smin, len(count)))
        jobs = self._window()
        kind, elig = self.req_kind[jobs], self.req_elig[jobs]
        if len(self.elig_arrays) == 1 and not (kind == 1).any():  # one eligibility set, no shares
            size = np.where(kind == 2, 1, self.req_g[jobs])
            ok = st.whole >= int(size.min())
            if not self.elig_arrays[0].all():
                ok &= self.elig_arrays[0]
            return free_total - MILLI_PER_GPU * int(st.whole[ok].sum())
        size = np.where(kind == 1, self.req_m[jobs], np.where(kind == 2, 1, self.req_g[jobs]))
        whole_ok = np.zeros(self.cluster.nodes, dtype=bool)
        usable = None
        for code in np.unique(elig).tolist():
            mask = elig == code
            eligible = self.elig_arrays[code]
            sizes_whole = size[mask & (kind != 1)]
            if len(sizes_whole):
                whole_ok |= eligible & (st.whole >= int(sizes_whole.min()))
            sizes_share = size[mask & (kind == 1)]
            if len(sizes_share):
                whole_ok |= eligible
                part = eligible[:, None] & (st.free >= int(sizes_share.min()))
                usable = part if usable is None else usable | part
        if usable is None:
            return free_total - MILLI_PER_GPU * int(st.whole[whole_ok].sum())
        usable |= (st.free == MILLI_PER_GPU) & whole_ok[:, None]
        return free_total - int(st.free[usable].sum())

    def _result(self) -> SimResult:
        return SimResult(
            policy=self.policy.name,
            placement=self.cfg.placement,
            cluster_gpus=self.cluster.total_gpus,
            jobs=self.jobs,
            state=np.array(self.job_state, dtype=np.int64),
            first_start_s=np.array(self.first_start, dtype=float),
            start_s=np.array(self.start, dtype=float),
            end_s=np.array(self.end, dtype=float),
            requeues=self.requeues,
            unschedulable=self.unschedulable,
            multi_leaf=self.multi_leaf,
            killed_by_timeout=self.killed_by_timeout,
            preemptions=self.preemptions,
            failure_kills=self.failure_kills,
            timeline_t=np.array(self.tl_t),
            timeline_alloc_gpus=np.array(self.tl_alloc),
            timeline_running=np.array(self.tl_run, dtype=np.int64),
            timeline_queued=np.array(self.tl_queue, dtype=np.int64),
            timeline_fragmented_gpus=np.array(self.tl_frag),
            timeline_work_gpus=np.array(self.tl_work),
            unschedulable_causes=self.unschedulable_causes(),
            first_reservation_s=self.first_reservation,
            allocations=self.allocations,
        )

    def unschedulable_causes(self) -> dict[str, int]:
        """Why the unschedulable jobs can never start, counted by cause."""
        out: dict[str, int] = {}
        total = self.cluster.total_gpus
        gpus = self.jobs.total_gpus
        for j in np.flatnonzero(self.unschedulable).tolist():
            req = self.requests[j]
            if gpus[j] > total:
                cause = "more GPUs than the cluster"
            elif not req.eligible.any():
                cause = "no node of an allowed GPU model"
            elif self.quota is not None and self.quota.never_admits(j, float(gpus[j])):
                cause = "more GPUs than its team's quota can hold"
            else:
                cause = "no node (or set of nodes) fits its shape, CPU or memory"
            out[cause] = out.get(cause, 0) + 1
        return dict(sorted(out.items()))

    def _unschedulable(self) -> np.ndarray:
        empty = ClusterState(self.cluster)
        cache: dict[tuple, bool] = {}
        out = np.zeros(self.n, dtype=bool)
        for j, r in enumerate(self.requests):
            key = (r.kind, r.g, r.m, r.units, id(r.eligible), r.cpu, r.mem)
            ok = cache.get(key)
            if ok is None:
                ok = empty.fits(r)
                cache[key] = ok
            out[j] = not ok
        if self.quota is not None:
            gpus = self.jobs.total_gpus
            out |= np.array([self.quota.never_admits(j, float(gpus[j])) for j in range(self.n)], dtype=bool)
        return out

    # ------------------------------------------------------------------ events
