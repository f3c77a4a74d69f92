"""Reliability: failure model, checkpoint cost and interval, restart policies, analytical expectation and
Monte Carlo of a long training run (docs/reliability.md)."""

from clustertwin.reliability.analytic import AnalyticResult, analytic
from clustertwin.reliability.checkpoint import (
    CheckpointCost,
    checkpoint_bytes,
    checkpoint_cost,
    cluster_checkpoint_cost,
    daly_interval_s,
    param_count,
    young_interval_s,
)
from clustertwin.reliability.failures import FailureCause, FailureModel, JobFailureRates, job_failure_rates
from clustertwin.reliability.model import ReliabilityResult, estimate, with_failures
from clustertwin.reliability.montecarlo import MonteCarloResult, simulate
from clustertwin.reliability.policy import POLICIES, RestartParams, Scenario

__all__ = [
    "POLICIES",
    "AnalyticResult",
    "CheckpointCost",
    "FailureCause",
    "FailureModel",
    "JobFailureRates",
    "MonteCarloResult",
    "ReliabilityResult",
    "RestartParams",
    "Scenario",
    "analytic",
    "checkpoint_bytes",
    "checkpoint_cost",
    "cluster_checkpoint_cost",
    "daly_interval_s",
    "estimate",
    "job_failure_rates",
    "param_count",
    "simulate",
    "with_failures",
    "young_interval_s",
]
