"""Cluster scheduler simulator: event engine, policies, placement, trace readers, synthetic traces, metrics.

Typical use::

    from clustertwin.sched import cluster, readers, simulate, compute_metrics
    cl = cluster.from_node_list("openb_node_list_gpu_node.csv")
    trace = readers.read_trace("openb_pod_list_default.csv", "pai2023")
    res = simulate(cl, trace.jobs, "backfill", placement="fgd")
    print(compute_metrics(res, skipped_lines=trace.report.malformed))
"""

from clustertwin.sched import cluster, fill, readers, synthetic
from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.engine import POLICIES, MultifactorWeights, Policy, SimResult, get_policy, simulate
from clustertwin.sched.failures import FailureEvents, exponential_failures
from clustertwin.sched.fill import FillResult
from clustertwin.sched.jobs import JobTable, Trace, TraceReport, make_jobs
from clustertwin.sched.metrics import Metrics
from clustertwin.sched.metrics import compute as compute_metrics
from clustertwin.sched.placement import PLACEMENTS
from clustertwin.sched.readers import FORMATS, read_trace

__all__ = [
    "FORMATS",
    "PLACEMENTS",
    "POLICIES",
    "FailureEvents",
    "FillResult",
    "JobTable",
    "Metrics",
    "MultifactorWeights",
    "Policy",
    "SchedCluster",
    "SimResult",
    "Trace",
    "TraceReport",
    "cluster",
    "compute_metrics",
    "exponential_failures",
    "fill",
    "get_policy",
    "make_jobs",
    "read_trace",
    "readers",
    "simulate",
    "synthetic",
]
