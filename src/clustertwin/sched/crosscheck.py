"""Cross-check of the simulator's EASY backfill against a real Slurm (``sched crosscheck``).

A short seeded trace of sleep jobs is submitted to a local multi-node Slurm
(:mod:`clustertwin.sched.slurm_local`) at its (scaled) submit times; start and end times are read back
with ``sacct --completion``. The simulator then replays the same jobs on the same cluster under the
``backfill`` policy (FIFO + EASY, what the Slurm instance is configured to do), with the submit times
Slurm saw, the runtimes Slurm measured (End − Start) and the same time limits (Slurm keeps limits in
whole minutes), and the two schedules are compared job by job.

What Slurm does that the simulator does not (and so the tolerance):

- the backfill scheduler runs every ``bf_interval`` seconds (1 s here, 30 s by default), not at every
  event; a backfilled job can start up to ``bf_interval`` late;
- times are whole seconds (sacct), and planned in ``bf_resolution`` steps (1 s here);
- starting and ending a job takes real time (fork of slurmstepd, epilog, node message): a job starts
  about 1 s after ``sbatch`` on idle nodes, and a fraction of a second to a second after the job it
  waited for ended (more on a loaded host). The replay measures both lags on the run itself
  (:func:`estimate_lags`) and adds them to every submit time and to every job's occupancy (End − Start
  measured by Slurm); the remaining jitter adds up along chains of jobs that wait for one another, and
  now and then a sub-second shift changes which job fits a hole first (a backfill decision flips), after
  which the two schedules differ for a while.
- Slurm reserves a concrete node set for the top job; the simulator only requires that the head still
  fits somewhere at its shadow time. With whole-node jobs on identical nodes the two coincide.

Tolerance: ``tolerance_s = bf_interval_s + bf_resolution_s + LAUNCH_LAG_S x (1 + chain depth)``, where the
chain depth of a job is how many jobs it waited for one after the other in the simulated schedule.
Order agreement: over all pairs of jobs whose simulated starts differ by more than the sum of their
tolerances, the fraction Slurm started in the same order.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import engine
from clustertwin.sched.jobs import JobTable, make_jobs
from clustertwin.sched.slurm_local import LocalSlurm

MAX_JOBS = 200
"""Largest cross-check trace (each job is a real sleep)."""
MAX_NODES = 16
"""Most virtual nodes (one slurmd process each)."""
MIN_ORDER_AGREEMENT = 0.95
"""Order agreement the CI check requires (pairs separated by more than their tolerances)."""
MIN_WITHIN_FRACTION = 0.75
"""Share of jobs the CI check requires within their start-time tolerance."""
LAUNCH_LAG_S = 1.0
"""Allowed lag per job start (launch + whole-second timestamps), measured on the local Slurm."""
MINUTE_S = 60


@dataclass(frozen=True)
class CrossTrace:
    """Sleep jobs: submit offset (s), GPUs per node, nodes, sleep (s), time limit (whole minutes)."""

    submit_s: np.ndarray
    gpus_per_node: np.ndarray
    nodes: np.ndarray
    sleep_s: np.ndarray
    limit_min: np.ndarray

    def __len__(self) -> int:
        return len(self.submit_s)


def make_trace(jobs: int = 32, *, nodes: int = 4, gpus_per_node: int = 8, seed: int = 1,
               mean_gap_s: float = 1.2, sleep_range_s: tuple[int, int] = (2, 8),
               whole_nodes: bool = True) -> CrossTrace:
    """A seeded trace that keeps ``nodes x gpus_per_node`` GPUs contended, Poisson arrivals
    ``mean_gap_s`` apart, sleeps of 2-10 s, limits of 1-3 minutes.

    ``whole_nodes`` (default): jobs of 1, 2 or 3 whole nodes (probabilities 0.5 / 0.3 / 0.2), so every
    free node is as good as another and Slurm's node choice cannot steer the schedule away from the
    simulator's; multi-node heads wait while one-node jobs backfill. Otherwise quarter-, half- and whole-node
    jobs and two-node jobs, where the node a small job lands on (Slurm's cons_tres choice vs the
    simulator's placement) changes what fits later. About 1.5 minutes on 4 x 8 GPUs."""
    if jobs < 1 or nodes < 1 or gpus_per_node < 1:
        raise SpecError("crosscheck trace needs jobs, nodes and gpus_per_node >= 1")
    rng = np.random.default_rng(seed)
    gaps = np.rint(rng.exponential(mean_gap_s, size=jobs))
    submit = np.cumsum(gaps) - gaps[0]
    if whole_nodes:
        shapes = [(gpus_per_node, k) for k in (1, 2, 3) if k <= nodes]
        probs = np.array([0.5, 0.3, 0.2][: len(shapes)])
    else:
        quarter, half = max(gpus_per_node // 4, 1), max(gpus_per_node // 2, 1)
        shapes = [(quarter, 1), (half, 1), (gpus_per_node, 1)] + ([(gpus_per_node, 2)] if nodes >= 2 else [])
        probs = np.array([0.3, 0.3, 0.25, 0.15][: len(shapes)])
    pick = rng.choice(len(shapes), size=jobs, p=probs / probs.sum())
    lo, hi = sleep_range_s
    return CrossTrace(
        submit_s=submit,
        gpus_per_node=np.array([shapes[k][0] for k in pick], dtype=np.int64),
        nodes=np.array([shapes[k][1] for k in pick], dtype=np.int64),
        sleep_s=rng.integers(lo, hi + 1, size=jobs),
        limit_min=rng.choice([1, 2, 3], size=jobs),
    )


def _local(text: str) -> float:
    """sacct prints local time; the instance runs on this host, so local = this process's zone."""
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


@dataclass(frozen=True)
class SlurmRun:
    job_ids: tuple[str, ...]
    submit_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    wall_s: float


def run_on_slurm(inst: LocalSlurm, trace: CrossTrace, *, timeout_s: float = 240.0) -> SlurmRun:
    """Submit ``trace`` at its offsets, wait until every job ended, read Start/End back with sacct.
    Submit times are the wall clock at each ``sbatch`` (Slurm records the same second)."""
    t0 = time.time()
    ids: list[str] = []
    submitted: list[float] = []
    for i in range(len(trace)):
        while time.time() - t0 < trace.submit_s[i]:
            time.sleep(0.01)
        n = int(trace.nodes[i])
        submitted.append(time.time())
        out = inst.run("sbatch", "--parsable", "-p", inst.partition, "-N", str(n), "-n", str(n),
                       f"--gres=gpu:{int(trace.gpus_per_node[i])}", f"--time={int(trace.limit_min[i])}",
                       "-o", "/dev/null", "-J", f"ct{i:03d}", "--wrap", f"sleep {int(trace.sleep_s[i])}")
        ids.append(out.strip().split(";")[0])
    deadline = time.monotonic() + timeout_s
    while inst.run("squeue", "-h", "-o", "%i", check=False).strip():
        if time.monotonic() > deadline:
            raise SpecError(f"Slurm jobs still queued after {timeout_s:g} s")
        time.sleep(0.5)
    wall = time.time() - t0
    recs: dict[str, tuple[float, float]] = {}
    for _ in range(20):  # jobcomp records are written as jobs complete; give the last one a moment
        text = inst.run("sacct", "--completion", "--parsable2", "--noheader", "-o", "JobID,Start,End,State")
        recs = {}
        for line in text.splitlines():
            parts = line.split("|")
            if len(parts) >= 3 and re.fullmatch(r"\d+", parts[0]):
                recs[parts[0]] = (_local(parts[1]), _local(parts[2]))
        if all(i in recs for i in ids):
            break
        time.sleep(0.5)
    missing = [i for i in ids if i not in recs]
    if missing:
        raise SpecError(f"sacct has no record of Slurm jobs {missing[:5]}")
    # sacct --completion prints the start time as Submit; the jobcomp record it reads has SubmitTime
    subs = _jobcomp_submit(inst)
    submit = np.array([subs.get(i, math.floor(w)) for i, w in zip(ids, submitted, strict=True)], dtype=float)
    return SlurmRun(tuple(ids), submit, np.array([recs[i][0] for i in ids]),
                    np.array([recs[i][1] for i in ids]), wall)


_JOBCOMP = re.compile(r"JobId=(\d+) .*?SubmitTime=(\S+)")


def _jobcomp_submit(inst: LocalSlurm) -> dict[str, float]:
    """Submit time per job id from the jobcomp/filetxt records (local time, whole seconds)."""
    out = {}
    path = inst.root / "jobcomp.log"
    for line in path.read_text(errors="replace").splitlines():
        m = _JOBCOMP.search(line)
        if m:
            out[m.group(1)] = _local(m.group(2))
    return out


def estimate_lags(run: SlurmRun) -> tuple[float, float]:
    """``(start lag, release lag)`` measured on this run: the median of start − submit over jobs that
    started within ``LAUNCH_LAG_S + 1`` s of submission, and the median over the other jobs of start − the
    latest end at or before it (the time from a job ending to the waiting job starting); each
    ``LAUNCH_LAG_S`` when no job shows it."""
    wait = run.start_s - run.submit_s
    quick = wait <= LAUNCH_LAG_S + 1
    start_lag = float(np.median(wait[quick])) if quick.any() else LAUNCH_LAG_S
    gaps = []
    for j in np.flatnonzero(~quick).tolist():
        ended = run.end_s[run.end_s <= run.start_s[j]]
        if len(ended):
            gaps.append(run.start_s[j] - ended.max())
    release_lag = float(np.median(gaps)) if gaps else LAUNCH_LAG_S
    return start_lag, release_lag


def replay_jobs(trace: CrossTrace, run: SlurmRun, lag_s: float = 0.0,
                release_lag_s: float | None = None) -> JobTable:
    """The trace as the simulator sees it: Slurm's submit seconds (from the first), Slurm's measured
    runtimes, limits in seconds."""
    origin = float(run.submit_s.min())
    units = np.where(trace.nodes > 1, trace.nodes, 0)
    release = lag_s if release_lag_s is None else release_lag_s
    return make_jobs([f"ct{i:03d}" for i in range(len(trace))], run.submit_s - origin + lag_s,
                     run.end_s - run.start_s + release,
                     trace.gpus_per_node, units=units, limit_s=trace.limit_min * MINUTE_S)


def chain_depth(res: engine.SimResult) -> np.ndarray:
    """How many jobs each job waited for, one after the other: 0 if it started at submission, else 1 +
    the depth of the job whose end released it (the latest end at or before its start)."""
    jobs = res.jobs
    order = np.argsort(res.start_s, kind="stable")
    depth = np.zeros(len(jobs), dtype=np.int64)
    for j in order.tolist():
        if res.start_s[j] <= jobs.submit_s[j] + 1e-9:
            continue
        ended = np.flatnonzero(res.end_s <= res.start_s[j] + 1e-9)
        if len(ended):
            k = ended[np.argmax(res.end_s[ended])]
            depth[j] = depth[k] + 1
    return depth


@dataclass(frozen=True)
class Comparison:
    jobs: int
    nodes: int
    gpus: int
    placement: str
    slurm_wall_s: float
    diff_s: np.ndarray
    """Slurm start − simulated start, per job (s)."""
    tolerance_s: np.ndarray
    within: int
    pairs: int
    pairs_agree: int
    bf_interval_s: int
    bf_resolution_s: int

    @property
    def order_agreement(self) -> float:
        return self.pairs_agree / self.pairs if self.pairs else 1.0

    def to_dict(self) -> dict:
        d = self.diff_s
        return {
            "jobs": self.jobs, "nodes": self.nodes, "gpus": self.gpus, "placement": self.placement,
            "slurm_wall_s": round(self.slurm_wall_s, 1),
            "bf_interval_s": self.bf_interval_s, "bf_resolution_s": self.bf_resolution_s,
            "start_diff_s": {"mean": float(d.mean()), "mean_abs": float(np.abs(d).mean()),
                             "max_abs": float(np.abs(d).max()), "p50": float(np.median(d))},
            "within_tolerance": self.within,
            "order_pairs": self.pairs, "order_pairs_agree": self.pairs_agree,
            "order_agreement": self.order_agreement,
        }


def compare(trace: CrossTrace, run: SlurmRun, inst_nodes: int, gpus_per_node: int, *,
            placement: str = "best-fit", bf_interval_s: int = 1, bf_resolution_s: int = 1,
            lag_s: float | None = None) -> tuple[
                Comparison, engine.SimResult]:
    """Simulate the replayed trace under ``backfill`` and compare start times and order with Slurm's."""
    if lag_s is None:
        start_lag, release_lag = estimate_lags(run)
    else:
        start_lag = release_lag = lag_s
    jobs = replay_jobs(trace, run, start_lag, release_lag)
    cl = sched_cluster.uniform(inst_nodes, gpus_per_node, name="local-slurm")
    res = engine.simulate(cl, jobs, "backfill", placement=placement)
    origin = float(run.submit_s.min())
    # make_jobs sorts by submit (stable); map back to trace order
    pos = {jid: k for k, jid in enumerate(jobs.ids)}
    idx = np.array([pos[f"ct{i:03d}"] for i in range(len(trace))])
    sim_start = res.start_s[idx]
    slurm_start = run.start_s - origin
    diff = slurm_start - sim_start
    depth = chain_depth(res)[idx]
    tol = bf_interval_s + bf_resolution_s + LAUNCH_LAG_S * (1 + depth)
    within = int((np.abs(diff) <= tol).sum())
    pairs = agree = 0
    n = len(trace)
    for a in range(n):
        for b in range(a + 1, n):
            gap = sim_start[b] - sim_start[a]
            if abs(gap) <= tol[a] + tol[b]:
                continue
            pairs += 1
            if math.copysign(1, gap) == math.copysign(1, slurm_start[b] - slurm_start[a]) and \
                    slurm_start[b] != slurm_start[a]:
                agree += 1
    return Comparison(n, inst_nodes, inst_nodes * gpus_per_node, placement, run.wall_s, diff, tol, within,
                      pairs, agree, bf_interval_s, bf_resolution_s), res


def per_job(trace: CrossTrace, run: SlurmRun, cmp_: Comparison, res: engine.SimResult) -> list[dict]:
    """One row per job in trace order (times in s from the first submission)."""
    origin = float(run.submit_s.min())
    pos = {jid: k for k, jid in enumerate(res.jobs.ids)}
    rows = []
    for i in range(len(trace)):
        k = pos[f"ct{i:03d}"]
        rows.append({
            "job": f"ct{i:03d}", "slurm_id": run.job_ids[i], "gpus": int(trace.gpus_per_node[i]),
            "nodes": int(trace.nodes[i]), "limit_min": int(trace.limit_min[i]),
            "runtime_s": float(run.end_s[i] - run.start_s[i]), "submit_s": float(run.submit_s[i] - origin),
            "slurm_start_s": float(run.start_s[i] - origin), "sim_start_s": float(res.start_s[k]),
            "diff_s": float(cmp_.diff_s[i]), "tolerance_s": float(cmp_.tolerance_s[i]),
        })
    return rows
