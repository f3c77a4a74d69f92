"""``clustertwin validate`` kind ``reliability``: failures, recovery and checkpoints of a job over a window.

Case fields: ``gpus`` (or ``nodes``), ``days`` (or ``hours``); optional ``cluster`` or ``node`` (preset
id or inline spec; default: the reference cluster's node and storage, with as many nodes as the job
needs; a cluster smaller than the job is extended, storage bandwidth growing with its nodes),
``site`` (a measured site of :mod:`clustertwin.reliability.sites`: its factor is the central value; without
it, the median of the node's GPU generation), ``generation`` (the accelerator generation whose site median
to use when it is not the node's GPU architecture, e.g. ``tpu-v4`` on a stand-in node: a generation without
measured sites takes all sites), ``model`` (checkpoint size), ``checkpoint_gb``, ``rates``
(per unit-hour overrides by cause or component class, see :meth:`FailureModel.with_rates`), ``policy``,
``hot_spares``, ``async_checkpoint``, ``checkpoint_interval_min``, ``recovery`` (requeue | in_memory |
warm_standby). Case-level keys ``calibration`` (true: the case defines a site factor or the rates, so its
error is 0 by construction) and ``confidence`` (high | medium | low: a low row is shown, never fitted on and
left out of the shipped median) describe the case; ``bounds`` (``{key: {min: x, max: y}}``, either side
optional) states a published bound (">100 restarts", "over 90 %") on any predicted key: the prediction
carries ``bounds`` with each bound, the predicted value and ``met``. Other keys are listed under
``ignored_keys``, not used.

Predicted keys (expected values over the window): ``interruptions``, ``unexpected_interruptions``,
``planned_interruptions``, ``hardware_interruptions`` (every class but software and planned),
``gpu_failures`` (GPU and GPU memory), ``network_interruptions`` (NIC, switch/cable, leaf switch),
``nic_link_failures`` (per-port NIC and cable causes), ``node_failures_per_day`` (causes that take a node
out), ``failures_per_1000_node_days``, ``mttf_hours`` (mean time between unexpected interruptions),
``mttr_hours`` (mean time from an interruption to computing again), ``ettr`` (analytical expectation),
``checkpoint_save_s`` (the stall of one checkpoint), ``checkpoint_size_gb`` and ``checkpoint_gb_per_gpu``
(the checkpoint the case implies: ``checkpoint_gb``, else ``model`` × 14 B/param, else 4 GB per GPU),
``lost_work_per_failure_hours`` (mean computed work lost per unexpected interruption,
``1/λ − P/(e^{λP} − 1) + lag`` for a period ``P = τ + stall``), ``catch_up_minutes`` (mean restart plus lost
work: from a crash back to the pre-crash progress), ``silent_data_corruptions``, ``host_failures`` (host class:
CPU, memory, board, power, host maintenance) and ``node_failures`` (causes that take a node out, over the
window), plus
``range`` (10th and 90th percentile over the generation's sites of every rate-proportional key and of
``ettr``), ``in_range`` (each measured key inside its range) and ``by_cause``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from clustertwin import specs
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.reliability.failures import FailureModel
from clustertwin.reliability.model import ReliabilityResult, estimate
from clustertwin.reliability.sites import (
    GPU_CLASSES,
    HARDWARE_CLASSES,
    RateRange,
    fleet_model,
    rate_range,
    site,
)
from clustertwin.units import DAY_S, GB, HOUR_S, MINUTE_S

DEFAULT_CLUSTER = "ref-1k-h100"
#: keys of a case that are about the case, not the job
_CASE_KEYS = frozenset({"id", "kind", "source", "measured", "notes", "calibration", "confidence", "bounds"})
_JOB_KEYS = frozenset({"gpus", "nodes", "days", "hours", "cluster", "node", "model", "checkpoint_gb", "rates",
                       "policy", "hot_spares", "async_checkpoint", "checkpoint_interval_min", "site", "recovery",
                       "generation"})
CONFIDENCE_LEVELS = ("high", "medium", "low")
"""Grades a case may carry; ``low`` rows are checks only (never fitted on, not in the shipped median)."""
#: spellings accepted for per-component rate overrides (per unit-hour)
_RATE_KEYS = ("rates", "failure_rates", "rates_per_device_hour")
#: predicted keys proportional to the site factor (their range scales with it); MTTF scales inversely
_RATE_PROPORTIONAL = ("interruptions", "unexpected_interruptions", "hardware_interruptions", "gpu_failures",
                      "network_interruptions", "nic_link_failures", "node_failures_per_day",
                      "failures_per_1000_node_days", "silent_data_corruptions", "host_failures", "node_failures")


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


def _rates_of(case: dict[str, Any], arch: str,
              exclude: str | None) -> tuple[FailureModel, RateRange, RateRange]:
    """(failure model, central range, spread) for a case: its site's factor, else the median of its
    generation (``generation`` key, else the node's GPU architecture); ``exclude`` leaves one site out."""
    rates = next((case[k] for k in _RATE_KEYS if k in case), None) or {}
    if not isinstance(rates, dict):
        raise SpecError("expected a mapping of cause or component class to rate per unit-hour", path=("rates",))
    site_id, gen = case.get("site"), case.get("generation", arch)
    if site_id is not None and not isinstance(site_id, str):
        raise SpecError("expected a site id (text)", path=("site",))
    if not isinstance(gen, str) or not gen.strip():
        raise SpecError("expected an accelerator generation name (text)", path=("generation",))
    if site_id is not None and site_id == exclude:
        site_id, gen = None, site(site_id).generation or ""
    try:
        fm, central = fleet_model(gen or None, site_id, exclude)
    except SpecError as e:
        raise e.with_context(prefix=("site",)) from None
    spread = rate_range(central.generation if site_id is not None else (gen or None), exclude=exclude)
    return (fm.with_rates(rates) if rates else fm), central, spread


def _bound_value(b: dict[str, Any], side: str, key: str) -> float | None:
    if b.get(side) is None:
        return None
    v = b[side]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SpecError(f"expected a finite number (got {str(v)[:40]!r})", path=("bounds", key, side))
    return float(v)


def _bounds(case: dict[str, Any], pred: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each published bound of the case with the predicted value and whether it is met."""
    raw = case.get("bounds") or {}
    if not isinstance(raw, dict):
        raise SpecError("expected a mapping of predicted key to {min, max}", path=("bounds",))
    out: dict[str, dict[str, Any]] = {}
    for key, b in raw.items():
        if key not in pred or not isinstance(pred[key], int | float):
            raise SpecError(f"no prediction for bound key '{key}'{did_you_mean(str(key), BOUND_KEYS)}",
                            path=("bounds", str(key)))
        if not isinstance(b, dict) or not b or set(b) - {"min", "max"}:
            raise SpecError("expected {min: x} and/or {max: y}", path=("bounds", str(key)))
        lo, hi, v = (_bound_value(b, "min", key), _bound_value(b, "max", key), float(pred[key]))
        met = (lo is None or v >= lo) and (hi is None or v <= hi)
        out[str(key)] = {"min": lo, "max": hi, "predicted": v, "met": bool(met)}
    return out


def evaluate(case: dict[str, Any], *, leave_out_site: bool = False) -> dict[str, Any]:
    """Predict the keys of the module docstring for one case. ``leave_out_site``: predict a case of a
    measured site as if that site had never been measured (its factor removed from the medians and the
    spread; :func:`leave_one_site_out`)."""
    ignored = sorted(set(case) - _CASE_KEYS - _JOB_KEYS - set(_RATE_KEYS))
    conf = case.get("confidence")
    if conf is not None and conf not in CONFIDENCE_LEVELS:
        raise SpecError(f"confidence must be one of {', '.join(CONFIDENCE_LEVELS)} (got {str(conf)[:40]!r})"
                        f"{did_you_mean(str(conf), CONFIDENCE_LEVELS)}", path=("confidence",))
    gpus = int(case["gpus"]) if "gpus" in case else None
    cluster, gpus = _cluster_for(case, gpus)
    if "days" in case:
        horizon_s = float(case["days"]) * DAY_S
    elif "hours" in case:
        horizon_s = float(case["hours"]) * HOUR_S
    else:
        raise SpecError("a reliability case needs 'days' or 'hours'", path=("days",))
    model = specs.load(specs.ModelSpec, case["model"], kind="model") if "model" in case else None
    site_id = case.get("site")
    exclude = site_id if leave_out_site and isinstance(site_id, str) else None
    fm, central, spread = _rates_of(case, cluster.node.gpu.arch, exclude)
    interval = case.get("checkpoint_interval_min")
    kw: dict[str, Any] = dict(
        model=model, checkpoint_bytes=float(case["checkpoint_gb"]) * GB if "checkpoint_gb" in case else None,
        horizon_s=horizon_s, interval_s=float(interval) * MINUTE_S if interval is not None else None,
        async_checkpoint=bool(case.get("async_checkpoint", False)), policy=case.get("policy"),
        hot_spares=case.get("hot_spares"), recovery=case.get("recovery"), trials=0)
    res = estimate(cluster, gpus, failure_model=fm, **kw)
    pred = _keys(res, horizon_s)
    f_lo, f_hi = spread.p10 / central.p50, spread.p90 / central.p50
    rng: dict[str, dict[str, float]] = {k: {"p10": pred[k] * f_lo, "p90": pred[k] * f_hi} for k in _RATE_PROPORTIONAL}
    rng["mttf_hours"] = {"p10": pred["mttf_hours"] / f_hi, "p90": pred["mttf_hours"] / f_lo}
    ettr_at = [estimate(cluster, gpus, failure_model=fm.with_scale(f), **kw).analytic.ettr
               for f in (fm.rate_scale * f_hi, fm.rate_scale * f_lo)]
    rng["ettr"] = {"p10": ettr_at[0], "p90": ettr_at[1]}
    measured = case.get("measured") if isinstance(case.get("measured"), dict) else {}
    in_range = {k: bool(rng[k]["p10"] <= float(v) <= rng[k]["p90"]) for k, v in measured.items()
                if k in rng and isinstance(v, int | float)}
    pred["bounds"] = _bounds(case, pred)
    pred.update({
        "range": rng, "in_range": in_range, "site": None if exclude else site_id, "left_out_site": exclude,
        "generation": spread.generation, "site_factor": fm.rate_scale,
        "calibration": bool(case.get("calibration", False)), "confidence": conf,
        "recovery": res.params.recovery, "policy": res.policy,
        "checkpoint_interval_min": res.interval_s / MINUTE_S,
        "by_cause": {name: x * horizon_s / HOUR_S for name, x in res.rates.by_cause_per_h().items()},
        "ignored_keys": ignored,
    })
    return pred


def _keys(res: ReliabilityResult, horizon_s: float) -> dict[str, Any]:
    """The predicted keys (module docstring) of one estimate over a window of ``horizon_s``."""
    a, r = res.analytic, res.rates
    hours = horizon_s / HOUR_S
    by_class, by_cause = r.by_class_per_h(), r.by_cause_per_h()
    node_hw_per_h = sum(x for c, x in zip(r.causes, r.rate_per_h, strict=True) if c.replaces_node)
    nic_link_per_h = sum(x for c, x in zip(r.causes, r.rate_per_h, strict=True) if c.unit == "nic_port")
    sc = res.scenario
    lost_s = lost_work_per_failure_s(r.unexpected_per_h / HOUR_S, sc.interval_s + sc.blocking_s, sc.lag_s)
    return {
        "interruptions": a.unexpected_interruptions + a.planned_interruptions,
        "unexpected_interruptions": a.unexpected_interruptions,
        "planned_interruptions": a.planned_interruptions,
        "hardware_interruptions": sum(by_class[c] for c in HARDWARE_CLASSES) * hours,
        "gpu_failures": sum(by_class[c] for c in GPU_CLASSES) * hours,
        "network_interruptions": (by_class["nic"] + by_class["network"]) * hours,
        "nic_link_failures": nic_link_per_h * hours,
        "host_failures": by_class["host"] * hours,
        "silent_data_corruptions": by_cause.get("silent_data_corruption", 0.0) * hours,
        "node_failures": node_hw_per_h * hours,
        "node_failures_per_day": node_hw_per_h * 24.0,
        "failures_per_1000_node_days": r.unexpected_per_h * 24.0 * 1000.0 / res.nodes,
        "mttf_hours": r.mtbf_h,
        "mttr_hours": a.mean_restart_s / HOUR_S,
        "ettr": a.ettr,
        "checkpoint_save_s": res.stall_s,
        "checkpoint_size_gb": res.checkpoint.bytes / GB,
        "checkpoint_gb_per_gpu": res.checkpoint.bytes / GB / res.gpus,
        "lost_work_per_failure_hours": lost_s / HOUR_S,
        "catch_up_minutes": (a.mean_restart_s + lost_s) / MINUTE_S,
    }


BOUND_KEYS: tuple[str, ...] = (
    "interruptions", "unexpected_interruptions", "planned_interruptions", "hardware_interruptions",
    "gpu_failures", "network_interruptions", "nic_link_failures", "host_failures", "silent_data_corruptions",
    "node_failures", "node_failures_per_day", "failures_per_1000_node_days", "mttf_hours", "mttr_hours", "ettr",
    "checkpoint_save_s", "checkpoint_size_gb", "checkpoint_gb_per_gpu", "lost_work_per_failure_hours",
    "catch_up_minutes")
"""Predicted keys a case may measure or bound."""


def leave_one_site_out(cases: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every measured key of every case of a measured site (confidence high or medium), predicted as if the
    site had never been measured: its factor removed from the generation medians and the pooled spread
    (:func:`evaluate` with ``leave_out_site``). The proxy for failure statistics of a cluster one does not
    have. Rows: ``id``, ``site``, ``key``, ``measured``, ``predicted``, ``rel_error``, ``in_range`` (inside the
    leave-out p10-p90 range; None for keys without a range)."""
    rows: list[dict[str, Any]] = []
    for case in cases:
        measured = case.get("measured")
        if (case.get("kind") != "reliability" or not isinstance(case.get("site"), str)
                or case.get("confidence") == "low" or not isinstance(measured, dict)):
            continue
        pred = evaluate(case, leave_out_site=True)
        for key, value in measured.items():
            m = float(value)
            rows.append({"id": case.get("id"), "site": case["site"], "key": key, "measured": m,
                         "predicted": pred[key], "rel_error": (pred[key] - m) / m,
                         "in_range": pred["in_range"].get(key)})
    return rows
