"""``clustertwin sweep`` of a cluster space (``kind: cluster``, :mod:`clustertwin.sweep.cluster_space`): one
co-simulation per (cluster, seed, routing, policy, placement), the records written to Parquet and printed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from clustertwin.cli.common import console, print_json, table

SHOWN = ("point_id", "cluster", "seed", "routing", "policy", "placement", "utilization", "goodput_gpu_hours",
         "interference_gpu_hours", "slowdown_p95", "queue_mean_s", "status")


def cluster_sweep(space: Any, target: Path, *, executor: str, processes: int | None, address: str | None,
                  batch_points: int | None, progress: Any, json_out: bool) -> None:
    """Run ``space`` on ``executor``, stream the rows to ``target``, print the summary and the table."""
    import pyarrow.parquet as pq

    from clustertwin.sweep import run
    from clustertwin.sweep.stream import ParquetStream

    with progress as (bar, task_of), ParquetStream.for_space(target, space) as sink:
        task = task_of(space.name, space.size)
        result = run(space, executor, processes=processes, address=address, batch_points=batch_points,
                     progress=lambda done, total: bar.update(task, completed=done), sink=sink)
    statuses = Counter(sink.status)
    rows = pq.read_table(target, columns=list(SHOWN)).to_pylist()
    summary = {"space": space.name, "kind": "cluster", "out": str(target), "points": result.points,
               "executor": result.executor, "workers": result.workers, "batches": result.batches,
               "seconds": result.seconds, "status": dict(sorted(statuses.items())), "rows": rows}
    if json_out:
        print_json(summary)
        return
    console.print(f"{space.name}: {result.points:,} co-simulations on {result.executor} ({result.workers} "
                  f"worker{'s' if result.workers != 1 else ''}) in {result.seconds:.1f} s; wrote {target}",
                  highlight=False, markup=False)
    console.print("status: " + ", ".join(f"{k} {v:,}" for k, v in sorted(statuses.items())), highlight=False)
    console.print(table("the cluster as a whole, per scenario",
                        ["point", "cluster", "seed", "routing", "policy", "placement", "util", "goodput GPU-h",
                         "interference GPU-h", "slowdown p95", "queue mean s", "status"],
                        [[r[c] for c in SHOWN] for r in rows]))
