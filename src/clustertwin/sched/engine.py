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

import gc
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.sched.backfill import BackfillMixin
from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.failures import FailureEvents
from clustertwin.sched.job_states import (  # noqa: F401  (re-exported)
    COMPLETED,
    END_EVENT,
    FAIL_EVENT,
    KILLED,
    PENDING,
    QUEUED,
    REPAIR_EVENT,
    RUNNING,
    STATE_NAMES,
    UNSCHEDULABLE,
)
from clustertwin.sched.jobs import JobTable
from clustertwin.sched.lifecycle import LifecycleMixin
from clustertwin.sched.placement import WorkloadShapes
from clustertwin.sched.placement_net import NetPlacer
from clustertwin.sched.policy import (  # noqa: F401  (re-exported)
    ORDERS,
    POLICIES,
    SLURM_PRIORITY_DECAY_HALF_LIFE_S,
    SLURM_PRIORITY_MAX_AGE_S,
    MultifactorWeights,
    Policy,
    get_policy,
)
from clustertwin.sched.queue import QueueMixin
from clustertwin.sched.quota import QuotaLayout, QuotaState
from clustertwin.sched.shapes import build as build_shapes
from clustertwin.sched.sim_metrics import MetricsMixin, SimResult
from clustertwin.sched.state import Allocation, ClusterState, Request

MAX_REQUEUES_DEFAULT = 100_000
"""Requeue events (failures and preemptions) after which a run stops with a message (``--max-requeues``)."""


DEFAULT_BACKFILL_WINDOW = 100
"""Queued jobs backfill looks at per pass (Slurm ``bf_max_job_test`` / ``default_queue_depth`` = 100)."""


@dataclass(frozen=True)
class SimConfig:
    policy: Policy
    placement: str = "first-fit"
    backfill_window: int = DEFAULT_BACKFILL_WINDOW
    weights: MultifactorWeights = MultifactorWeights()  # noqa: RUF009 (frozen, immutable)
    requeue_on_failure: bool = True
    record_allocations: bool = False
    """Keep every (job, start, end, nodes, milli) for invariant checks."""
    fragmentation_sample_s: float = 0.0
    """Evaluate fragmented GPUs at most once per this much simulated time (0: at every event), holding
    the last value in between, as a metrics scrape would."""
    quotas: QuotaLayout | None = None
    """Team quotas (fixed shares or a Kueue-style cohort); None: one shared pool."""
    max_requeues: int = MAX_REQUEUES_DEFAULT
    placement_seed: int = 0
    """Seed of the ``random`` placement's draws."""

    def __post_init__(self) -> None:
        if self.backfill_window < 0:
            raise SpecError("backfill_window must be >= 0")
        if not math.isfinite(self.fragmentation_sample_s) or self.fragmentation_sample_s < 0:
            raise SpecError("fragmentation_sample_s must be a finite number >= 0")
        if self.max_requeues < 0:
            raise SpecError("max_requeues must be >= 0")


class Simulator(QueueMixin, LifecycleMixin, BackfillMixin, MetricsMixin):
    """One run of one policy over one job table; use :func:`simulate`."""

    def __init__(self, cluster: SchedCluster, jobs: JobTable, config: SimConfig,
                 failures: FailureEvents | None = None, *, runtime_extra_s: np.ndarray | None = None,
                 accept: np.ndarray | None = None) -> None:
        """``runtime_extra_s``: seconds added to each job's runtime and limit on this cluster (a federation's
        WAN transfer); ``accept``: jobs this cluster takes (a federation member), default all."""
        self.cluster = cluster
        self.jobs = jobs
        self.cfg = config
        self.policy = config.policy
        self.failures = failures or FailureEvents.none()
        if len(self.failures) and int(self.failures.node.max()) >= cluster.nodes:
            raise SpecError(f"failure events name node {int(self.failures.node.max())}, "
                            f"the cluster has {cluster.nodes}")
        shapes = WorkloadShapes.from_jobs(jobs, cluster.max_gpus_per_node) if config.placement == "fgd" else None
        self.placer = NetPlacer(config.placement, shapes, seed=config.placement_seed)
        self.state = ClusterState(cluster)
        n = len(jobs)
        self.n = n
        sh = self.shapes = build_shapes(jobs, cluster)
        self.requests: list[Request] = [sh.requests[s] for s in sh.shape.tolist()]
        self.elig_arrays = sh.elig_arrays
        self.req_kind, self.req_g, self.req_m = sh.kind[sh.shape], sh.g[sh.shape], sh.m[sh.shape]
        self.req_milli, self.req_elig = sh.milli[sh.shape], sh.elig[sh.shape]
        extra = np.zeros(n) if runtime_extra_s is None else np.asarray(runtime_extra_s, dtype=float)
        self.limit_s = jobs.limit_s + extra
        self.runtime = np.minimum(jobs.runtime_s + extra, self.limit_s)
        self.timeout = jobs.runtime_s + extra > self.limit_s
        self.accept = np.ones(n, dtype=bool) if accept is None else np.asarray(accept, dtype=bool)
        self.order = config.policy.order
        self.dynamic = self.order.dynamic
        util = jobs.gpu_util
        self.work_frac = np.where(np.isfinite(util), util, 1.0)
        self.held_work = 0.0
        self.quota = QuotaState(config.quotas) if config.quotas is not None else None
        if self.quota is not None:
            k = len(config.quotas.teams)
            self.team_queued = np.zeros(k, dtype=np.int64)
            self.team_min_gpus = np.full(k, np.inf)
            np.minimum.at(self.team_min_gpus, config.quotas.team_of_job, jobs.total_gpus)
        self.total_gpus_list: list[float] = jobs.total_gpus.tolist()
        self.min_gpus_list: list[float] = jobs.min_gpus.tolist()
        self.runtime_list: list[float] = self.runtime.tolist()
        self.work_frac_list: list[float] = self.work_frac.tolist()
        self.leaf_list: list[int] = cluster.leaf.tolist()
        self.on_start: Callable[[int], None] | None = None
        self.total_requeues = 0
        # per-job state as Python lists during the run (cheap scalar access); arrays in the result
        self.job_state: list[int] = [PENDING] * n
        self.first_start: list[float] = [math.nan] * n
        self.start: list[float] = [math.nan] * n
        self.end: list[float] = [math.nan] * n
        self.requeues = np.zeros(n, dtype=np.int64)
        self.multi_leaf = np.zeros(n, dtype=bool)
        self.epoch: list[int] = [0] * n
        self.timeout_list: list[bool] = self.timeout.tolist()
        self.alloc: dict[int, Allocation] = {}
        self.node_jobs: list[set[int]] = [set() for _ in range(cluster.nodes)]
        self.running: list[tuple[float, int, int]] = []
        """Heap of (expected end by limit, seq, job) of the running jobs, and of stopped ones whose keys
        are no longer ``run_key[job]`` (stale; skipped, compacted when they pass a quarter of the live ones)."""
        self.running_stale = 0
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
        self.rank, self.job_of_rank = self.order.rank(jobs)
        self.job_of_rank_list: list[int] = self.job_of_rank.tolist()
        self.limit_list: list[float] = self.limit_s.tolist()
        self.queue: list[int] = []
        # shape and time limit of each queue entry (a rank, or a job id for a dynamic order)
        shape_of_q = sh.shape if self.dynamic else sh.shape[self.job_of_rank]
        self._shape_list_q: list[int] = shape_of_q.tolist()
        self._limit_list_q: list[float] = (self.limit_s if self.dynamic else self.limit_s[self.job_of_rank]).tolist()
        self._shape_milli: list[int] = sh.milli.tolist()
        self._whole_need: list[int] = sh.whole_need.tolist()
        self._share_need: list[int] = sh.share_need.tolist()
        self._has_shares = sh.has_shares
        self._frag_fast = not self._has_shares and len(sh.elig_arrays) == 1 and bool(sh.elig_arrays[0].all())
        self._size_of_q: list[int] = sh.frag_size[shape_of_q].tolist()
        self._size_floor = int(sh.frag_size.min()) if n else 0
        # fair-share accounts: teams when a quota layout names them, else users
        if config.quotas is not None:
            self.account_of = config.quotas.team_of_job
            self.accounts = len(config.quotas.teams)
        else:
            self.account_of = jobs.user
            self.accounts = len(jobs.users)
        self.account_usage = np.zeros(self.accounts or 1)
        self.account_running_gpus = np.zeros(self.accounts or 1)
        self.usage_t = 0.0
        self.max_priority = max(int(jobs.priority.max()) if n else 0, 1)
        self.unschedulable = self._unschedulable()
        self.tl_t: list[float] = []
        self.tl_alloc: list[float] = []
        self.tl_run: list[int] = []
        self.tl_queue: list[int] = []
        self.tl_frag: list[float] = []
        self.tl_work: list[float] = []
        self.frag_t = -math.inf
        self.frag_value = 0.0
        self.stop_version = 0
        """Counts the events that can free capacity (job stops, node repairs and failures)."""
        self._head_fail: tuple[int, int] = (-1, -1)
        """(job, stop_version) of the last job that did not fit at the queue's head."""
        self.starts = 0
        """Job starts so far."""
        self._bf_idle: tuple[int, int, int] = (-1, -1, -1)
        self._bf_idle_window: list[int] = []
        """(stop_version, starts, head) and window of the last backfill pass that started nothing."""
        self._bf_dead: tuple[int, set[int]] = (-1, set())
        """(stop_version, shapes that did not fit since then) for backfill."""
        # the head's reservation, kept up to date incrementally: [head, projection, keys of the running
        # jobs released in it (a prefix of self.running)]; dropped when a node changes or a job starts
        # outside backfill
        self._res: list | None = None
        self._in_backfill = False

    # ------------------------------------------------------------------ setup
    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, a, b))

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        # The run allocates many small acyclic objects (event tuples, allocations); the cyclic garbage
        # collector would re-scan every live object over and over (a third of the time inside a large
        # process), so it is paused for the run and restored after.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(progress)
        finally:
            if was_enabled:
                gc.enable()

    def _run(self, progress: Callable[[int], None] | None) -> SimResult:
        self.begin()
        report_every = max(self.n // 100, 1)
        last = -1
        while True:
            t = self.next_time()
            if t == math.inf:
                break
            self.advance(t)
            self.arrive(t)
            self.schedule(t)
            if progress is not None and self.ptr // report_every != last:
                last = self.ptr // report_every
                progress(self.ptr)
        if progress is not None:
            progress(self.n)
        return self._result()

    # step API (a federation drives several simulators in lock-step)
    def begin(self) -> None:
        fe = self.failures
        for i in range(len(fe)):
            self._push(float(fe.fail_s[i]), FAIL_EVENT, int(fe.node[i]), i)
        self.ptr = 0
        self.submit_list: list[float] = self.jobs.submit_s.tolist()

    def next_time(self) -> float:
        nxt = self.submit_list[self.ptr] if self.ptr < self.n else math.inf
        return min(nxt, self.heap[0][0]) if self.heap else nxt

    def advance(self, t: float) -> None:
        """Apply every event due at or before ``t`` (job ends, repairs, failures)."""
        self._accrue(t)
        heap = self.heap
        while heap and heap[0][0] <= t:
            _, kind, _, a, b = heapq.heappop(heap)
            if kind == END_EVENT:
                self._on_end(a, b, t)
            elif kind == REPAIR_EVENT:
                self.state.set_up(a)
                self._res = None
                self.stop_version += 1
            else:
                self._on_fail(a, b, t)

    def arrive(self, t: float) -> None:
        """Submit every job due at or before ``t``."""
        sub = self.submit_list
        n = self.n
        while self.ptr < n and sub[self.ptr] <= t:
            j = self.ptr
            if self.accept[j]:
                if self.unschedulable[j]:
                    self.job_state[j] = UNSCHEDULABLE
                else:
                    self._enqueue(j)
            self.ptr += 1

    def schedule(self, t: float) -> None:
        self._pass(t)
        self._record(t)

    # ------------------------------------------------------------------ start / stop
    def _pass(self, t: float) -> None:
        if not self.queue:
            return
        if self.dynamic:
            self._order_dynamic(t)
        quota = self.quota
        while True:
            q = self.queue
            pos = 0
            head = -1
            skipped: list[int] = []
            refused: dict[int, float] = {}  # team -> smallest size its quota refused in this pass
            closed = 0  # teams refused at their smallest job size: none of their jobs can start
            while pos < len(q):
                j = self._job(q[pos])
                if quota is not None:
                    team, g = int(quota.team[j]), self.total_gpus_list[j]
                    if g >= refused.get(team, math.inf) or not quota.admits(j, g):
                        if g < refused.get(team, math.inf):
                            if refused.get(team, math.inf) > self.team_min_gpus[team] >= g:
                                closed += 1
                            refused[team] = g
                        skipped.append(q[pos])  # best-effort FIFO: waits for its quota, blocks no one
                        pos += 1
                        if closed == int((self.team_queued > 0).sum()):
                            break  # every team with waiting jobs is closed: the rest only waits
                        continue
                if self._head_fail == (j, self.stop_version):
                    alloc = None  # failed since the last release: free capacity only shrank since
                else:
                    alloc = self.placer.place(self.state, self.requests[j])
                    if alloc is None and self.min_gpus_list[j] > 0:
                        alloc = self._shrink(j)
                if alloc is None:
                    self._head_fail = (j, self.stop_version)
                    head = len(skipped)
                    break
                self._start(j, alloc, t)
                pos += 1
            if skipped:
                q[:pos] = skipped
            else:
                del q[:pos]
            if head < 0:
                return
            if not (self.policy.preempt and self._preempt_for(self._job(q[head]), t)):
                break
        if self.policy.backfill:
            self._backfill(t, head)

def simulate(cluster: SchedCluster, jobs: JobTable, policy: str | Policy = "backfill", *,
             placement: str = "first-fit", failures: FailureEvents | None = None,
             backfill_window: int = DEFAULT_BACKFILL_WINDOW, weights: MultifactorWeights | None = None,
             requeue_on_failure: bool = True, record_allocations: bool = False,
             fragmentation_sample_s: float = 0.0, quotas: QuotaLayout | None = None,
             max_requeues: int = MAX_REQUEUES_DEFAULT,
             progress: Callable[[int], None] | None = None) -> SimResult:
    """Replay ``jobs`` on ``cluster`` under ``policy`` with ``placement``; see the module docstring."""
    pol = get_policy(policy) if isinstance(policy, str) else policy
    cfg = SimConfig(policy=pol, placement=placement, backfill_window=backfill_window,
                    weights=weights or MultifactorWeights(), requeue_on_failure=requeue_on_failure,
                    record_allocations=record_allocations, fragmentation_sample_s=fragmentation_sample_s,
                    quotas=quotas, max_requeues=max_requeues)
    return Simulator(cluster, jobs, cfg, failures).run(progress)
