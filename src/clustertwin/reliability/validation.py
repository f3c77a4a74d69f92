"""``clustertwin validate`` kind ``reliability``: failures, recovery and checkpoints of a job over a window.

Case fields: ``gpus`` (or ``nodes``), ``days`` (or ``hours``); optional ``cluster`` or ``node`` (preset
id or inline spec; default: the reference cluster's node and storage, with as many nodes as the job
needs; a cluster smaller than the job is extended, storage bandwidth growing with its nodes),
``site`` (a measured site of :mod:`clustertwin.reliability.sites`: its factor is the central value; without
it, the median of the node's GPU generation), ``model`` (checkpoint size), ``checkpoint_gb``, ``rates``
(per unit-hour overrides by cause or component class, see :meth:`FailureModel.with_rates`), ``policy``,
``hot_spares``, ``async_checkpoint``, ``checkpoint_interval_min``, ``recovery`` (requeue | in_memory |
warm_standby). Case-level keys ``calibration`` (true: the case defines a site factor or the rates, so its
error is 0 by construction) and ``confidence`` (high | medium) describe the case. Other keys are listed under
``ignored_keys``, not used.

Predicted keys (expected values over the window): ``interruptions``, ``unexpected_interruptions``,
``planned_interruptions``, ``hardware_interruptions`` (every class but software and planned),
``gpu_failures`` (GPU and GPU memory), ``network_interruptions`` (NIC, switch/cable, leaf switch),
``nic_link_failures`` (per-port NIC and cable causes), ``node_failures_per_day`` (causes that take a node
out), ``failures_per_1000_node_days``, ``mttf_hours`` (mean time between unexpected interruptions),
``mttr_hours`` (mean time from an interruption to computing again), ``ettr`` (analytical expectation),
``checkpoint_save_s`` (the stall of one checkpoint), ``lost_work_per_failure_hours`` (mean computed work
lost per unexpected interruption, ``1/λ − P/(e^{λP} − 1) + lag`` for a period ``P = τ + stall``), plus
``range`` (10th and 90th percentile over the generation's sites of every rate-proportional key and of
``ettr``), ``in_range`` (each measured key inside its range) and ``by_cause``.
"""

from __future__ import annotations

import math
from typing import Any

from clustertwin import specs
from clustertwin.errors import SpecError
from clustertwin.reliability.model import estimate
from clustertwin.reliability.sites import GPU_CLASSES, HARDWARE_CLASSES, fleet_model, rate_range
from clustertwin.units import DAY_S, GB, HOUR_S, MINUTE_S

DEFAULT_CLUSTER = "ref-1k-h100"
#: keys of a case that are about the case, not the job
_CASE_KEYS = frozenset({"id", "kind", "source", "measured", "notes", "calibration", "confidence"})
_JOB_KEYS = frozenset({"gpus", "nodes", "days", "hours", "cluster", "node", "model", "checkpoint_gb", "rates",
                       "policy", "hot_spares", "async_checkpoint", "checkpoint_interval_min", "site", "recovery"})
#: spellings accepted for per-component rate overrides (per unit-hour)
_RATE_KEYS = ("rates", "failure_rates", "rates_per_device_hour")
#: predicted keys proportional to the site factor (their range scales with it); MTTF scales inversely
_RATE_PROPORTIONAL = ("interruptions", "unexpected_interruptions", "hardware_interruptions", "gpu_failures",
                      "network_interruptions", "nic_link_failures", "node_failures_per_day",
                      "failures_per_1000_node_days")


def _cluster_for(case: dict[str, Any], gpus: int | None) -> tuple[specs.ClusterSpec, int]:
    if "cluster" in case:
        cluster = specs.load(specs.ClusterSpec, case["cluster"], kind="cluster")
    else:
        base = specs.load(specs.ClusterSpec, DEFAULT_CLUSTER, kind="cluster")
        if "node" in case:
            node = specs.load(specs.NodeSpec, case["node"], kind="node")
            base = base.model_copy(update={"node": node, "gpus": None})
        cluster = base
    gpn = cluster.node.gpus
    if gpus is None:
        if "nodes" not in case:
            raise SpecError("a reliability case needs 'gpus' or 'nodes'", path=("gpus",))
        gpus = int(case["nodes"]) * gpn
    if gpus <= 0:
        raise SpecError(f"gpus must be > 0 (got {gpus})", path=("gpus",))
    nodes = math.ceil(gpus / gpn)
    if nodes > cluster.nodes:
        # the measured job ran on this many nodes of this type; storage grows with the cluster, keeping
        # the design's bandwidth per node
        scale = nodes / cluster.nodes
        st = cluster.storage
        storage = st.model_copy(update={"read_gb_per_s": st.read_gb_per_s * scale,
                                        "write_gb_per_s": st.write_gb_per_s * scale})
        cluster = cluster.model_copy(update={"nodes": nodes, "gpus": None, "storage": storage})
    return cluster, gpus


def lost_work_per_failure_s(lam_per_s: float, period_s: float, lag_s: float) -> float:
    """Mean work lost at an exponential interruption with checkpoints every ``period_s``:
    ``1/λ − P/(e^{λP} − 1)`` (the age of the last checkpoint at the failure, ``≈ P/2`` for ``λP ≪ 1``) plus
    the durability lag of an asynchronous save."""
    if not math.isfinite(period_s):
        return math.inf
    if lam_per_s <= 0:
        return period_s / 2.0 + lag_s
    return 1.0 / lam_per_s - period_s / math.expm1(lam_per_s * period_s) + lag_s


def evaluate(case: dict[str, Any]) -> dict[str, Any]:
    """Predict the keys of the module docstring for one case."""
    ignored = sorted(set(case) - _CASE_KEYS - _JOB_KEYS - set(_RATE_KEYS))
    gpus = int(case["gpus"]) if "gpus" in case else None
    cluster, gpus = _cluster_for(case, gpus)
    if "days" in case:
        horizon_s = float(case["days"]) * DAY_S
    elif "hours" in case:
        horizon_s = float(case["hours"]) * HOUR_S
    else:
        raise SpecError("a reliability case needs 'days' or 'hours'", path=("days",))
    model = specs.load(specs.ModelSpec, case["model"], kind="model") if "model" in case else None
    rates = next((case[k] for k in _RATE_KEYS if k in case), None) or {}
    if not isinstance(rates, dict):
        raise SpecError("expected a mapping of cause or component class to rate per unit-hour", path=("rates",))
    site_id = case.get("site")
    if site_id is not None and not isinstance(site_id, str):
        raise SpecError("expected a site id (text)", path=("site",))
    try:
        fm, central = fleet_model(cluster.node.gpu.arch, site_id)
    except SpecError as e:
        raise e.with_context(prefix=("site",)) from None
    spread = rate_range(central.generation if site_id is not None else cluster.node.gpu.arch)
    if rates:
        fm = fm.with_rates(rates)
    interval = case.get("checkpoint_interval_min")
    recovery = case.get("recovery")
    res = estimate(
        cluster, gpus, model=model,
        checkpoint_bytes=float(case["checkpoint_gb"]) * GB if "checkpoint_gb" in case else None,
        horizon_s=horizon_s, interval_s=float(interval) * MINUTE_S if interval is not None else None,
        async_checkpoint=bool(case.get("async_checkpoint", False)), policy=case.get("policy"),
        hot_spares=case.get("hot_spares"), failure_model=fm, recovery=recovery, trials=0,
    )
    a, r = res.analytic, res.rates
    hours = horizon_s / HOUR_S
    by_class = r.by_class_per_h()
    node_hw_per_h = sum(x for c, x in zip(r.causes, r.rate_per_h, strict=True) if c.replaces_node)
    nic_link_per_h = sum(x for c, x in zip(r.causes, r.rate_per_h, strict=True) if c.unit == "nic_port")
    lam_s = r.unexpected_per_h / HOUR_S
    sc = res.scenario
    pred: dict[str, Any] = {
        "interruptions": a.unexpected_interruptions + a.planned_interruptions,
        "unexpected_interruptions": a.unexpected_interruptions,
        "planned_interruptions": a.planned_interruptions,
        "hardware_interruptions": sum(by_class[c] for c in HARDWARE_CLASSES) * hours,
        "gpu_failures": sum(by_class[c] for c in GPU_CLASSES) * hours,
        "network_interruptions": (by_class["nic"] + by_class["network"]) * hours,
        "nic_link_failures": nic_link_per_h * hours,
        "node_failures_per_day": node_hw_per_h * 24.0,
        "failures_per_1000_node_days": r.unexpected_per_h * 24.0 * 1000.0 / res.nodes,
        "mttf_hours": r.mtbf_h,
        "mttr_hours": a.mean_restart_s / HOUR_S,
        "ettr": a.ettr,
        "checkpoint_save_s": res.stall_s,
        "lost_work_per_failure_hours": lost_work_per_failure_s(lam_s, sc.interval_s + sc.blocking_s,
                                                               sc.lag_s) / HOUR_S,
    }
    f_lo, f_hi = spread.p10 / central.p50, spread.p90 / central.p50
    rng: dict[str, dict[str, float]] = {k: {"p10": pred[k] * f_lo, "p90": pred[k] * f_hi} for k in _RATE_PROPORTIONAL}
    rng["mttf_hours"] = {"p10": pred["mttf_hours"] / f_hi, "p90": pred["mttf_hours"] / f_lo}
    ettr_at = [estimate(cluster, gpus, model=model, horizon_s=horizon_s, failure_model=fm.with_scale(f),
                        checkpoint_bytes=float(case["checkpoint_gb"]) * GB if "checkpoint_gb" in case else None,
                        interval_s=float(interval) * MINUTE_S if interval is not None else None,
                        async_checkpoint=bool(case.get("async_checkpoint", False)), policy=case.get("policy"),
                        hot_spares=case.get("hot_spares"), recovery=recovery, trials=0).analytic.ettr
               for f in (fm.rate_scale * f_hi, fm.rate_scale * f_lo)]
    rng["ettr"] = {"p10": ettr_at[0], "p90": ettr_at[1]}
    measured = case.get("measured") if isinstance(case.get("measured"), dict) else {}
    in_range = {k: bool(rng[k]["p10"] <= float(v) <= rng[k]["p90"]) for k, v in measured.items()
                if k in rng and isinstance(v, int | float)}
    pred.update({
        "range": rng, "in_range": in_range, "site": site_id, "generation": spread.generation,
        "site_factor": fm.rate_scale, "calibration": bool(case.get("calibration", False)),
        "recovery": res.params.recovery, "policy": res.policy,
        "checkpoint_interval_min": res.interval_s / MINUTE_S,
        "by_cause": {name: x * hours for name, x in r.by_cause_per_h().items()},
        "ignored_keys": ignored,
    })
    return pred

