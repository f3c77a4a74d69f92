"""Sweep throughput on a 100,000-point space (2 models x 4 nodes x 5 sizes x 5 fabrics x 2 topologies x
2 precisions x 25 layouts x 5 checkpoint policies): points per second of the local executor with 1 and 2
processes and of the Ray executor on a local Ray. Each run evaluates every point once (cold caches)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from clustertwin.sweep import load_space, run_local, run_ray

LAYOUTS = [{"tp": tp, "pp": pp, "micro_batch": mb, "recompute": rc}
           for tp in (2, 4, 8) for pp in (1, 2, 4, 8) for mb in (1, 2) for rc in ("selective", "full")][:25]
SPACE = {
    "name": "bench-100k", "model": ["llama3-70b", "llama3-8b"],
    "node": ["dgx-h100", "dgx-h200", "dgx-b200", "mi300x-8"], "nodes": [16, 32, 64, 128, 256],
    "fabric": ["ib-ndr", "ib-xdr", "roce-400g", "roce-800g", "ib-hdr"], "topology": ["rail-optimized", "fat-tree"],
    "precision": ["bf16", "fp8"], "layout": LAYOUTS,
    "checkpoint": [{"policy": "restart"}, {"policy": "restart", "async_checkpoint": True}, {"policy": "spares"},
                   {"policy": "spares", "async_checkpoint": True}, {"policy": "elastic"}],
}


@pytest.fixture(scope="module")
def space():
    s = load_space(SPACE)
    assert s.size == 100_000
    return s


def _record(benchmark, run) -> None:
    benchmark.extra_info.update(points=run.points, seconds=run.seconds, points_per_s=run.points_per_s,
                                workers=run.workers, batches=run.batches)
    print(f"\n{run.executor} x{run.workers}: {run.points:,} points in {run.seconds:.1f} s = "
          f"{run.points_per_s:,.0f} points/s")


@pytest.mark.parametrize("processes", [1, 2])
def test_local_points_per_s(benchmark, space, processes) -> None:
    """Local executor, 1 and 2 worker processes."""
    run = benchmark.pedantic(run_local, args=(space,), kwargs={"processes": processes}, rounds=1, iterations=1)
    _record(benchmark, run)
    assert run.points == 100_000


def test_ray_points_per_s(benchmark, space) -> None:
    """Ray executor on a local Ray with 2 CPUs (started and stopped by the run)."""
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI"):
            pytest.fail("ray is not installed")
        pytest.skip("ray is not installed")
    run = benchmark.pedantic(run_ray, args=(space,), kwargs={"num_cpus": 2}, rounds=1, iterations=1)
    _record(benchmark, run)
    assert run.points == 100_000
