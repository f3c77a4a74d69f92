"""Sizing: the cheapest deployment serving ``qps`` requests/s under TTFT and TPOT SLOs
(``clustertwin infer size``).

For every candidate (node type × TP × weight precision) the per-replica capacity comes from the
continuous-batching steady state (:func:`clustertwin.infer.estimator.steady_state`), vectorised over
every batch size ``B`` the KV cache allows:

- TPOT(B) = iteration time with ``B`` decodes and ``B·input/output`` prefill tokens; at percentile
  p it is evaluated at ``B + z_p·√(B/(1−ε))`` (requests in service are Poisson for Poisson arrivals,
  M/G/∞, over-dispersed by the load feedback ``ε = d ln t/d ln B``, see :func:`batch_quantile`);
- request rate λ(B) = ``B / (output·TPOT(B))`` (Little's law);
- TTFT: a prompt is prefilled in chunks of ``c = max_batch_tokens − B`` tokens, ``⌈input/c⌉``
  iterations of time ``t_chunk``; prompts queue for the prefill budget with utilisation
  ``ρ = λ·input·t_chunk/c``; mean wait ``ρ·S/(2(1−ρ))`` (M/D/1), percentile wait
  ``S/(1−ρ)·ln(ρ/(1−p))`` (exponential tail), ``S = input·t_chunk/c``;
- capacity = the largest λ(B) meeting both SLOs; replicas = ⌈qps / capacity⌉.

Cost = GPUs × USD per GPU-hour; USD per million output tokens = hourly cost / (qps·output·3600/1e6).
Because replicas = ⌈qps/capacity⌉ is non-decreasing in qps for every candidate, the cheapest cost is
monotone in qps. The winner is checked by the simulator (:func:`clustertwin.infer.simulate.simulate`).

Prefill/decode disaggregation (``disaggregated=True``) sizes a prefill pool (TTFT: prefill-only
iterations of ``max_batch_tokens``) and a decode pool (TPOT: decode-only iterations) separately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np

from clustertwin import units
from clustertwin.errors import SpecError
from clustertwin.infer import inputs
from clustertwin.infer.estimator import steady_state
from clustertwin.infer.params import InferParams
from clustertwin.infer.roofline import WEIGHT_PRECISIONS, Deployment, StepModel
from clustertwin.infer.simulate import Workload, simulate
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.node import NodeSpec

#: hardware amortisation period, years (typical 4-5 year depreciation of accelerator servers)
AMORTIZATION_YEARS = 4.0
#: electricity price, USD/kWh, and facility PUE for the running cost of a GPU-hour
USD_PER_KWH = 0.08
PUE = 1.3
#: USD per GPU-hour when neither the node nor the GPU has a price (2024-25 H100-class cloud rates)
FALLBACK_USD_PER_GPU_HOUR = 2.5


def checked_candidates(nodes: list[NodeSpec], precisions: list[str] | None) -> list[str]:
    """The weight precisions to try (default bf16 and fp8), after checking there is a node type to size
    with and every precision is one the roofline knows; bad input raises :class:`SpecError`."""
    if not nodes:
        raise SpecError("no node types to size with", path=("node",))
    precisions = precisions or ["bf16", "fp8"]
    for pr in precisions:
        if pr not in WEIGHT_PRECISIONS:
            raise SpecError(f"unsupported precision '{pr}' (choose from {', '.join(WEIGHT_PRECISIONS)})",
                            path=("precision",))
    return precisions


def usd_per_gpu_hour(node: NodeSpec) -> float:
    """Capital (node or GPU price over ``AMORTIZATION_YEARS``) plus energy (node power share × PUE ×
    ``USD_PER_KWH``) per GPU-hour; ``FALLBACK_USD_PER_GPU_HOUR`` when no price is known."""
    if node.price_usd:
        capex = node.price_usd / node.gpus
    elif node.gpu.price_usd:
        capex = node.gpu.price_usd / 0.65  # GPUs are ~65% of an 8-GPU server's price and power
    else:
        return FALLBACK_USD_PER_GPU_HOUR
    energy = node.system_power_kw / node.gpus * PUE * USD_PER_KWH
    return capex / (AMORTIZATION_YEARS * units.YEAR_H) + energy


@dataclass
class Candidate:
    """One deployment option and what it takes to serve the load."""

    node: str
    gpu: str
    tp: int
    precision: str
    feasible: bool
    replica_qps: float
    """Requests/s one replica sustains within the SLOs (0 if it cannot meet them)."""
    replicas: int
    gpus: int
    usd_per_hour: float
    usd_per_million_output_tokens: float
    batch: float
    """Decode batch per replica at the operating point."""
    ttft_ms: float
    tpot_ms: float
    reason: str = ""
    disaggregated: bool = False
    prefill_replicas: int = 0
    decode_replicas: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SizingResult:
    """Cheapest deployment meeting the SLOs, every candidate, and the simulation check."""

    qps: float
    input_len: int
    output_len: int
    slo_ttft_ms: float
    slo_tpot_ms: float
    percentile: float
    best: Candidate | None
    candidates: list[Candidate]
    verification: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"qps": self.qps, "input_len": self.input_len, "output_len": self.output_len,
                "slo_ttft_ms": self.slo_ttft_ms, "slo_tpot_ms": self.slo_tpot_ms, "percentile": self.percentile,
                "best": self.best.to_dict() if self.best else None,
                "candidates": [c.to_dict() for c in self.candidates], "verification": self.verification}


def norm_ppf(p: float) -> float:
    """Standard normal quantile ``Φ⁻¹(p)`` (stdlib ``statistics.NormalDist``, Wichura's AS241 algorithm,
    ~1e-16 relative accuracy): keeps scipy off the CLI path, where ``scipy.stats`` costs ~0.5 s to import."""
    if not 0.0 < p < 1.0 or not math.isfinite(p):
        raise SpecError(f"percentile {p} must be in (0, 1)", path=("percentile",))
    return NormalDist().inv_cdf(p)


def batch_quantile(B: np.ndarray, t: np.ndarray, percentile: float) -> np.ndarray:
    """Percentile of the number of requests in service around a mean of ``B``: Poisson (M/G/∞,
    variance B) amplified by the load feedback of continuous batching — more requests make every
    iteration slower, so requests stay longer — by ``1/(1 − ε)``, ``ε = d ln t / d ln B`` (linear-noise
    approximation), giving ``B + z_p·√(B/(1 − ε))``."""
    z = norm_ppf(percentile)
    eps = np.clip(np.gradient(np.log(t), np.log(B)) if B.size > 1 else np.zeros_like(B), 0.0, 0.95)
    return B + z * np.sqrt(B / (1.0 - eps))


def replica_capacity(step: StepModel, dep: Deployment, input_len: int, output_len: int, slo_ttft_s: float,
                     slo_tpot_s: float, percentile: float) -> dict[str, float]:
    """Largest request rate one replica sustains within the SLOs (formulas in the module docstring)."""
    p = dep.params
    cap = int(dep.max_seqs(input_len + output_len))
    cap = min(cap, p.max_batch_tokens - 1)
    if cap < 1:
        return {"qps": 0.0, "batch": 0.0, "ttft_s": math.inf, "tpot_s": math.inf, "reason": "kv-capacity"}
    B = np.arange(1, cap + 1, dtype=float)
    ss = steady_state(step, input_len, output_len, B)
    t = ss["iteration_s"]
    Bp = np.minimum(batch_quantile(B, t, percentile), cap)
    tpot_p = np.interp(Bp, B, t)
    lam = B / (output_len * t)
    chunk = np.maximum(p.max_batch_tokens - B, 1.0)
    c = np.minimum(chunk, input_len)
    t_chunk = step.time(B, B * (input_len + output_len / 2.0), c, c * input_len / 2.0, B + 1)
    n_it = np.ceil(input_len / chunk)
    service = n_it * t_chunk
    s_q = input_len * t_chunk / chunk
    rho = lam * s_q
    with np.errstate(divide="ignore", invalid="ignore"):
        wait_p = np.where(rho < 1, s_q / (1 - rho) * np.maximum(0.0, np.log(rho / (1 - percentile))), np.inf)
        wait_mean = np.where(rho < 1, rho * s_q / (2 * (1 - rho)), np.inf)
    ttft_p = service + wait_p
    ok = (ttft_p <= slo_ttft_s) & (tpot_p <= slo_tpot_s) & (Bp <= cap) & (rho < 1)
    if not ok.any():
        reason = "tpot" if tpot_p[0] > slo_tpot_s else "ttft"
        return {"qps": 0.0, "batch": 0.0, "ttft_s": float(ttft_p[0]), "tpot_s": float(tpot_p[0]), "reason": reason}
    i = int(np.argmax(np.where(ok, lam, -1.0)))
    return {"qps": float(lam[i]), "batch": float(B[i]), "ttft_s": float(service[i] + wait_mean[i]),
            "tpot_s": float(t[i]), "reason": ""}


def _disagg_capacity(step: StepModel, dep: Deployment, input_len: int, output_len: int, slo_ttft_s: float,
                     slo_tpot_s: float, percentile: float) -> dict[str, float]:
    """Per-replica rates of a prefill-only and a decode-only replica within the SLOs."""
    p = dep.params
    m = float(max(p.max_batch_tokens, input_len))
    t_pre = float(step.time(0.0, 0.0, m, m * input_len / 2.0, m / input_len))
    s_q = input_len * t_pre / m
    lam_grid = np.linspace(0.0, 1.0 / s_q, 400, endpoint=False)[1:]
    rho = lam_grid * s_q
    n_it = math.ceil(input_len / m)
    ttft_p = n_it * t_pre + s_q / (1 - rho) * np.maximum(0.0, np.log(rho / (1 - percentile)))
    ok_p = ttft_p <= slo_ttft_s
    qps_p = float(lam_grid[ok_p].max()) if ok_p.any() else 0.0
    cap = int(min(dep.max_seqs(input_len + output_len), p.max_batch_seqs))
    B = np.arange(1, max(cap, 1) + 1, dtype=float)
    t = step.time(B, B * (input_len + output_len / 2.0))
    tpot_p = np.interp(np.minimum(batch_quantile(B, t, percentile), cap), B, t)
    lam_d = B / (output_len * t)
    ok_d = tpot_p <= slo_tpot_s
    i = int(np.argmax(np.where(ok_d, lam_d, -1.0)))
    return {"prefill_qps": qps_p, "decode_qps": float(lam_d[i]) if ok_d.any() else 0.0,
            "batch": float(B[i]), "tpot_s": float(t[i]), "ttft_s": float(n_it * t_pre)}


MAX_VERIFY_REPLICAS_ADDED = 8
"""Replicas ``size`` may add, one at a time, when the simulator finds the analytic optimum misses the SLO."""


def _verify(model: ModelSpec, nodes: list[NodeSpec], best: Candidate, qps: float, input_len: int,
            output_len: int, slo_ttft_ms: float, slo_tpot_ms: float, percentile: float, p: InferParams,
            calibration: Calibration | None) -> dict[str, Any]:
    """Simulate one replica of ``best`` at its share of ``qps`` (Poisson arrivals, continuous batching)
    and report the SLO percentiles."""
    node = next(n for n in nodes if (n.id or n.name or "node") == best.node)
    dep = Deployment(model, node, best.tp, 1, best.precision, None, p, calibration)
    per_replica = qps / (best.decode_replicas if best.disaggregated else best.replicas)
    n_req = int(min(2000, max(200, per_replica * 60)))
    sim = simulate(dep, Workload(input_len, output_len, per_replica, n_req, seed=1),
                   disaggregated=best.disaggregated, prefill_replicas=max(1, best.prefill_replicas),
                   decode_replicas=max(1, best.decode_replicas))
    q = f"p{round(percentile * 100)}"
    ttft_q = float(np.percentile(sim.ttft_s, percentile * 100)) * 1e3 if sim.ttft_s is not None else math.nan
    tpot_q = float(np.percentile(sim.tpot_s, percentile * 100)) * 1e3 if sim.tpot_s is not None and \
        sim.tpot_s.size else math.nan
    return {"requests": sim.requests, f"ttft_ms_{q}": ttft_q, f"tpot_ms_{q}": tpot_q,
            "ttft_ms_mean": sim.ttft_ms["mean"], "tpot_ms_mean": sim.tpot_ms["mean"],
            "meets_slo": bool(ttft_q <= slo_ttft_ms and tpot_q <= slo_tpot_ms), "mean_batch": sim.mean_batch,
            "replicas_added": 0}


def size(model: ModelSpec, nodes: list[NodeSpec], *, qps: float, input_len: int, output_len: int,
         slo_ttft_ms: float, slo_tpot_ms: float, tps: list[int] | None = None,
         precisions: list[str] | None = None, percentile: float = 0.9, disaggregated: bool = False,
         usd_per_gpu_hour_override: float | None = None, verify: bool = True,
         params: InferParams | None = None, calibration: Calibration | None = None) -> SizingResult:
    """Cheapest (node, TP, precision) and replica count serving ``qps`` within the SLOs at ``percentile``."""
    inputs.positive("qps", qps, allow_none=False)
    inputs.positive("slo_ttft_ms", slo_ttft_ms, allow_none=False)
    inputs.positive("slo_tpot_ms", slo_tpot_ms, allow_none=False)
    inputs.positive("usd_per_gpu_hour", usd_per_gpu_hour_override)
    inputs.count("input_len", input_len)
    inputs.count("output_len", output_len)
    if not math.isfinite(percentile) or not 0.5 <= percentile < 1:
        raise SpecError("percentile must be in [0.5, 1)", path=("percentile",))
    if input_len < 1 or output_len < 1:
        raise SpecError("input_len and output_len must be >= 1", path=("input_len",))
    p = InferParams.resolve(calibration, params)
    precisions = checked_candidates(nodes, precisions)
    out_tok_per_h = qps * output_len * units.HOUR_S / 1e6
    cands: list[Candidate] = []
    for node in nodes:
        price = usd_per_gpu_hour_override or usd_per_gpu_hour(node)
        for tp in tps or [t for t in (1, 2, 4, 8) if t <= node.gpus]:
            if tp > node.gpus or model.heads % tp:
                continue
            for pr in precisions:
                name = node.id or node.name or "node"
                gname = node.gpu.id or node.gpu.name or "gpu"
                try:
                    dep = Deployment(model, node, tp, 1, pr, None, p, calibration)
                    dep.check_fits()
                except SpecError:
                    cands.append(Candidate(name, gname, tp, pr, False, 0.0, 0, 0, math.inf, math.inf, 0.0,
                                           math.nan, math.nan, reason="does not fit"))
                    continue
                step = dep.step_model()
                if disaggregated:
                    d = _disagg_capacity(step, dep, input_len, output_len, slo_ttft_ms / 1e3, slo_tpot_ms / 1e3,
                                         percentile)
                    ok = d["prefill_qps"] > 0 and d["decode_qps"] > 0
                    rp = math.ceil(qps / d["prefill_qps"]) if ok else 0
                    rd = math.ceil(qps / d["decode_qps"]) if ok else 0
                    g = (rp + rd) * tp
                    cost = g * price if ok else math.inf
                    cands.append(Candidate(name, gname, tp, pr, ok, min(d["prefill_qps"], d["decode_qps"]),
                                           rp + rd, g, cost, cost / out_tok_per_h, d["batch"], d["ttft_s"] * 1e3,
                                           d["tpot_s"] * 1e3, "" if ok else "slo", True, rp, rd))
                    continue
                c = replica_capacity(step, dep, input_len, output_len, slo_ttft_ms / 1e3, slo_tpot_ms / 1e3,
                                     percentile)
                ok = c["qps"] > 0
                r = math.ceil(qps / c["qps"] - 1e-9) if ok else 0
                cost = r * tp * price if ok else math.inf
                cands.append(Candidate(name, gname, tp, pr, ok, c["qps"], r, r * tp, cost, cost / out_tok_per_h,
                                       c["batch"], c["ttft_s"] * 1e3, c["tpot_s"] * 1e3, str(c["reason"])))
    feasible = [c for c in cands if c.feasible]
    feasible.sort(key=lambda c: (c.usd_per_hour, c.gpus, c.tpot_ms))
    best = feasible[0] if feasible else None
    res = SizingResult(qps, input_len, output_len, slo_ttft_ms, slo_tpot_ms, percentile, best,
                       sorted(cands, key=lambda c: (not c.feasible, c.usd_per_hour, c.gpus)))
    if verify and best is not None:
        res.verification = _verify(model, nodes, best, qps, input_len, output_len, slo_ttft_ms, slo_tpot_ms,
                                   percentile, p, calibration)
        if not res.verification["meets_slo"] and not best.disaggregated:
            # the analytic capacity was optimistic for this workload's queueing: add replicas until the
            # simulated percentiles meet the SLO (bounded), and charge them
            for _ in range(MAX_VERIFY_REPLICAS_ADDED):
                more = replace(best, replicas=best.replicas + 1, gpus=best.gpus + best.tp,
                               usd_per_hour=best.usd_per_hour * (best.replicas + 1) / best.replicas,
                               usd_per_million_output_tokens=best.usd_per_million_output_tokens
                               * (best.replicas + 1) / best.replicas)
                check = _verify(model, nodes, more, qps, input_len, output_len, slo_ttft_ms, slo_tpot_ms,
                                percentile, p, calibration)
                best = more
                res.verification = {**check, "replicas_added": best.replicas - res.best.replicas}
                if check["meets_slo"]:
                    break
            res.best = best
    return res
