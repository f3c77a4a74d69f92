"""Sizing for a request trace (``clustertwin infer size --trace``): the cheapest fixed fleet and the
cheapest autoscaled policy whose simulated SLO attainment reaches a target (e.g. 99% of requests
within the TTFT and TPOT SLOs), and the headroom they imply.

1. For every candidate (node type × TP × weight precision) the analytic per-replica capacity ``c``
   at the SLOs (:func:`clustertwin.infer.sizing.replica_capacity`, at the trace's mean lengths) gives
   the **fleet sized for the mean**, ``N_mean = ⌈mean rate / c⌉``, and a first guess for the peak,
   ``⌈peak window rate / c⌉``.
2. Candidates are tried in order of their lower-bound cost ``N_mean × GPUs × price``; for each, the
   smallest fixed ``N`` meeting the attainment in the fleet simulator (:mod:`clustertwin.infer.fleet`)
   is found by bisection (runs that can no longer reach the target stop early). Candidates are tried
   cheapest peak-window guess first; one is skipped when its mean-sized fleet (a lower bound) or
   ``PEAK_GUESS_PRUNE`` × its peak-window fleet costs at least the best fleet found.
3. For the winner, autoscaled policies (concurrency target = {0.5, 1} × the analytic operating
   batch, the smallest warm ``min_replicas`` that meets the attainment, cold starts from the model size
   and the weights path) are simulated; the cheapest by simulated cost is reported.

Headroom factor = provisioned serving capacity / mean demand = ``N × c / mean rate`` (fixed) or
``mean replicas × c / mean rate`` (autoscaled): 1 would be a fleet exactly as large as the mean load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.infer import inputs
from clustertwin.infer.fleet import FleetPolicy, simulate_fleet
from clustertwin.infer.params import InferParams
from clustertwin.infer.roofline import Deployment
from clustertwin.infer.sizing import checked_candidates, replica_capacity, usd_per_gpu_hour
from clustertwin.infer.traces import RequestTrace
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.node import NodeSpec

AUTOSCALE_TARGETS = (0.5, 1.0)
"""Concurrency targets tried, as fractions of the analytic operating batch of one replica."""
MAX_FLEET = 512
PEAK_GUESS_PRUNE = 0.75
"""A candidate is not simulated when this fraction of its peak-window fleet (⌈peak window rate / c⌉
replicas) already costs at least the best fleet found: simulated fleets came within ±25% of that
guess on bursty traces (a heuristic bound, reported as the candidate's reason)."""


@dataclass
class FleetChoice:
    """One sized fleet: deployment, replicas (or autoscaling policy) and its simulated figures."""

    node: str
    tp: int
    precision: str
    replicas: int
    gpus: int
    replica_qps: float
    usd_per_hour: float
    slo_attainment: float
    headroom: float
    policy: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TraceSizing:
    """Result of :func:`size_for_trace`."""

    trace: dict[str, Any]
    slo_ttft_ms: float
    slo_tpot_ms: float | None
    attainment: float
    fixed: FleetChoice | None
    mean_sized: FleetChoice | None
    autoscaled: FleetChoice | None
    candidates: list[dict[str, Any]]
    simulations: int

    def to_dict(self) -> dict[str, Any]:
        return {"trace": self.trace, "slo_ttft_ms": self.slo_ttft_ms, "slo_tpot_ms": self.slo_tpot_ms,
                "attainment": self.attainment, "fixed": self.fixed.to_dict() if self.fixed else None,
                "mean_sized": self.mean_sized.to_dict() if self.mean_sized else None,
                "autoscaled": self.autoscaled.to_dict() if self.autoscaled else None,
                "candidates": self.candidates, "simulations": self.simulations}


class _Search:
    def __init__(self, trace: RequestTrace, slo_ttft_ms: float, slo_tpot_ms: float | None, attainment: float,
                 base: FleetPolicy, window_s: float) -> None:
        self.trace, self.slo_ttft_ms, self.slo_tpot_ms = trace, slo_ttft_ms, slo_tpot_ms
        self.attainment, self.base, self.window_s = attainment, base, window_s
        self.runs = 0

    def sim(self, dep: Deployment, pol: FleetPolicy, price: float, abort: bool = True):
        self.runs += 1
        return simulate_fleet(dep, self.trace, pol, slo_ttft_ms=self.slo_ttft_ms, slo_tpot_ms=self.slo_tpot_ms,
                              window_s=self.window_s, usd_per_gpu_hour=price,
                              abort_below_attainment=self.attainment if abort else None)

    def ok(self, dep: Deployment, pol: FleetPolicy, price: float) -> bool:
        r = self.sim(dep, pol, price)
        return not r.aborted and r.slo_attainment >= self.attainment

    def min_fixed(self, dep: Deployment, lo: int, hi: int, price: float) -> int | None:
        """Smallest fixed replica count in [lo, ...] meeting the attainment (bisection; hi doubled if short)."""
        pol = lambda n: replace(self.base, replicas=n, autoscale=False)  # noqa: E731
        while not self.ok(dep, pol(hi), price):
            if hi >= MAX_FLEET:
                return None
            lo, hi = hi + 1, min(MAX_FLEET, hi * 2)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.ok(dep, pol(mid), price):
                hi = mid
            else:
                lo = mid + 1
        return hi


def size_for_trace(model: ModelSpec, nodes: list[NodeSpec], trace: RequestTrace, *, slo_ttft_ms: float,
                   slo_tpot_ms: float | None = None, attainment: float = 0.99, tps: list[int] | None = None,
                   precisions: list[str] | None = None, router: str = "least-outstanding",
                   batching: str = "continuous", weights_from: str = "nvme", autoscale: bool = True,
                   usd_per_gpu_hour_override: float | None = None, window_s: float = 60.0,
                   params: InferParams | None = None, calibration: Calibration | None = None) -> TraceSizing:
    """Cheapest fixed fleet and autoscaled policy for ``trace`` (module docstring)."""
    inputs.positive("slo_ttft_ms", slo_ttft_ms, allow_none=False)
    inputs.positive("slo_tpot_ms", slo_tpot_ms)
    inputs.positive("usd_per_gpu_hour", usd_per_gpu_hour_override)
    inputs.fraction("attainment", attainment)
    precisions = checked_candidates(nodes, precisions)
    if len(trace) < 2 or trace.duration_s <= 0:
        raise SpecError("sizing needs a trace of at least two requests spread over time")
    p = InferParams.resolve(calibration, params)
    isl = max(1, round(float(trace.input_len.mean())))
    osl = max(1, round(float(trace.output_len.mean())))
    need = int((trace.input_len + trace.output_len).max())
    mean_rate = trace.mean_rate
    peak_rate = float(trace.rate_per_window(window_s).max())
    base = FleetPolicy(router=router, batching=batching, weights_from=weights_from)
    search = _Search(trace, slo_ttft_ms, slo_tpot_ms, attainment, base, window_s)
    pct = min(max(attainment, 0.5), 0.999)
    tpot_s = slo_tpot_ms / 1e3 if slo_tpot_ms is not None else math.inf
    cands: list[dict[str, Any]] = []
    for node in nodes:
        price = usd_per_gpu_hour_override or usd_per_gpu_hour(node)
        for tp in tps or [t for t in (1, 2, 4, 8) if t <= node.gpus]:
            if tp > node.gpus or model.heads % tp:
                continue
            for pr in precisions:
                row: dict[str, Any] = {"node": node.id or node.name or "node", "tp": tp, "precision": pr}
                try:
                    dep = Deployment(model, node, tp, 1, pr, None, p, calibration)
                    dep.check_fits()
                except SpecError:
                    cands.append({**row, "feasible": False, "reason": "does not fit"})
                    continue
                if need > dep.memory().kv_capacity_tokens:
                    cands.append({**row, "feasible": False, "reason": "longest request exceeds the KV cache"})
                    continue
                c = replica_capacity(dep.step_model(), dep, isl, osl, slo_ttft_ms / 1e3, tpot_s, pct)
                if c["qps"] <= 0:
                    cands.append({**row, "feasible": False, "reason": f"cannot meet the {c['reason']} SLO"})
                    continue
                n_mean = max(1, math.ceil(mean_rate / c["qps"]))
                n_peak = max(n_mean, math.ceil(peak_rate / c["qps"]))
                cands.append({**row, "feasible": True, "replica_qps": c["qps"], "batch": c["batch"],
                              "replicas_mean": n_mean, "replicas_peak_guess": n_peak, "price": price,
                              "lower_bound_usd_per_hour": n_mean * tp * price,
                              "peak_guess_usd_per_hour": n_peak * tp * price, "_dep": dep})
    feas = sorted((c for c in cands if c["feasible"]), key=lambda c: (c["peak_guess_usd_per_hour"],
                                                                       c["lower_bound_usd_per_hour"]))
    best: dict[str, Any] | None = None
    for c in feas:
        if best is not None and c["lower_bound_usd_per_hour"] >= best["usd_per_hour"]:
            c["reason"] = "fleet sized for the mean already costs more than the best fleet"
            continue
        if best is not None and PEAK_GUESS_PRUNE * c["peak_guess_usd_per_hour"] >= best["usd_per_hour"]:
            c["reason"] = "fleet sized for the peak window costs more than the best fleet"
            continue
        n = search.min_fixed(c["_dep"], c["replicas_mean"], c["replicas_peak_guess"], c["price"])
        if n is None:
            c.update(feasible=False, reason=f"misses the SLO at {MAX_FLEET} replicas")
            continue
        c["replicas"] = n
        c["usd_per_hour"] = n * c["tp"] * c["price"]
        if best is None or c["usd_per_hour"] < best["usd_per_hour"]:
            best = c
    fixed = mean_sized = auto = None
    if best is not None:
        dep, price, cap = best["_dep"], best["price"], best["replica_qps"]

        def choice(n: int, res, policy: dict[str, Any]) -> FleetChoice:
            m = res.metrics
            reps = m["mean_replicas"] if policy.get("autoscale") else n
            return FleetChoice(best["node"], best["tp"], best["precision"], n, n * best["tp"], cap,
                               m["gpu_hours"] * price / (m["duration"] / 3600.0), m["slo_attainment"],
                               reps * cap / mean_rate, policy, {k: v for k, v in m.items()})

        pol = replace(base, replicas=best["replicas"])
        fixed = choice(best["replicas"], search.sim(dep, pol, price, abort=False), {"replicas": best["replicas"]})
        pol = replace(base, replicas=best["replicas_mean"])
        mean_sized = choice(best["replicas_mean"], search.sim(dep, pol, price, abort=False),
                            {"replicas": best["replicas_mean"]})
        if autoscale:
            auto = _autoscale(search, dep, price, best, choice)
    for c in cands:
        c.pop("_dep", None)
    return TraceSizing(trace.stats(), slo_ttft_ms, slo_tpot_ms, attainment, fixed, mean_sized, auto, cands,
                       search.runs)


def _autoscale(search: _Search, dep: Deployment, price: float, best: dict[str, Any], choice) -> FleetChoice | None:
    """Cheapest (concurrency target, warm minimum) meeting the attainment, by simulated cost."""
    n_fixed = int(best["replicas"])
    found: FleetChoice | None = None
    for frac in AUTOSCALE_TARGETS:
        target = max(1.0, frac * best["batch"])
        pol = lambda m, t=target: replace(search.base, replicas=m, min_replicas=m, autoscale=True,  # noqa: E731
                                          max_replicas=max(2 * n_fixed, m), target_value=t)
        lo, hi = 1, n_fixed
        if not search.ok(dep, pol(hi), price):
            continue
        while lo < hi:
            mid = (lo + hi) // 2
            if search.ok(dep, pol(mid), price):
                hi = mid
            else:
                lo = mid + 1
        res = search.sim(dep, pol(hi), price, abort=False)
        policy = {"autoscale": True, "min_replicas": hi, "max_replicas": max(2 * n_fixed, hi),
                  "target_metric": "concurrency", "target_value": target,
                  "scale_interval_s": search.base.scale_interval_s,
                  "scale_down_delay_s": search.base.scale_down_delay_s, "weights_from": search.base.weights_from,
                  "cold_start_s": res.info["cold_start_s"]}
        c = choice(hi, res, policy)
        if found is None or c.usd_per_hour < found.usd_per_hour:
            found = c
    return found
