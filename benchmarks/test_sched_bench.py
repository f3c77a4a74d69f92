"""Performance targets (issue 19): EASY backfill over 100,000 jobs on a 1,024-node (8,192-GPU) cluster in at
most 4 s of CPU time, and 1,000,000 jobs in at most 60 s (CPU time, ``time.process_time``; wall printed).

The trace is synthetic and saturating: offered load 1.2 x the GPU capacity (over-subscribed, the hard case for
backfill), Philly median runtime (874 s) with a 3x mean (a lighter tail than Philly's, so that the cluster
stays full and the queue long for the whole run instead of draining around a few month-long jobs), the
default GPU mix (1-64 GPUs, jobs above 8 GPUs as whole nodes), time limits 1-3x the runtime.

Measured on a shared 2-core host whose speed drifted by about 25 % during the measurements (the unchanged
1M-row reader benchmark read 1.6-2.0 s): 100k jobs 3.9 s CPU (wall 4.0 s), 1M jobs 52.2 s CPU (were 9.9 s and
124 s before the shape filter, bit-mask placement, list-backed node state, heap of running jobs and GC
pause; the previous engine ran 100k jobs in 9.6-12.5 s on the host at the time). The 100k figure sits
at its 4 s target, not safely under it, on a loaded host.
"""

from __future__ import annotations

import gc
import time

import pytest

from clustertwin.sched import cluster as C
from clustertwin.sched import engine, metrics, synthetic

NODES = 1024
GPUS_PER_NODE = 8
TARGETS_CPU_S = {100_000: 4.0, 1_000_000: 60.0}


def _spec(jobs: int) -> synthetic.SyntheticSpec:
    return synthetic.SyntheticSpec(jobs=jobs, target_load=1.2, median_runtime_s=synthetic.PHILLY_MEDIAN_RUNTIME_S,
                                   mean_runtime_s=3 * synthetic.PHILLY_MEDIAN_RUNTIME_S, seed=2024)


@pytest.mark.parametrize("jobs", [100_000, pytest.param(1_000_000, marks=pytest.mark.slow)])
def test_easy_backfill_cpu_time(benchmark, jobs):
    cl = C.uniform(NODES, GPUS_PER_NODE)
    table = synthetic.generate(_spec(jobs), cl.total_gpus)
    gc.collect()  # earlier benchmarks' garbage is not this one's cost
    t0, c0 = time.perf_counter(), time.process_time()
    res = benchmark.pedantic(engine.simulate, args=(cl, table, "backfill"), rounds=1, iterations=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = metrics.compute(res)
    print(f"\n{jobs:,} jobs, {cl.total_gpus:,} GPUs, EASY backfill: wall {wall:.1f} s, CPU {cpu:.1f} s; "
          f"utilisation {m.gpu_utilization:.3f}, avg queue {m.avg_queue_s:,.0f} s, bsld {m.bounded_slowdown:.2f}")
    assert m.completed + m.killed + m.queued + m.running + m.unschedulable == jobs
    assert m.avg_queue_s > 0  # the cluster is contended: backfill had work to do
    assert cpu <= TARGETS_CPU_S[jobs], f"{jobs:,} jobs took {cpu:.1f} s of CPU"
