"""``clustertwin validate`` kind ``reliability``: interruptions of a job over a wall-clock window.

Case fields: ``gpus`` (or ``nodes``), ``days`` (or ``hours``); optional ``cluster`` or ``node`` (preset
id or inline spec; default: the reference cluster's node and storage, with as many nodes as the job
needs; a cluster smaller than the job is extended, storage bandwidth growing with its nodes),
``model`` (checkpoint size), ``checkpoint_gb``, ``rates`` (per unit-hour overrides by cause or
component class, see :meth:`FailureModel.with_rates`), ``policy``, ``hot_spares``, ``async_checkpoint``,
``checkpoint_interval_min``. Other keys (a case may carry ``parallelism`` or notes-like fields) are
listed under ``ignored_keys``, not used. Predicted keys: ``interruptions`` and ``unexpected_interruptions``
(expected counts over the window), ``mttf_hours`` (mean time between unexpected interruptions of the
job), ``ettr`` (analytical expectation), plus the expected count of every cause.
"""

from __future__ import annotations

import math
from typing import Any

from clustertwin import specs
from clustertwin.errors import SpecError
from clustertwin.reliability.failures import FailureModel
from clustertwin.reliability.model import estimate
from clustertwin.units import DAY_S, GB, HOUR_S, MINUTE_S

DEFAULT_CLUSTER = "ref-1k-h100"
#: keys of a case that are about the case, not the job
_CASE_KEYS = frozenset({"id", "kind", "source", "measured", "notes"})
_JOB_KEYS = frozenset({"gpus", "nodes", "days", "hours", "cluster", "node", "model", "checkpoint_gb", "rates",
                       "policy", "hot_spares", "async_checkpoint", "checkpoint_interval_min"})
#: spellings accepted for per-component rate overrides (per unit-hour)
_RATE_KEYS = ("rates", "failure_rates", "rates_per_device_hour")


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


def evaluate(case: dict[str, Any]) -> dict[str, Any]:
    """Predict ``interruptions``, ``unexpected_interruptions``, ``mttf_hours`` and ``ettr`` of a case."""
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
    fm = FailureModel.default().with_rates(rates) if rates else None
    interval = case.get("checkpoint_interval_min")
    res = estimate(
        cluster, gpus, model=model,
        checkpoint_bytes=float(case["checkpoint_gb"]) * GB if "checkpoint_gb" in case else None,
        horizon_s=horizon_s, interval_s=float(interval) * MINUTE_S if interval is not None else None,
        async_checkpoint=bool(case.get("async_checkpoint", False)), policy=case.get("policy"),
        hot_spares=case.get("hot_spares"), failure_model=fm, trials=0,
    )
    a = res.analytic
    by_cause = {name: r * horizon_s / HOUR_S for name, r in res.rates.by_cause_per_h().items()}
    return {
        "interruptions": a.unexpected_interruptions + a.planned_interruptions,
        "unexpected_interruptions": a.unexpected_interruptions,
        "planned_interruptions": a.planned_interruptions,
        "mttf_hours": res.rates.mtbf_h,
        "ettr": a.ettr,
        "policy": res.policy,
        "checkpoint_interval_min": res.interval_s / MINUTE_S,
        "by_cause": by_cause,
        "ignored_keys": ignored,
    }
