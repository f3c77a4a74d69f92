"""Design-space exploration: spaces (grid or random) over cluster designs, workloads, layouts and
checkpoint policies; per-point training, reliability and facility evaluation; local-process and Ray
executors; Parquet results (schema in :mod:`clustertwin.sweep.schema`) and Pareto fronts. See docs/sweep.md.
"""

from clustertwin.sweep.evaluate import evaluate_points
from clustertwin.sweep.executors import EXECUTORS, SweepRun, run, run_local, run_ray
from clustertwin.sweep.pareto import FRONTS, front, fronts_by, pareto_mask
from clustertwin.sweep.schema import COLUMNS, STATUSES, schema, to_table, write_parquet
from clustertwin.sweep.space import AXES, CheckpointChoice, LayoutChoice, SweepSpace, load_space, point_ids

__all__ = [
    "AXES",
    "COLUMNS",
    "EXECUTORS",
    "FRONTS",
    "STATUSES",
    "CheckpointChoice",
    "LayoutChoice",
    "SweepRun",
    "SweepSpace",
    "evaluate_points",
    "front",
    "fronts_by",
    "load_space",
    "pareto_mask",
    "point_ids",
    "run",
    "run_local",
    "run_ray",
    "schema",
    "to_table",
    "write_parquet",
]
