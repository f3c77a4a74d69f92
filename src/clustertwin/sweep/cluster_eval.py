"""Evaluate the points of a cluster space: each point is one co-simulation of the space's workload mix
(:func:`clustertwin.sched.cosim.simulate_mix`) and its record is the one ``sched simulate --workload``
prints (:func:`clustertwin.sched.cosim.record`), plus the point's axes and status.

Each point is a pure function of its choices: fresh job bodies (:class:`~clustertwin.sched.bodies.Bodies`)
of the cluster, the jobs drawn with the point's seed (:func:`~clustertwin.sched.workload.draw`), the
injected failures, then one ``simulate_mix``. Bodies cache step profiles by allocation *span* (nodes,
leaves, pods, hops), the first allocation of a span standing for all of them, so a Bodies object that has
seen other runs can give other step times; the sweep therefore never lets one point's run warm another's
cache: per process the cluster's pristine bodies are built once, each (cluster, seed) scenario copies
them and draws its jobs, and each point runs on its own copy of that drawn state. So any split of the
points into batches, workers or executors gives the same rows, and each row equals a direct run of
``simulate_mix`` on fresh bodies (what ``sched simulate --workload`` does for its first policy and
placement).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import numpy as np
import pyarrow as pa

from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import contention, cosim, failures, workload
from clustertwin.sched.bodies import Bodies
from clustertwin.sweep.cluster_space import SCENARIO_AXES, ClusterSweepSpace, cluster_axis_indices

CLUSTER_COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("point_id", pa.int64(), "flat index of the point in the grid (C order of cluster, seed, routing, policy, placement)"),
    ("cluster", pa.string(), "cluster catalog id or file, as written in the space"),
    ("seed", pa.int64(), "seed of the job draw, the failures and the random placement"),
    ("routing", pa.string(), "routing of the contention model: ecmp or adaptive"),
    ("policy", pa.string(), "scheduler policy"),
    ("placement", pa.string(), "placement"),
    ("network", pa.string(), "network model as the co-simulator names it, e.g. 'contention (ecmp)' or 'ideal'"),
    ("status", pa.string(), "ok, or invalid_design when the mix cannot run on the cluster"),
    ("reason", pa.string(), "why the point is not ok (null when ok)"),
    ("jobs", pa.int64(), "jobs drawn from the mix"),
    ("utilization", pa.float64(), "GPU utilisation: allocated GPU-time / (GPUs x makespan)"),
    ("goodput_gpu_hours", pa.float64(), "isolated step time x steps kept, GPU-hours"),
    ("interference_gpu_hours", pa.float64(), "time beyond the isolated step spent waiting for the network, GPU-hours"),
    ("failure_loss_gpu_hours", pa.float64(), "steps lost since the last checkpoint plus restart time, GPU-hours"),
    ("checkpoint_gpu_hours", pa.float64(), "checkpoint save stalls, GPU-hours"),
    ("killed_gpu_hours", pa.float64(), "progress of jobs killed at their time limit, GPU-hours"),
    ("slowdown_mean", pa.float64(), "mean over completed jobs of (end - first start) / isolated runtime"),
    ("slowdown_p95", pa.float64(), "95th percentile of that slowdown"),
    ("queue_mean_s", pa.float64(), "mean wait from submission to first start, s"),
    ("completed", pa.int64(), "jobs completed"),
    ("killed", pa.int64(), "jobs killed at their time limit"),
    ("requeued", pa.int64(), "requeues (failure kills put back in the queue)"),
    ("failure_kills", pa.int64(), "job kills by node failures"),
    ("contention_updates", pa.int64(), "max-min fair rate updates of the contention model"),
)
"""Column name, Arrow type and description, in file order."""

CLUSTER_TEXT = tuple(n for n, t, _ in CLUSTER_COLUMNS if str(t) == "string")
CLUSTER_NUMERIC = tuple(n for n, _, _ in CLUSTER_COLUMNS if n not in CLUSTER_TEXT)
_AXIS_TEXT = ("cluster", "routing", "policy", "placement")
_RECORD_NUMERIC = tuple(n for n in CLUSTER_NUMERIC if n not in ("point_id", "seed", "jobs"))


@functools.lru_cache(maxsize=8)
def _bodies(ref: str, mix_json: str, mtbf_h: float | None) -> tuple[Bodies, sched_cluster.SchedCluster]:
    """Job bodies and scheduler view of cluster ``ref`` (``sched simulate --workload``'s setup)."""
    from clustertwin import specs

    spec = specs.load(specs.ClusterSpec, ref, kind="cluster")
    mix = workload.WorkloadMix.model_validate_json(mix_json)
    bodies = Bodies(mix, spec, node_mtbf_h=mtbf_h or failures.DEFAULT_NODE_MTBF_H)
    return bodies, sched_cluster.from_spec(spec)


@functools.lru_cache(maxsize=16)
def _fabric(ref: str, mix_json: str, mtbf_h: float | None, routing: str) -> contention.Fabric:
    return contention.fabric_of(_bodies(ref, mix_json, mtbf_h)[0].topology, routing)


Scenario = tuple[Bodies, sched_cluster.SchedCluster, workload.DrawnWorkload, failures.FailureEvents | None]
"""Bodies (after the draw), scheduler cluster, drawn jobs, injected failures."""


def scenario(space: ClusterSweepSpace, ref: str, seed: int) -> Scenario:
    """Bodies, scheduler cluster, drawn jobs and failures (None without ``node_mtbf_h``) of one (cluster,
    seed): exactly what ``sched simulate --workload --seed SEED [--node-mtbf-h H]`` builds. The bodies have
    only served the draw; they are cached per process and shared: run each point on a copy of them."""
    return _scenario(ref, space.mix.model_dump_json(), space.node_mtbf_h, seed, space.max_jobs,
                     space.node_mttr_h, space.max_failure_events)


@functools.lru_cache(maxsize=8)
def _scenario(ref: str, mix_json: str, mtbf_h: float | None, seed: int, max_jobs: int | None, mttr_h: float,
              max_events: int) -> Scenario:
    pristine, cl = _bodies(ref, mix_json, mtbf_h)
    bodies = copy.deepcopy(pristine)
    drawn = workload.draw(bodies.mix, bodies.iso_runtime_s, bodies.gpus_per_node, seed=seed, max_jobs=max_jobs)
    fail = None
    if mtbf_h is not None:
        jobs = drawn.jobs
        horizon = float(jobs.submit_s[-1] + jobs.limit_s.max())
        fail = failures.exponential_failures(cl.nodes, horizon, mtbf_h=mtbf_h, mttr_h=mttr_h, seed=seed,
                                             max_events=max_events)
    return bodies, cl, drawn, fail


def empty_columns(n: int) -> dict[str, Any]:
    """Result columns of ``n`` points: numeric float64 NaN (null), text None."""
    cols: dict[str, Any] = {name: np.full(n, np.nan) for name in CLUSTER_NUMERIC}
    cols.update({name: [None] * n for name in CLUSTER_TEXT})
    return cols


def _evaluate_scenario(space: ClusterSweepSpace, ax: dict[str, np.ndarray], rows: np.ndarray,
                       cols: dict[str, Any]) -> None:
    r0 = int(rows[0])
    ref, seed = space.cluster[ax["cluster"][r0]], space.seed[ax["seed"][r0]]
    try:
        bodies, cl, drawn, fail = scenario(space, space.resolve(ref), seed)
    except SpecError as e:
        for r in rows:
            cols["status"][r], cols["reason"][r] = "invalid_design", str(e)
        return
    mix_json = space.mix.model_dump_json()
    for r in rows:
        routing, policy = space.routing[ax["routing"][r]], space.policy[ax["policy"][r]]
        placement = space.placement[ax["placement"][r]]
        fabric = (_fabric(space.resolve(ref), mix_json, space.node_mtbf_h, routing)
                  if space.network == "contention" else None)
        try:
            res = cosim.simulate_mix(cl, copy.deepcopy(drawn), copy.deepcopy(bodies), policy=policy, placement=placement, fabric=fabric,
                                     failures=fail, seed=seed)
        except SpecError as e:
            cols["status"][r], cols["reason"][r] = "invalid_design", str(e)
            continue
        rec = cosim.record(res, policy, placement)
        cols["status"][r], cols["network"][r] = "ok", rec["network"]
        cols["jobs"][r] = len(drawn.jobs)
        for name in _RECORD_NUMERIC:
            value = rec[name]
            cols[name][r] = np.nan if value is None else float(value)


def evaluate_cluster_points(space: ClusterSweepSpace, ids: np.ndarray) -> dict[str, Any]:
    """Result columns (:data:`CLUSTER_COLUMNS`) of the points ``ids``, in that order: numeric columns as
    float64 arrays (NaN = null), text columns as lists."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    cols = empty_columns(n)
    cols["point_id"][:] = ids
    if n == 0:
        return cols
    ax = cluster_axis_indices(space, ids)
    for name in _AXIS_TEXT:
        choices = getattr(space, name)
        cols[name] = [choices[i] for i in ax[name]]
    cols["seed"][:] = np.asarray(space.seed, dtype=np.float64)[ax["seed"]]
    group = np.ravel_multi_index([ax[a] for a in SCENARIO_AXES], space.shape[:len(SCENARIO_AXES)])
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
    for rows in np.split(order, starts[1:]):
        _evaluate_scenario(space, ax, rows, cols)
    return cols


def preload_cluster(space: ClusterSweepSpace) -> None:
    """Build every cluster's bodies in this process (a process pool forked afterwards inherits them)."""
    mix_json = space.mix.model_dump_json()
    for ref in space.cluster:
        try:
            _bodies(space.resolve(ref), mix_json, space.node_mtbf_h)
        except SpecError:  # reported per point as invalid_design
            continue
