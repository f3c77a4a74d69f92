"""The cluster as a whole: jobs with a body share one fabric, fail, restart from checkpoints, and are
scheduled by the ordinary engine (:class:`~clustertwin.sched.engine.Simulator`, its queue, backfill and
placement unchanged).

A job's work is its steps. On each start it gets the step time of its class on *that* allocation
(:class:`~clustertwin.sched.bodies.Bodies`), and progresses at ``1 / (step x (1 + δ/τ) x stretch)`` steps
per second (``δ/τ``: checkpoint stall per interval). ``stretch = 1 + c (s - 1)``: ``c`` the exposed
inter-node communication share of its step, ``s`` its bottleneck slowdown from the max-min fair rates of
all running jobs on the fabric's bundles (:mod:`clustertwin.sched.contention`). Rates are recomputed only
when a job with inter-node traffic starts or stops (once per event time, after the scheduling pass); then every job whose stretch changed is re-timed (its
done steps accrued at the old rate, its end event moved). A job still running at its time limit is killed
(Slurm ``TIMEOUT``).

Failures (:class:`~clustertwin.sched.failures.FailureEvents`, e.g. the reliability model's node rate)
kill the jobs on the node: each keeps the steps up to its last checkpoint (every ``τ`` of compute,
Daly's interval), is requeued, and pays ``detect + restart + load`` at its next start.

GPU-time accounting of each run (GPU-seconds): ``goodput`` = isolated step time x steps kept at the end
(completed jobs and the checkpointed progress of unfinished ones); ``interference`` = time beyond the
isolated step spent waiting for the network, ``sum gpus x dt x (1 - 1/stretch)``; ``failure loss`` =
steps lost since the last checkpoint plus restart time; ``checkpoint`` = save stalls; ``killed`` =
progress of jobs killed at their limit. Slowdown of a completed job = (end - first start) / its isolated
runtime on a compact allocation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from clustertwin.sched.bodies import Bodies
from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.contention import Fabric, alone_rate, bottleneck_slowdowns
from clustertwin.sched.engine import SimConfig, Simulator
from clustertwin.sched.failures import FailureEvents
from clustertwin.sched.job_states import COMPLETED, END_EVENT, KILLED
from clustertwin.sched.sim_metrics import SimResult
from clustertwin.sched.state import Allocation
from clustertwin.sched.workload import DrawnWorkload

_REL = 1e-9


@dataclass
class CosimResult:
    """One co-simulated run: the engine's result and the GPU-time accounting (GPU-seconds)."""

    sim: SimResult
    goodput_gpu_s: float
    interference_gpu_s: float
    failure_loss_gpu_s: float
    checkpoint_gpu_s: float
    killed_gpu_s: float
    slowdown: np.ndarray
    """Per completed job (module docstring)."""
    contention_updates: int
    network: str


class CoSimulator(Simulator):
    """:class:`Simulator` with job bodies, contention (``fabric``; None: an ideal network) and checkpoints."""

    def __init__(self, cluster: SchedCluster, drawn: DrawnWorkload, bodies: Bodies, config: SimConfig,
                 fabric: Fabric | None, failures: FailureEvents | None = None) -> None:
        super().__init__(cluster, drawn.jobs, config, failures)
        n = self.n
        bodies.new_run()  # this run's span cache only (:meth:`Bodies.new_run`)
        self.bodies = bodies
        self.fabric = fabric
        self.cls: list[int] = drawn.job_class.tolist()
        self.gpus_of: list[int] = [int(g) for g in drawn.jobs.total_gpus.tolist()]
        steps = np.array([bodies.steps(k, g) for k, g in zip(self.cls, self.gpus_of, strict=True)]) * drawn.scale
        self.steps_total: list[float] = steps.tolist()
        self.steps_left: list[float] = steps.tolist()
        self.ref_runtime: list[float] = drawn.jobs.runtime_s.tolist()
        res = [bodies.resilience(k, g) for k, g in zip(self.cls, self.gpus_of, strict=True)]
        self.ck_factor = [1.0 + r.save_stall_s / r.checkpoint_interval_s for r in res]
        self.restart_s = [r.restart_s for r in res]
        self.ck_interval_s = [r.checkpoint_interval_s for r in res]
        self.step_s = [0.0] * n
        self.share = [0.0] * n
        self.stretch = [1.0] * n
        self.mark = [0.0] * n
        self.busy_until = [0.0] * n
        self.restart_due = [False] * n
        self.t_start = [0.0] * n
        self.net: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        """Running jobs with traffic on shared bundles: (bundles, flows, x_alone)."""
        self._demand: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, float]] = {}
        """(bundles, flows, x_alone) by sorted node set (a ring over the set in node order: its order
        does not matter)."""
        self.flows = np.zeros(fabric.bundles if fabric is not None else 0, dtype=np.int64)
        """Flows on each bundle (all running jobs)."""
        self.dirty = False
        """A job with traffic on shared bundles started or stopped since the last rate update."""
        self.good = [0.0] * n
        self.interference = 0.0
        self.failure_loss = 0.0
        self.checkpoint = 0.0
        self.updates = 0

    # ------------------------------------------------------------------ progress
    def _progress(self, j: int, t: float) -> None:
        """Steps done by ``j`` since its last mark at its current stretch, and the GPU time they took."""
        g = self.gpus_of[j]
        t0 = self.mark[j]
        if t <= t0:
            return
        busy = self.busy_until[j]
        if t0 < busy:
            self.failure_loss += g * (min(t, busy) - t0)
            t0 = busy
        dt = t - t0
        if dt > 0:
            s, f = self.stretch[j], self.ck_factor[j]
            done = min(dt / (self.step_s[j] * f * s), self.steps_left[j])
            self.steps_left[j] -= done
            self.good[j] += g * done * self.step_s[j]
            self.interference += g * dt * (1.0 - 1.0 / s)
            self.checkpoint += g * dt / s * (1.0 - 1.0 / f)
        self.mark[j] = t

    def _retime(self, j: int, t: float) -> None:
        """Move ``j``'s end event to where its remaining steps end at its current stretch (or its limit)."""
        begin = max(t, self.busy_until[j])
        end = begin + self.steps_left[j] * self.step_s[j] * self.ck_factor[j] * self.stretch[j]
        limit_end = self.t_start[j] + self.limit_list[j]
        self.timeout_list[j] = end > limit_end * (1.0 + _REL)
        epoch = self.epoch[j] + 1
        self.epoch[j] = epoch
        self._push(min(end, limit_end), END_EVENT, j, epoch)

    # ------------------------------------------------------------------ lifecycle overrides
    def _start(self, j: int, alloc: Allocation, t: float) -> None:
        prof = self.bodies.profile(self.cls[j], self.gpus_of[j], np.asarray(alloc.node_list))
        self.step_s[j] = prof.step_s
        self.share[j] = prof.comm_share
        self.stretch[j] = 1.0
        self.busy_until[j] = t + (self.restart_s[j] if self.restart_due[j] else 0.0)
        self.restart_due[j] = False
        self.mark[j] = t
        self.t_start[j] = t
        self.runtime_list[j] = (self.busy_until[j] - t) + self.steps_left[j] * prof.step_s * self.ck_factor[j]
        super()._start(j, alloc, t)
        self.timeout_list[j] = self.runtime_list[j] > self.limit_list[j] * (1.0 + _REL)
        if self.fabric is not None and prof.comm_share > 0:
            key = tuple(sorted(alloc.node_list))
            net = self._demand.get(key)
            if net is None:
                b, f = self.fabric.demand(np.asarray(alloc.node_list))
                net = self._demand[key] = (b, f, alone_rate(b, f, self.fabric))
            b, f, _ = net
            if len(b):
                self.net[j] = net
                self.flows[b] += f
                self.dirty = True

    def _stop(self, j: int, t: float) -> None:
        self._progress(j, t)
        super()._stop(j, t)
        gone = self.net.pop(j, None)
        if gone is not None:
            self.flows[gone[0]] -= gone[1]
            self.dirty = True

    def _kill(self, j: int, t: float, *, requeue: bool) -> None:
        self._progress(j, t)
        done = self.steps_total[j] - self.steps_left[j]
        per_ck = self.ck_interval_s[j] / self.step_s[j] if self.step_s[j] > 0 else math.inf
        kept = math.floor(done / per_ck) * per_ck if math.isfinite(per_ck) else 0.0
        lost = max(done - kept, 0.0)
        self.steps_left[j] += lost
        self.good[j] -= self.gpus_of[j] * lost * self.step_s[j]
        lost_gpu_s = self.gpus_of[j] * lost * self.step_s[j]
        self.failure_loss += lost_gpu_s * self.ck_factor[j]  # the lost steps and their checkpoint stalls
        self.checkpoint -= lost_gpu_s * (self.ck_factor[j] - 1.0)
        self.restart_due[j] = True
        super()._kill(j, t, requeue=requeue)

    # ------------------------------------------------------------------ contention
    def schedule(self, t: float) -> None:
        super().schedule(t)
        if self.dirty:  # every start and stop at ``t`` is in: one rate update for all of them
            self.dirty = False
            self._contend(t)

    def _contend(self, t: float) -> None:
        """Max-min fair rates of the jobs on shared bundles
        (:func:`~clustertwin.sched.contention.bottleneck_slowdowns`); re-time those whose stretch changed."""
        fab = self.fabric
        assert fab is not None
        self.updates += 1
        if not self.net:
            return
        js = sorted(self.net)
        slow = bottleneck_slowdowns(fab, self.flows, self.net)
        stretch, share = self.stretch, self.share
        for j in js:
            new = 1.0 + share[j] * (slow.get(j, 1.0) - 1.0)
            if abs(new - stretch[j]) > _REL * new:
                self._progress(j, t)
                stretch[j] = new
                self._retime(j, t)

    # ------------------------------------------------------------------ result
    def run_cosim(self, progress=None) -> CosimResult:
        """Run to the end (every job completed, killed or unschedulable) and account the GPU time."""
        sim = self.run(progress)
        state = sim.state
        good = np.array(self.good)
        killed = state == KILLED
        done = state == COMPLETED
        ref = np.array(self.ref_runtime)
        slow = (sim.end_s[done] - sim.first_start_s[done]) / np.maximum(ref[done], 1e-9)
        return CosimResult(sim=sim, goodput_gpu_s=float(good[~killed].sum()), interference_gpu_s=self.interference,
                           failure_loss_gpu_s=self.failure_loss, checkpoint_gpu_s=self.checkpoint,
                           killed_gpu_s=float(good[killed].sum()), slowdown=slow, contention_updates=self.updates,
                           network="ideal" if self.fabric is None else f"contention ({self.fabric.routing})")


def record(res: CosimResult, policy: str, placement: str) -> dict:
    """The per policy x placement record of ``sched simulate --workload`` (GPU-hours, seconds)."""
    from clustertwin.sched import metrics

    m = metrics.compute(res.sim)
    sd = res.slowdown
    started = ~np.isnan(res.sim.first_start_s)
    wait = res.sim.first_start_s[started] - res.sim.jobs.submit_s[started]
    h = 3600.0
    return {"policy": policy, "placement": placement, "network": res.network,
            "utilization": round(float(m.gpu_utilization), 4),
            "goodput_gpu_hours": round(res.goodput_gpu_s / h, 1),
            "interference_gpu_hours": round(res.interference_gpu_s / h, 1),
            "failure_loss_gpu_hours": round(res.failure_loss_gpu_s / h, 1),
            "checkpoint_gpu_hours": round(res.checkpoint_gpu_s / h, 1),
            "killed_gpu_hours": round(res.killed_gpu_s / h, 1),
            "slowdown_mean": round(float(sd.mean()), 4) if len(sd) else None,
            "slowdown_p95": round(float(np.percentile(sd, 95)), 4) if len(sd) else None,
            "queue_mean_s": round(float(wait.mean()), 1) if len(wait) else None,
            "completed": int(m.completed), "killed": int(m.killed), "requeued": int(m.requeued),
            "failure_kills": int(res.sim.failure_kills), "contention_updates": res.contention_updates}


def simulate_mix(cluster: SchedCluster, drawn: DrawnWorkload, bodies: Bodies, *, policy: str = "backfill",
                 placement: str = "first-fit", fabric: Fabric | None = None,
                 failures: FailureEvents | None = None, seed: int = 0, progress=None) -> CosimResult:
    """One co-simulated run of ``drawn`` (see the module docstring)."""
    from clustertwin.sched.engine import get_policy

    cfg = SimConfig(policy=get_policy(policy), placement=placement, placement_seed=seed)
    return CoSimulator(cluster, drawn, bodies, cfg, fabric, failures).run_cosim(progress)
