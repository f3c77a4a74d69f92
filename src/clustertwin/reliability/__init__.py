"""Reliability: failure model (Llama 3 causes, measured sites, job-size terms), checkpoint cost and interval,
restart policies and recovery styles, analytical expectation and Monte Carlo of a long training run
(docs/reliability.md)."""

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
from clustertwin.reliability.policy import POLICIES, RECOVERY_STYLES, RecoveryStyle, RestartParams, Scenario
from clustertwin.reliability.recovery import RecoveryTimes, recovery_times
from clustertwin.reliability.sites import SITES, RateRange, fleet_model, job_mttf_curve, rate_range

__all__ = [
    "POLICIES",
    "RECOVERY_STYLES",
    "SITES",
    "AnalyticResult",
    "CheckpointCost",
    "FailureCause",
    "FailureModel",
    "JobFailureRates",
    "MonteCarloResult",
    "RateRange",
    "RecoveryStyle",
    "RecoveryTimes",
    "ReliabilityResult",
    "RestartParams",
    "Scenario",
    "analytic",
    "checkpoint_bytes",
    "checkpoint_cost",
    "cluster_checkpoint_cost",
    "daly_interval_s",
    "estimate",
    "fleet_model",
    "job_failure_rates",
    "job_mttf_curve",
    "param_count",
    "rate_range",
    "recovery_times",
    "simulate",
    "with_failures",
    "young_interval_s",
]
