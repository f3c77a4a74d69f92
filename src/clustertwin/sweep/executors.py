"""Executors: run the points of a space in batches, in this process, in a local process pool or on Ray,
and assemble one Arrow table ordered by point id. The evaluation is deterministic, so every executor
and every batch size gives the same table.

Batches are consecutive point ids cut between designs (:func:`clustertwin.sweep.space.design_batches`), so
each design's cluster, plan, training evaluation and reliability terms are built by one worker only. A
cluster space (``kind: cluster``) is cut between (cluster, seed) scenarios instead, so one worker draws
each scenario's jobs and runs its co-simulations (:mod:`clustertwin.sweep.cluster_eval`).

Ray: each task evaluates one batch of point ids (many points per task, so scheduling overhead is paid
per batch, not per point); the space is put in the object store once. ``address`` connects to a running
cluster (``auto``, ``host:port`` or ``ray://host:10001``; clustertwin must be installed on its nodes);
without one a local Ray is started for the sweep and stopped after it.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from clustertwin.errors import SpecError
from clustertwin.sweep import cluster_eval, cluster_space
from clustertwin.sweep.evaluate import NUMERIC_COLUMNS, TEXT_COLUMNS, evaluate_points, preload
from clustertwin.sweep.schema import COLUMNS, to_table
from clustertwin.sweep.space import AnySpace, block_batches, design_batches, point_ids

EXECUTORS: tuple[str, ...] = ("local", "ray")
MAX_BATCH_POINTS = 4096
"""Largest default batch: big enough to amortise a task, small enough to balance workers."""
BATCHES_PER_WORKER = 16
"""Default batching aims at this many batches per worker (load balance and a progress bar that moves in
small steps, against per-task overhead; batches are still cut between designs)."""

Progress = Callable[[int, int], None]
"""Called with (points done, points total) after each batch."""
Sink = Callable[[dict[str, Any]], None]
"""Receives each batch's result columns in point-id order (e.g. :class:`~clustertwin.sweep.stream.ParquetStream`);
with a sink the executor keeps no rows and :attr:`SweepRun.table` is None (memory stays flat)."""


@dataclass(frozen=True)
class SweepRun:
    """A finished sweep: the results table and how long it took."""

    table: pa.Table | None
    executor: str
    workers: int
    batches: int
    seconds: float
    rows: int = -1
    """Points evaluated (the table's rows; given when the rows went to a sink)."""

    @property
    def points(self) -> int:
        return self.rows if self.table is None else self.table.num_rows

    @property
    def points_per_s(self) -> float:
        return self.points / self.seconds if self.seconds > 0 else math.inf


def default_batch_points(points: int, workers: int) -> int:
    """``ceil(points / (workers x BATCHES_PER_WORKER))``, between 1 and :data:`MAX_BATCH_POINTS`."""
    return max(1, min(MAX_BATCH_POINTS, math.ceil(points / (max(workers, 1) * BATCHES_PER_WORKER))))


def concat_columns(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Join evaluator column dicts batch after batch (design-space columns when ``parts`` is empty)."""
    if not parts:
        return {**{n: np.empty(0) for n in NUMERIC_COLUMNS}, **{n: [] for n in TEXT_COLUMNS}}
    out: dict[str, Any] = {}
    for name, first in parts[0].items():
        if isinstance(first, np.ndarray):
            out[name] = np.concatenate([p[name] for p in parts])
        else:
            out[name] = [v for p in parts for v in p[name]]
    return out


def _is_cluster(space: AnySpace) -> bool:
    return isinstance(space, cluster_space.ClusterSweepSpace)


def evaluate_any(space: AnySpace, ids: np.ndarray) -> dict[str, Any]:
    """Result columns of ``ids`` in a space of either kind (:func:`evaluate_points` for a design space,
    :func:`~clustertwin.sweep.cluster_eval.evaluate_cluster_points` for a cluster space)."""
    if _is_cluster(space):
        return cluster_eval.evaluate_cluster_points(space, ids)
    return evaluate_points(space, ids)


def _ids_and_batches(space: AnySpace, batch_points: int | None, workers: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The space's point ids and its batches: cut between designs, or between (cluster, seed) scenarios."""
    if _is_cluster(space):
        ids = cluster_space.cluster_point_ids(space)
        bp = batch_points or default_batch_points(len(ids), workers)
        return ids, block_batches(ids, cluster_space.scenario_block(space), bp)
    ids = point_ids(space)
    return ids, design_batches(space, ids, batch_points or default_batch_points(len(ids), workers))


def _preload(space: AnySpace) -> None:
    if _is_cluster(space):
        cluster_eval.preload_cluster(space)
    else:
        preload(space)


_WORKER_SPACE: AnySpace | None = None


def _init_worker(space: AnySpace) -> None:
    global _WORKER_SPACE
    _WORKER_SPACE = space


def _pool_batch(ids: np.ndarray) -> dict[str, Any]:
    assert _WORKER_SPACE is not None, "worker not initialised"
    return evaluate_any(_WORKER_SPACE, ids)


class _Parts:
    """Batch results kept in memory (no sink) or handed to the sink as they arrive."""

    def __init__(self, sink: Sink | None) -> None:
        self.sink, self.kept, self.rows = sink, [], 0

    def add(self, part: dict[str, Any]) -> None:
        self.rows += len(part["point_id"]) if "point_id" in part else 0
        if self.sink is None:
            self.kept.append(part)
        else:
            self.sink(part)

    def table(self, space: AnySpace) -> pa.Table | None:
        if self.sink is not None:
            return None
        if _is_cluster(space):
            kept = self.kept or [cluster_eval.empty_columns(0)]
            return to_table(concat_columns(kept), space.model_dump_json(), cluster_eval.CLUSTER_COLUMNS)
        return to_table(concat_columns(self.kept), space.model_dump_json(), COLUMNS)


def run_local(space: AnySpace, *, processes: int | None = None, batch_points: int | None = None,
              progress: Progress | None = None, sink: Sink | None = None) -> SweepRun:
    """Evaluate the space in ``processes`` worker processes (1: in this process; default: CPU count)."""
    procs = (os.cpu_count() or 1) if processes is None else processes
    if procs < 1:
        raise SpecError(f"processes must be >= 1 (got {procs})")
    ids, work = _ids_and_batches(space, batch_points, procs)
    start = time.perf_counter()
    parts = _Parts(sink)
    done = 0
    if procs == 1:
        for b in work:
            parts.add(evaluate_any(space, b))
            done += len(b)
            if progress:
                progress(done, len(ids))
    else:
        _preload(space)  # catalog and specs parsed once here; forked workers inherit them
        with ProcessPoolExecutor(max_workers=procs, mp_context=mp.get_context(),
                                 initializer=_init_worker, initargs=(space,)) as pool:
            for b, part in zip(work, pool.map(_pool_batch, work), strict=True):
                parts.add(part)
                done += len(b)
                if progress:
                    progress(done, len(ids))
    return SweepRun(parts.table(space), "local", procs, len(work), time.perf_counter() - start, parts.rows)


def _ray_batch(space: AnySpace, ids: np.ndarray) -> dict[str, Any]:
    return evaluate_any(space, ids)


def run_ray(space: AnySpace, *, address: str | None = None, batch_points: int | None = None,
            num_cpus: int | None = None, progress: Progress | None = None, sink: Sink | None = None) -> SweepRun:
    """Evaluate the space on Ray: connect to ``address`` or start a local Ray (``num_cpus`` CPUs), one task
    per batch of points; a Ray this call started is shut down at the end."""
    try:
        import ray
    except ImportError:
        raise SpecError("the ray executor needs Ray: pip install 'clustertwin[ray]'") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, num_cpus=num_cpus if address is None else None, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        workers = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        ids, work = _ids_and_batches(space, batch_points, workers)
        start = time.perf_counter()
        task = ray.remote(num_cpus=1)(_ray_batch)
        space_ref = ray.put(space)
        pending = {task.remote(space_ref, b): i for i, b in enumerate(work)}
        waiting: dict[int, dict[str, Any]] = {}  # finished out of order, held until their turn
        parts, turn, done = _Parts(sink), 0, 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                waiting[i] = ray.get(ref)
                done += len(work[i])
                while turn in waiting:  # hand batches on in point-id order
                    parts.add(waiting.pop(turn))
                    turn += 1
                if progress:
                    progress(done, len(ids))
        return SweepRun(parts.table(space), "ray", workers, len(work), time.perf_counter() - start, parts.rows)
    finally:
        if started:
            ray.shutdown()


def run(space: AnySpace, executor: str = "local", *, processes: int | None = None, address: str | None = None,
        batch_points: int | None = None, progress: Progress | None = None, sink: Sink | None = None) -> SweepRun:
    """Run the sweep on the named executor (``local`` or ``ray``); with ``sink`` the rows stream to it."""
    if executor == "local":
        if address is not None:
            raise SpecError("--address applies to --executor ray only")
        return run_local(space, processes=processes, batch_points=batch_points, progress=progress, sink=sink)
    if executor == "ray":
        return run_ray(space, address=address, batch_points=batch_points, num_cpus=processes, progress=progress,
                       sink=sink)
    raise SpecError(f"unknown executor '{executor}' (choose from: {', '.join(EXECUTORS)})")
