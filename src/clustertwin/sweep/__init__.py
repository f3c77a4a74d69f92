"""Design-space exploration: spaces (grid or random) over cluster designs, workloads, layouts and
checkpoint policies, and cluster spaces (``kind: cluster``: co-simulations of a workload mix over policy,
placement, routing, cluster and seed); per-point training, reliability and facility evaluation; local-process and Ray
executors; Parquet results (schema in :mod:`clustertwin.sweep.schema`) and Pareto fronts. See docs/sweep.md.
"""

from clustertwin.sweep.cluster_eval import CLUSTER_COLUMNS, evaluate_cluster_points
from clustertwin.sweep.cluster_space import CLUSTER_AXES, ClusterSweepSpace
from clustertwin.sweep.evaluate import evaluate_points
from clustertwin.sweep.executors import EXECUTORS, SweepRun, evaluate_any, run, run_local, run_ray
from clustertwin.sweep.pareto import FRONTS, front, fronts_by, pareto_mask
from clustertwin.sweep.schema import COLUMNS, STATUSES, schema, to_table, write_parquet
from clustertwin.sweep.space import AXES, CheckpointChoice, LayoutChoice, SweepSpace, load_space, point_ids

__all__ = [
    "AXES",
    "CLUSTER_AXES",
    "CLUSTER_COLUMNS",
    "COLUMNS",
    "EXECUTORS",
    "FRONTS",
    "STATUSES",
    "CheckpointChoice",
    "ClusterSweepSpace",
    "LayoutChoice",
    "SweepRun",
    "SweepSpace",
    "evaluate_any",
    "evaluate_cluster_points",
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
