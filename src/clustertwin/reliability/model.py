"""Reliability of one training run on a cluster: failure rates, checkpoint cost and interval, restart
policy, analytical expectation and Monte Carlo distribution (``estimate``; ``with_failures`` for the
training layer's time-to-train)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from clustertwin.errors import SpecError
from clustertwin.reliability.analytic import AnalyticResult, analytic
from clustertwin.reliability.checkpoint import (
    CheckpointCost,
    cluster_checkpoint_cost,
    daly_interval_s,
    young_interval_s,
)
from clustertwin.reliability.checkpoint import (
    checkpoint_bytes as model_checkpoint_bytes,
)
from clustertwin.reliability.failures import FailureModel, JobFailureRates, job_failure_rates
from clustertwin.reliability.montecarlo import MonteCarloResult, simulate
from clustertwin.reliability.policy import Policy, RestartParams, Scenario, check_policy
from clustertwin.reliability.recovery import (
    PROFILES,
    RecoveryTimes,
    apply_style,
    check_recovery,
    recovery_times,
)
from clustertwin.reliability.sites import RateRange
from clustertwin.specs import ClusterSpec, ModelSpec
from clustertwin.units import BITS_PER_BYTE, GB, HOUR_S

DEFAULT_CHECKPOINT_BYTES_PER_GPU = 4.0 * GB
"""Checkpoint state per GPU when neither a model nor a size is given: the upper end of the 1 MB - 4 GB
per GPU that Llama 3 reports (arXiv 2407.21783, section 3.3.4)."""


@dataclass(frozen=True)
class ReliabilityResult:
    """Failure rates, checkpoint cost and interval, restart times, analytical and Monte Carlo outcomes."""

    gpus: int
    nodes: int
    cluster: str | None
    policy: Policy
    hot_spares: int
    async_checkpoint: bool
    rates: JobFailureRates
    checkpoint: CheckpointCost
    checkpoint_size_source: str
    interval_s: float
    interval_source: str
    young_interval_s: float
    daly_interval_s: float
    scenario: Scenario
    analytic: AnalyticResult
    monte_carlo: MonteCarloResult | None
    ideal_time_s: float | None = None
    horizon_s: float | None = None
    params: RestartParams = field(default_factory=RestartParams)
    recovery: RecoveryTimes | None = None
    """Detection, restart, load and save times of the recovery style (``params.recovery``)."""
    rate_range: RateRange | None = None
    """Site-factor distribution the rates were drawn from (None: the rates as given)."""
    analytic_range: tuple[AnalyticResult, AnalyticResult] | None = None
    """The analytical expectation at the site factor's 10th and 90th percentiles (with ``rate_range``)."""

    @property
    def stall_s(self) -> float:
        """Checkpoint stall that the intervals trade against (sync: snapshot + write; async: snapshot)."""
        c = self.checkpoint
        return c.async_blocking_s if self.async_checkpoint else c.sync_blocking_s

    @property
    def breakdown(self) -> dict[str, object]:
        restarts = {name: r for name, r, p in zip(self.scenario.cause_names, self.scenario.restart_s,
                                                   self.scenario.planned, strict=True) if not p}
        return {
            "failures": self.rates.breakdown,
            "checkpoint": self.checkpoint.breakdown,
            "interval": {"young_s": self.young_interval_s, "daly_s": self.daly_interval_s,
                         "used_s": self.interval_s, "source": self.interval_source, "stall_s": self.stall_s,
                         "mtbf_s": self.rates.mtbf_h * HOUR_S},
            "restart": {
                "formula": "R_c = restart_overhead + load + hang_detect[hang] + replace[needs node, none ready]",
                "restart_overhead_s": self.params.restart_overhead_s, "load_s": self.checkpoint.load_s,
                "hang_detect_s": self.params.hang_detect_s, "replace_s": self.params.replace_s,
                "repair_h": self.params.repair_h, "in_place_by_cause_s": restarts,
                "mean_s": self.analytic.mean_restart_s, "p_wait_for_node": self.analytic.p_wait_for_node,
            },
            "analytic": self.analytic.breakdown,
        }

    def to_dict(self) -> dict[str, object]:
        ideal = self.ideal_time_s
        return {
            "gpus": self.gpus, "nodes": self.nodes, "cluster": self.cluster, "policy": self.policy,
            "hot_spares": self.hot_spares, "async_checkpoint": self.async_checkpoint,
            "ideal_time_s": ideal, "horizon_s": self.horizon_s,
            "failures": {
                "mtbf_h": self.rates.mtbf_h, "unexpected_per_day": self.rates.unexpected_per_h * 24.0,
                "planned_per_day": self.rates.planned_per_h * 24.0,
                "by_class_per_day": {k: v * 24.0 for k, v in self.rates.by_class_per_h().items()},
                "by_cause_per_day": {k: v * 24.0 for k, v in self.rates.by_cause_per_h().items()},
            },
            "checkpoint": {**self.checkpoint.to_dict(), "size_source": self.checkpoint_size_source,
                           "stall_s": self.stall_s, "young_interval_s": self.young_interval_s,
                           "daly_interval_s": self.daly_interval_s, "interval_s": self.interval_s,
                           "interval_source": self.interval_source},
            "analytic": self.analytic.to_dict(),
            "monte_carlo": self.monte_carlo.summary() if self.monte_carlo is not None else None,
            "recovery": self.recovery.to_dict() if self.recovery is not None else None,
            "site_rates": self.rate_range.to_dict() if self.rate_range is not None else None,
            "analytic_range": ({"factor": "p10", **_range_keys(self.analytic_range[0])},
                               {"factor": "p90", **_range_keys(self.analytic_range[1])})
            if self.analytic_range is not None else None,
            "breakdown": self.breakdown,
        }


def _range_keys(a: AnalyticResult) -> dict[str, float]:
    return {"ettr": a.ettr, "unexpected_interruptions": a.unexpected_interruptions, "wall_s": a.wall_s}


def default_hot_spares(hardware_rate_per_s: float, repair_s: float, quantile: float) -> int:
    """Spares = ``quantile`` of the nodes in repair at once, ``Poisson(λ_hw × repair)`` (ByteRobust P99)."""
    from scipy.stats import poisson  # lazy: scipy.stats costs ~0.8 s at CLI start-up

    mean = hardware_rate_per_s * repair_s
    return int(poisson.ppf(quantile, mean)) if mean > 0 else 0


def estimate(
    cluster: ClusterSpec,
    gpus: int | None = None,
    *,
    model: ModelSpec | None = None,
    checkpoint_bytes: float | None = None,
    ideal_time_s: float | None = None,
    horizon_s: float | None = None,
    interval_s: float | None = None,
    step_time_s: float | None = None,
    async_checkpoint: bool = False,
    policy: str | None = None,
    hot_spares: int | None = None,
    failure_model: FailureModel | None = None,
    params: RestartParams | None = None,
    node_storage_gb_per_s: float | None = None,
    d2h_gb_per_s: float | None = None,
    recovery: str | None = None,
    rate_range: RateRange | None = None,
    trials: int = 1000,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> ReliabilityResult:
    """Reliability of a ``gpus``-GPU run on ``cluster``.

    Give either ``ideal_time_s`` (failure-free compute time: the result is a wall-time distribution) or
    ``horizon_s`` (a wall-clock window: interruptions and productive time in it). Checkpoint size: from
    ``checkpoint_bytes``, else ``model`` (14 B/param), else 4 GB per GPU. ``interval_s`` None picks
    Daly's optimum for the policy's stall (asynchronous: never shorter than one background write);
    with ``step_time_s`` the interval is rounded to whole steps. ``policy`` None means ``spares`` when
    ``hot_spares`` is given, else ``restart``; ``spares`` without a count sizes the pool at
    ``params.spares_quantile``. ``trials=0`` skips the Monte Carlo.

    ``recovery`` (else ``params.recovery``) picks the recovery style (:mod:`clustertwin.reliability.recovery`):
    its restart overhead replaces ``params.restart_overhead_s``; peer-memory styles checkpoint
    asynchronously to a peer's host memory over the node's fabric ports; ``warm_standby`` implies policy
    ``spares``. ``rate_range`` (:func:`clustertwin.reliability.sites.rate_range`) adds the analytical
    expectation at the site factor's p10 and p90 and makes the Monte Carlo draw a site factor per trial;
    the rates themselves come from ``failure_model`` (e.g. ``sites.fleet_model(...)``)."""
    params = params or RestartParams()
    style = check_recovery(recovery if recovery is not None else params.recovery)
    profile = PROFILES[style]
    params = replace(params, recovery=style, restart_overhead_s=profile.detect_s + profile.restart_s
                     if style != "requeue" else params.restart_overhead_s)
    if profile.checkpoint_to == "peer_memory":
        async_checkpoint = True
    if profile.spares and policy is None:
        policy = "spares"
    gpus = cluster.total_gpus if gpus is None else int(gpus)
    if gpus <= 0:
        raise SpecError(f"gpus must be > 0 (got {gpus})")
    if gpus > cluster.total_gpus:
        raise SpecError(f"the job needs {gpus:,} GPUs but cluster '{cluster.name or cluster.id}' has "
                        f"{cluster.total_gpus:,}; pass a larger cluster (e.g. llama3-16k-h100-roce)")
    if (ideal_time_s is None) == (horizon_s is None):
        raise SpecError("give exactly one of a failure-free run time (days or tokens) or a wall-clock window")
    if policy is None:
        policy = "spares" if hot_spares else "restart"
    pol = check_policy(policy)
    if hot_spares is not None and hot_spares < 0:
        raise SpecError(f"hot spares must be >= 0 (got {hot_spares})")
    if hot_spares and pol != "spares":
        raise SpecError(f"hot spares need policy 'spares' (got policy '{pol}')")
    if trials < 0:
        raise SpecError(f"trials must be >= 0 (got {trials})")

    node = cluster.node
    nodes = math.ceil(gpus / node.gpus)
    rates = job_failure_rates(gpus, node.gpus, node.nics.count, failure_model)

    if checkpoint_bytes is not None:
        if not (math.isfinite(checkpoint_bytes) and checkpoint_bytes > 0):
            raise SpecError(f"checkpoint bytes must be a finite number > 0 (got {checkpoint_bytes!r})")
        size, size_src = float(checkpoint_bytes), "given"
    elif model is not None:
        size, size_src = model_checkpoint_bytes(model), f"model {model.id or model.name or 'inline'} x 14 B/param"
    else:
        size, size_src = gpus * DEFAULT_CHECKPOINT_BYTES_PER_GPU, "default 4 GB per GPU"
    ck = cluster_checkpoint_cost(cluster, gpus, size, node_storage_gb_per_s, d2h_gb_per_s)
    fabric_gb_per_s = node.nics.count * node.nics.gbit_per_s / BITS_PER_BYTE if node.nics.count else 0.0
    if profile.checkpoint_to == "peer_memory" and not fabric_gb_per_s > 0:
        raise SpecError(f"recovery style '{style}' copies checkpoints to a peer over the fabric, but the node "
                        "has no fabric NIC")
    rec = recovery_times(style, ck, fabric_gb_per_s or 1.0)
    rec = replace(rec, restart_s=params.restart_overhead_s - rec.detect_s,
                  replace_s=0.0 if profile.spares else params.replace_s)
    ck = apply_style(style, ck, fabric_gb_per_s or 1.0)
    if async_checkpoint and ck.host_bytes_per_node > node.memory_gb * GB:
        raise SpecError(f"asynchronous checkpoint needs {ck.host_bytes_per_node / GB:,.0f} GB of host memory "
                        f"per node for the snapshot; the node has {node.memory_gb:,.0f} GB")

    mtbf_s = rates.mtbf_h * HOUR_S
    stall = ck.async_blocking_s if async_checkpoint else ck.sync_blocking_s
    young = young_interval_s(stall, mtbf_s)
    daly = daly_interval_s(stall, mtbf_s)
    if interval_s is None:
        tau = max(daly, ck.write_s) if async_checkpoint else daly
        tau_src = "daly" + (" (>= one background write)" if async_checkpoint and ck.write_s > daly else "")
    else:
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise SpecError(f"checkpoint interval must be a finite number > 0 s (got {interval_s!r})")
        tau, tau_src = float(interval_s), "given"
    if step_time_s is not None:
        if not (step_time_s > 0 and math.isfinite(step_time_s)):
            raise SpecError(f"step time must be a finite number > 0 s (got {step_time_s!r})")
        if math.isfinite(tau):
            tau = max(1, round(tau / step_time_s)) * step_time_s
            tau_src += " (whole steps)"

    repair_s = params.repair_s
    hw_rate_s = sum(r for c, r in zip(rates.causes, rates.rate_per_h, strict=True) if c.replaces_node) / HOUR_S
    if pol == "spares":
        k = hot_spares if hot_spares is not None else default_hot_spares(hw_rate_s, repair_s,
                                                                          params.spares_quantile)
    else:
        k = 0
    restart = tuple(params.restart_overhead_s + ck.load_s + (params.hang_detect_s if c.hang else 0.0)
                    for c in rates.causes)
    scn = Scenario(
        gpus=gpus, work_s=ideal_time_s, horizon_s=horizon_s,
        cause_names=tuple(c.name for c in rates.causes),
        rate_per_s=tuple(r / HOUR_S for r in rates.rate_per_h),
        replaces_node=tuple(c.replaces_node for c in rates.causes),
        planned=tuple(c.planned for c in rates.causes),
        restart_s=restart, replace_s=params.replace_s, policy=pol, hot_spares=k, repair_s=repair_s,
        elastic_unit_fraction=1.0 / nodes, elastic_min_fraction=params.elastic_min_fraction,
        interval_s=tau, snapshot_s=ck.snapshot_s, write_s=ck.write_s, async_checkpoint=async_checkpoint,
        rate_log_sd=rate_range.draw_sd if rate_range is not None else 0.0,
    )
    ana = analytic(scn)
    ana_range = None
    if rate_range is not None:
        ana_range = tuple(analytic(replace(scn, rate_per_s=tuple(r * f / rate_range.p50 for r in scn.rate_per_s)))
                          for f in (rate_range.p10, rate_range.p90))
    mc = simulate(scn, trials=trials, seed=seed, progress=progress) if trials else None
    return ReliabilityResult(
        gpus=gpus, nodes=nodes, cluster=cluster.id or cluster.name, policy=pol, hot_spares=k,
        async_checkpoint=async_checkpoint, rates=rates, checkpoint=ck, checkpoint_size_source=size_src,
        interval_s=tau, interval_source=tau_src, young_interval_s=young, daly_interval_s=daly,
        scenario=scn, analytic=ana, monte_carlo=mc, ideal_time_s=ideal_time_s, horizon_s=horizon_s,
        params=params, recovery=rec, rate_range=rate_range, analytic_range=ana_range,  # type: ignore[arg-type]
    )


def with_failures(gpus: int, ideal_time_s: float, checkpoint_bytes: float, cluster: ClusterSpec,
                  **kw: object) -> ReliabilityResult:
    """Time-to-train with failures for the training layer: a run of ``ideal_time_s`` failure-free
    seconds on ``gpus`` GPUs with a ``checkpoint_bytes`` checkpoint. Keyword arguments as
    :func:`estimate` (``step_time_s``, ``policy``, ``async_checkpoint``, ``trials`` ...); the expected
    wall time is ``result.analytic.wall_s`` and its spread ``result.monte_carlo.summary()["wall_s"]``."""
    return estimate(cluster, gpus, checkpoint_bytes=checkpoint_bytes, ideal_time_s=ideal_time_s,
                    **kw)  # type: ignore[arg-type]
