"""Discrete-event scheduler engine: a heap of events with a deterministic tie-break counter.

At each event time the engine first applies every event due (job ends, node repairs, node failures, then
submissions, in that order), then runs one scheduling pass:

1. Start queued jobs in queue order while the head fits (gang: all units at once, or none).
2. ``preempt``: if the head still does not fit, kill running jobs of lower priority (lowest priority,
   most recently started first) until it fits, requeue them, and go back to 1.
3. ``backfill`` (EASY, as Slurm's sched/backfill does with requested time limits): compute the head's
   reservation, the *shadow time* at which it fits if running jobs end at their time limits; then start
   later jobs (up to ``backfill_window`` of them) that fit now and either end by the shadow time or leave
   the head still fitting at the shadow time.

Queue orders: ``fifo`` (submit time), ``sjf`` (requested time limit, i.e. the runtime estimate),
``priority`` (job priority/QoS, then submit time) and ``multifactor`` (Slurm priority/multifactor:
``P = w_age * min(wait / max_age, 1) + w_fs * 2**(-U_user / S_user) + w_size * gpus / cluster_gpus +
w_qos * priority / max_priority``, with ``U_user`` the user's GPU-seconds decayed with half-life
``half_life_s`` divided by everyone's, ``S_user`` = 1 / number of users). Ties always go to the earlier
job in the trace.

A job runs ``min(runtime, limit)``; past its limit it is killed (Slurm TIMEOUT). An elastic head that
does not fit starts on the most GPUs that fit (down to its ``min_gpus``) and runs longer in proportion. A node failure kills the
jobs on it; they are requeued (restarting from scratch, no checkpoint) unless ``requeue_on_failure`` is
off, in which case they end as killed.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.failures import FailureEvents
from clustertwin.sched.jobs import MILLI_PER_GPU, JobTable
from clustertwin.sched.placement import Placer, WorkloadShapes
from clustertwin.sched.state import Allocation, ClusterState, Projection, Request
from clustertwin.units import DAY_S


@dataclass(frozen=True)
class Policy:
    """A queue order plus whether EASY backfill and priority preemption are on."""

    name: str
    order: str
    backfill: bool
    preempt: bool = False


POLICIES: dict[str, Policy] = {
    "fifo": Policy("fifo", "fifo", backfill=False),
    "sjf": Policy("sjf", "sjf", backfill=False),
    "backfill": Policy("backfill", "fifo", backfill=True),
    "sjf-backfill": Policy("sjf-backfill", "sjf", backfill=True),
    "multifactor": Policy("multifactor", "multifactor", backfill=True),
    "priority-preempt": Policy("priority-preempt", "priority", backfill=True, preempt=True),
}
ORDERS = ("fifo", "sjf", "priority", "multifactor")


def get_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise SpecError(f"unknown policy '{name}'{did_you_mean(name, POLICIES)}; choose from {', '.join(POLICIES)}")
    return POLICIES[name]


SLURM_PRIORITY_MAX_AGE_S = 7 * DAY_S
"""Slurm ``PriorityMaxAge`` default (7-0): age factor saturates after 7 days of waiting."""
SLURM_PRIORITY_DECAY_HALF_LIFE_S = 7 * DAY_S
"""Slurm ``PriorityDecayHalfLife`` default (7-0): usage half-life for fair-share."""


@dataclass(frozen=True)
class MultifactorWeights:
    """Weights of the multifactor priority. Slurm's shipped weights are all 0 (sites set them); these
    defaults make fair-share and QoS dominate age and size, a common site choice (assumption)."""

    age: float = 1000.0
    fairshare: float = 10000.0
    job_size: float = 1000.0
    qos: float = 10000.0
    max_age_s: float = SLURM_PRIORITY_MAX_AGE_S
    half_life_s: float = SLURM_PRIORITY_DECAY_HALF_LIFE_S


DEFAULT_BACKFILL_WINDOW = 100
"""Queued jobs backfill looks at per pass (Slurm ``bf_max_job_test`` / ``default_queue_depth`` = 100)."""


@dataclass(frozen=True)
class SimConfig:
    policy: Policy
    placement: str = "first-fit"
    backfill_window: int = DEFAULT_BACKFILL_WINDOW
    weights: MultifactorWeights = MultifactorWeights()
    requeue_on_failure: bool = True
    record_allocations: bool = False
    """Keep every (job, start, end, nodes, milli) for invariant checks."""
    fragmentation_sample_s: float = 0.0
    """Evaluate fragmented GPUs at most once per this much simulated time (0: at every event), holding
    the last value in between, as a metrics scrape would."""

    def __post_init__(self) -> None:
        if self.backfill_window < 0:
            raise SpecError("backfill_window must be >= 0")
        if self.fragmentation_sample_s < 0:
            raise SpecError("fragmentation_sample_s must be >= 0")
        if self.policy.order not in ORDERS:
            raise SpecError(f"unknown queue order '{self.policy.order}'")


_NEVER = 1 << 62

# job states
PENDING, QUEUED, RUNNING, COMPLETED, KILLED = 0, 1, 2, 3, 4
STATE_NAMES = {PENDING: "pending", QUEUED: "queued", RUNNING: "running", COMPLETED: "completed", KILLED: "killed"}

# event kinds, in processing order at equal times
_END, _REPAIR, _FAIL = 0, 1, 2


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
    first_reservation_s: dict[int, float] = field(default_factory=dict)
    allocations: list[tuple[int, float, float, np.ndarray, np.ndarray]] = field(default_factory=list)


class Simulator:
    """One run of one policy over one job table; use :func:`simulate`."""

    def __init__(self, cluster: SchedCluster, jobs: JobTable, config: SimConfig,
                 failures: FailureEvents | None = None) -> None:
        self.cluster = cluster
        self.jobs = jobs
        self.cfg = config
        self.policy = config.policy
        self.failures = failures or FailureEvents.none()
        if len(self.failures) and int(self.failures.node.max()) >= cluster.nodes:
            raise SpecError(f"failure events name node {int(self.failures.node.max())}, "
                            f"the cluster has {cluster.nodes}")
        shapes = WorkloadShapes.from_jobs(jobs, cluster.max_gpus_per_node) if config.placement == "fgd" else None
        self.placer = Placer(config.placement, shapes)
        self.state = ClusterState(cluster)
        n = len(jobs)
        self.n = n
        self.requests = self._requests()
        self.runtime = np.minimum(jobs.runtime_s, jobs.limit_s)
        self.timeout = jobs.runtime_s > jobs.limit_s
        self.job_state = np.full(n, PENDING, dtype=np.int64)
        self.first_start = np.full(n, np.nan)
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.requeues = np.zeros(n, dtype=np.int64)
        self.multi_leaf = np.zeros(n, dtype=bool)
        self.epoch = np.zeros(n, dtype=np.int64)
        self.alloc: dict[int, Allocation] = {}
        self.node_jobs: list[set[int]] = [set() for _ in range(cluster.nodes)]
        self.running: list[tuple[float, int, int]] = []  # (expected end by limit, seq, job), sorted
        self.run_key: dict[int, tuple[float, int, int]] = {}
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.preemptions = 0
        self.held_milli = 0
        self.failure_kills = 0
        self.killed_by_timeout = 0
        self.first_reservation: dict[int, float] = {}
        self.allocations: list[tuple[int, float, float, np.ndarray, np.ndarray]] = []
        self._open_alloc: dict[int, tuple[float, np.ndarray, np.ndarray]] = {}
        # queue: sorted list of ranks (static orders) or of job ids (multifactor)
        self.rank, self.job_of_rank = self._ranks()
        self.job_of_rank_list: list[int] = self.job_of_rank.tolist()
        self.limit_list: list[float] = jobs.limit_s.tolist()
        self.queue: list[int] = []
        self.user_usage = np.zeros(len(jobs.users) or 1)
        self.user_running_gpus = np.zeros(len(jobs.users) or 1)
        self.usage_t = 0.0
        self.max_priority = max(int(jobs.priority.max()) if n else 0, 1)
        self.unschedulable = self._unschedulable()
        self.tl_t: list[float] = []
        self.tl_alloc: list[float] = []
        self.tl_run: list[int] = []
        self.tl_queue: list[int] = []
        self.tl_frag: list[float] = []
        self.frag_t = -math.inf
        self.frag_value = 0.0
        self.stop_version = 0
        self._reservation: tuple[int, int, float, Projection] | None = None
        kinds = {"whole": 0, "share": 1, "spread": 2}
        self.req_kind = np.array([kinds[r.kind] for r in self.requests], dtype=np.int64)
        self.req_g = np.array([r.g for r in self.requests], dtype=np.int64)
        self.req_m = np.array([r.m for r in self.requests], dtype=np.int64)
        self.req_milli = np.array([r.total_milli for r in self.requests], dtype=np.int64)
        codes: dict[int, int] = {}
        self.elig_arrays: list[np.ndarray] = []
        elig_code = []
        for r in self.requests:
            c = codes.get(id(r.eligible))
            if c is None:
                c = codes[id(r.eligible)] = len(self.elig_arrays)
                self.elig_arrays.append(r.eligible)
            elig_code.append(c)
        self.req_elig = np.array(elig_code, dtype=np.int64)

    # ------------------------------------------------------------------ setup
    def _requests(self) -> list[Request]:
        jobs, cl = self.jobs, self.cluster
        milli = jobs.share_milli
        elig_cache: dict[frozenset[str], np.ndarray] = {}
        max_node = {}
        out = []
        for j in range(self.n):
            types = jobs.gpu_types[j]
            elig = elig_cache.get(types)
            if elig is None:
                if types:
                    codes = [i for i, m in enumerate(cl.models) if m in types]
                    elig = np.isin(cl.model_code, codes)
                else:
                    elig = np.ones(cl.nodes, dtype=bool)
                elig_cache[types] = elig
                max_node[types] = int(cl.gpus[elig].max()) if elig.any() else 0
            g = float(jobs.gpus_per_unit[j])
            units = int(jobs.units[j])
            cpu, mem = int(jobs.cpu_milli[j]), int(jobs.memory_mib[j])
            if milli[j] < MILLI_PER_GPU:
                out.append(Request("share", 0, int(milli[j]), max(units, 1), elig, cpu, mem))
            elif units == 0 and g > max_node[types]:
                out.append(Request("spread", int(g), 0, 1, elig))
            else:
                out.append(Request("whole", int(g), 0, max(units, 1), elig, cpu, mem))
        return out

    def _ranks(self) -> tuple[np.ndarray, np.ndarray]:
        jobs, n = self.jobs, self.n
        idx = np.arange(n)
        if self.policy.order == "sjf":
            order = np.lexsort((idx, jobs.submit_s, jobs.limit_s))
        elif self.policy.order == "priority":
            order = np.lexsort((idx, jobs.submit_s, -jobs.priority))
        else:
            order = idx
        rank = np.empty(n, dtype=np.int64)
        rank[order] = idx
        return rank, order

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
        return out

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, a, b))

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        jobs, n = self.jobs, self.n
        fe = self.failures
        for i in range(len(fe)):
            self._push(float(fe.fail_s[i]), _FAIL, int(fe.node[i]), i)
        ptr = 0
        submit = jobs.submit_s
        report_every = max(n // 100, 1)
        while ptr < n or self.heap:
            t = min(submit[ptr] if ptr < n else math.inf, self.heap[0][0] if self.heap else math.inf)
            self._accrue(t)
            while self.heap and self.heap[0][0] <= t:
                _, kind, _, a, b = heapq.heappop(self.heap)
                if kind == _END:
                    self._on_end(a, b, t)
                elif kind == _REPAIR:
                    self.state.set_up(a)
                    self.stop_version += 1
                else:
                    self._on_fail(a, b, t)
            while ptr < n and submit[ptr] <= t:
                if self.unschedulable[ptr]:
                    self.job_state[ptr] = QUEUED
                else:
                    self._enqueue(ptr)
                if progress is not None and ptr % report_every == 0:
                    progress(ptr)
                ptr += 1
            self._pass(t)
            self._record(t)
        if progress is not None:
            progress(n)
        return self._result()

    def _enqueue(self, j: int) -> None:
        self.job_state[j] = QUEUED
        if self.policy.order == "multifactor":
            self.queue.append(j)
        else:
            bisect.insort(self.queue, int(self.rank[j]))

    def _job(self, q: int) -> int:
        return q if self.policy.order == "multifactor" else self.job_of_rank_list[q]

    def _accrue(self, t: float) -> None:
        """Fair-share usage: decay by 2**(-dt / half_life), add running GPU-seconds."""
        dt = t - self.usage_t
        if dt <= 0 or self.policy.order != "multifactor":
            self.usage_t = max(self.usage_t, t)
            return
        decay = 2.0 ** (-dt / self.cfg.weights.half_life_s)
        self.user_usage = self.user_usage * decay + self.user_running_gpus * dt
        self.usage_t = t

    # ------------------------------------------------------------------ start / stop
    def _start(self, j: int, alloc: Allocation, t: float) -> None:
        self.state.apply(alloc, -1)
        self.alloc[j] = alloc
        self.job_state[j] = RUNNING
        if np.isnan(self.first_start[j]):
            self.first_start[j] = t
        self.start[j] = t
        self.epoch[j] += 1
        # elastic jobs started on fewer GPUs take proportionally longer (fixed GPU-seconds of work)
        scale = float(self.jobs.total_gpus[j]) / alloc.gpus if self.jobs.min_gpus[j] > 0 else 1.0
        self._push(t + self.runtime[j] * scale, _END, j, int(self.epoch[j]))
        key = (t + float(self.jobs.limit_s[j]) * scale, self.seq, j)
        bisect.insort(self.running, key)
        self.run_key[j] = key
        leaf = self.cluster.leaf
        first_leaf = leaf[alloc.node_list[0]]
        for nd in alloc.node_list:
            self.node_jobs[nd].add(j)
            if leaf[nd] != first_leaf:
                self.multi_leaf[j] = True
        self.held_milli += alloc.total_milli
        self.user_running_gpus[self.jobs.user[j]] += alloc.gpus
        if self.cfg.record_allocations:
            self._open_alloc[j] = (t, alloc.nodes.copy(), alloc.milli.copy())

    def _stop(self, j: int, t: float) -> None:
        self.stop_version += 1
        alloc = self.alloc.pop(j)
        self.state.apply(alloc, +1)
        key = self.run_key.pop(j)
        i = bisect.bisect_left(self.running, key)
        del self.running[i]
        for nd in alloc.node_list:
            self.node_jobs[nd].discard(j)
        self.held_milli -= alloc.total_milli
        self.user_running_gpus[self.jobs.user[j]] -= alloc.gpus
        if self.cfg.record_allocations:
            t0, nodes, milli = self._open_alloc.pop(j)
            self.allocations.append((j, t0, t, nodes, milli))

    def _on_end(self, j: int, epoch: int, t: float) -> None:
        if self.epoch[j] != epoch or self.job_state[j] != RUNNING:
            return
        self._stop(j, t)
        self.end[j] = t
        if self.timeout[j]:
            self.job_state[j] = KILLED
            self.killed_by_timeout += 1
        else:
            self.job_state[j] = COMPLETED

    def _kill(self, j: int, t: float, *, requeue: bool) -> None:
        self._stop(j, t)
        self.epoch[j] += 1
        if requeue:
            self.requeues[j] += 1
            self._enqueue(j)
        else:
            self.job_state[j] = KILLED
            self.end[j] = t

    def _on_fail(self, node: int, i: int, t: float) -> None:
        for j in sorted(self.node_jobs[node]):
            self.failure_kills += 1
            self._kill(j, t, requeue=self.cfg.requeue_on_failure)
        self.state.set_down(node)
        self.stop_version += 1
        self._push(t + float(self.failures.repair_s[i]), _REPAIR, node)

    # ------------------------------------------------------------------ scheduling
    def _order_multifactor(self, t: float) -> None:
        w, jobs = self.cfg.weights, self.jobs
        q = np.array(self.queue, dtype=np.int64)
        total = float(self.user_usage.sum())
        share = 1.0 / max(len(jobs.users), 1)
        usage = self.user_usage[jobs.user[q]] / total if total > 0 else np.zeros(len(q))
        prio = (w.age * np.minimum((t - jobs.submit_s[q]) / w.max_age_s, 1.0)
                + w.fairshare * 2.0 ** (-usage / share)
                + w.job_size * jobs.total_gpus[q] / self.cluster.total_gpus
                + w.qos * jobs.priority[q] / self.max_priority)
        self.queue = q[np.lexsort((q, -prio))].tolist()

    def _pass(self, t: float) -> None:
        if not self.queue:
            return
        if self.policy.order == "multifactor":
            self._order_multifactor(t)
        q = self.queue
        while True:
            pos = 0
            while pos < len(q):
                j = self._job(q[pos])
                alloc = self.placer.place(self.state, self.requests[j])
                if alloc is None and self.jobs.min_gpus[j] > 0:
                    alloc = self._shrink(j)
                if alloc is None:
                    break
                self._start(j, alloc, t)
                pos += 1
            del q[:pos]
            if not q or not (self.policy.preempt and self._preempt_for(self._job(q[0]), t)):
                break
            q = self.queue  # preemption requeued jobs (same list object, re-sorted by insort)
        if q and self.policy.backfill:
            self._backfill(t)

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
        """The head's shadow time and the projected state then. Kept between passes while the head is
        the same and no job has ended and no node changed (only arrivals and backfilled starts, which
        update the projection themselves)."""
        cached = self._reservation
        if cached is not None and cached[0] == head and cached[1] == self.stop_version:
            return cached[2], cached[3]
        proj = Projection(self.state, self.requests[head])
        shadow = math.inf
        for end_by_limit, _, k in self.running:
            proj.release(self.alloc[k])
            if proj.fits:
                shadow = max(end_by_limit, t)
                break
        self._reservation = (head, self.stop_version, shadow, proj)
        return shadow, proj

    def _backfill(self, t: float) -> None:
        q = self.queue
        head = self._job(q[0])
        shadow, proj = self._reserve(head, t)
        self.first_reservation.setdefault(head, shadow)
        last = min(len(q), self.cfg.backfill_window + 1)
        if last <= 1:
            return
        st = self.state
        free_milli = int(st.tot.sum())
        if free_milli <= 0:
            return
        # vectorised pre-filter: a job that cannot fit the whole free pool, the largest free node or the
        # largest free share now never fits during this pass (the state only shrinks)
        ranks = np.array(q[1:last], dtype=np.int64)
        cand = ranks if self.policy.order == "multifactor" else self.job_of_rank[ranks]
        kind = self.req_kind[cand]
        g = self.req_g[cand]
        ok = (self.req_milli[cand] <= free_milli) & np.where(
            kind == 0, g <= int(st.whole.max()), np.where(kind == 1, self.req_m[cand] <= int(st.top.max()), True))
        if not ok.any():
            return
        started = []
        # Within a pass the state only shrinks, so a shape that does not fit now never will (no_fit keeps
        # the smallest failing size per shape family); a shape refused for the head's sake stays refused
        # until the next start changes the state (refused).
        no_fit: dict[tuple, int] = {}
        refused: set[tuple] = set()
        limit = self.limit_list
        for i in np.flatnonzero(ok).tolist():
            j = int(cand[i])
            req = self.requests[j]
            if req.total_milli > free_milli:
                continue
            family = req.family
            if req.g >= no_fit.get(family, _NEVER):
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
            self._start(j, alloc, t)
            free_milli -= alloc.total_milli
            refused.clear()
            started.append(i + 1)
            if free_milli <= 0:
                break
        for pos in reversed(started):
            del q[pos]

    # ------------------------------------------------------------------ metrics over time
    def _record(self, t: float) -> None:
        self.tl_t.append(t)
        self.tl_alloc.append(self.held_milli / MILLI_PER_GPU)
        self.tl_run.append(len(self.alloc))
        self.tl_queue.append(len(self.queue))
        if t - self.frag_t >= self.cfg.fragmentation_sample_s or not self.tl_frag:
            self.frag_value = self._fragmented_milli() / MILLI_PER_GPU
            self.frag_t = t
        self.tl_frag.append(self.frag_value)

    def _window(self) -> np.ndarray:
        """Job ids of the head and the backfill window."""
        ranks = np.array(self.queue[: self.cfg.backfill_window + 1], dtype=np.int64)
        return ranks if self.policy.order == "multifactor" else self.job_of_rank[ranks]

    def _fragmented_milli(self) -> int:
        """Free capacity no job in the queue window can use: wholly free GPUs on nodes where no queued
        whole/spread/share unit is eligible and fits, and partly free GPUs no queued share fits. Only the
        smallest whole-GPU unit and the smallest share per eligibility set matter."""
        st = self.state
        if not self.queue:
            return 0
        free_total = int(st.tot.sum())
        if free_total == 0:
            return 0
        jobs = self._window()
        kind, elig = self.req_kind[jobs], self.req_elig[jobs]
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
            state=self.job_state.copy(),
            first_start_s=self.first_start,
            start_s=self.start,
            end_s=self.end,
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
            first_reservation_s=self.first_reservation,
            allocations=self.allocations,
        )


def simulate(cluster: SchedCluster, jobs: JobTable, policy: str | Policy = "backfill", *,
             placement: str = "first-fit", failures: FailureEvents | None = None,
             backfill_window: int = DEFAULT_BACKFILL_WINDOW, weights: MultifactorWeights | None = None,
             requeue_on_failure: bool = True, record_allocations: bool = False,
             fragmentation_sample_s: float = 0.0,
             progress: Callable[[int], None] | None = None) -> SimResult:
    """Replay ``jobs`` on ``cluster`` under ``policy`` with ``placement``; see the module docstring."""
    pol = get_policy(policy) if isinstance(policy, str) else policy
    cfg = SimConfig(policy=pol, placement=placement, backfill_window=backfill_window,
                    weights=weights or MultifactorWeights(), requeue_on_failure=requeue_on_failure,
                    record_allocations=record_allocations, fragmentation_sample_s=fragmentation_sample_s)
    return Simulator(cluster, jobs, cfg, failures).run(progress)
