"""Metrics of a fleet run, named as vLLM's ``bench serve`` result files where the meaning is the same.

Per request (ms): ``ttft`` (arrival to first token), ``tpot`` ((last − first token)/(output − 1)),
``e2el`` (arrival to last token); per token: ``itl`` (gap between consecutive tokens of one request,
i.e. the iteration times, weighted by the tokens each iteration emits). Each as ``mean_*_ms``,
``median_*_ms``, ``std_*_ms``, ``p90_*_ms``, ``p99_*_ms``. Throughputs over ``duration`` (first arrival
to last completion): ``request_throughput``, ``output_throughput``, ``total_token_throughput``,
``request_goodput`` (requests meeting the SLOs per second).

Fleet figures: ``slo_attainment`` (requests meeting TTFT and TPOT SLOs, rejected ones count as
misses, over all requests); ``mfu`` (model FLOPs of the linear layers and attention / (provisioned
GPU-seconds × dense 16-bit peak), one scale for every precision); ``gpu_busy_fraction`` = ``mfu /
gemm_efficiency``, the share of the provisioned GPU time the work done would keep the GPU busy at its
achieved 16-bit GEMM rate (headroom = 1 − busy; FP8 math can push it past 1 when compute-bound);
``gpu_active_fraction`` (time replicas ran iterations / provisioned time: what ``nvidia-smi``
reports as utilisation, near 1 under continuous batching at any load, so not a measure of headroom);
``gpu_hours``,
``cost_usd`` and ``usd_per_million_output_tokens``. ``windows``: the same per ``window_s`` of
arrival time, with the time-averaged provisioned replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clustertwin import units

STATS = ("mean", "median", "std", "p90", "p99")
VLLM_KEYS = frozenset({"duration", "completed", "num_prompts", "request_rate", "max_concurrency", "total_input_tokens",
                       "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
                       "total_token_throughput"} | {f"{s}_{m}_ms" for s in STATS for m in ("ttft", "tpot", "itl", "e2el")})
"""Keys shared with ``vllm bench serve --save-result`` files (same meaning, same units)."""


def _stats(name: str, x_s: np.ndarray, w: np.ndarray | None = None) -> dict[str, float | None]:
    """vLLM-style ``{stat}_{name}_ms`` of seconds ``x_s`` (optionally weighted)."""
    if x_s.size == 0:
        return {f"{k}_{name}_ms": None for k in STATS}
    x = x_s * 1e3
    if w is None:
        q = np.percentile(x, [50, 90, 99])
        return {f"mean_{name}_ms": float(x.mean()), f"median_{name}_ms": float(q[0]),
                f"std_{name}_ms": float(x.std()), f"p90_{name}_ms": float(q[1]), f"p99_{name}_ms": float(q[2])}
    order = np.argsort(x)
    xs, ws = x[order], w[order]
    cw = np.cumsum(ws)
    tot = cw[-1]
    pick = lambda p: float(xs[min(np.searchsorted(cw, p * tot), xs.size - 1)])  # noqa: E731
    mean = float(np.sum(xs * ws) / tot)
    std = float(math.sqrt(max(0.0, np.sum(ws * (xs - mean) ** 2) / tot)))
    return {f"mean_{name}_ms": mean, f"median_{name}_ms": pick(0.5), f"std_{name}_ms": std,
            f"p90_{name}_ms": pick(0.9), f"p99_{name}_ms": pick(0.99)}


@dataclass
class FleetResult:
    """Whole-run metrics (vLLM keys and fleet figures), per-window rows and the run's facts."""

    metrics: dict[str, Any]
    windows: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)
    aborted: bool = False
    ttft_s: np.ndarray | None = None
    meets: np.ndarray | None = None

    @property
    def slo_attainment(self) -> float:
        return float(self.metrics["slo_attainment"])

    def to_dict(self) -> dict[str, Any]:
        return {**self.metrics, "aborted": self.aborted, "fleet": self.info, "windows": self.windows}


def _overlap(start: np.ndarray, stop: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Seconds each [start, stop) interval spends in each window ``edges[i]..edges[i+1]``, summed."""
    lo = np.maximum(start[:, None], edges[None, :-1])
    hi = np.minimum(stop[:, None], edges[None, 1:])
    return np.clip(hi - lo, 0.0, None).sum(axis=0)


def fleet_info(fl: Any) -> dict[str, Any]:
    """Fleet-level facts for the result (replica counts, cold start, prefix cache)."""
    lookups = sum(r.cache_lookups for r in fl.all)
    return {"cold_start_s": fl.cold_s, "replicas_provisioned": len(fl.all),
            "prefix_cache_hit_rate": (sum(r.cache_hits for r in fl.all) / lookups) if lookups else None,
            "kv_transfer_ms_mean": float(np.mean(fl.transfer)) * 1e3 if fl.transfer is not None else None,
            "max_batch": max((r.max_batch for r in fl.all), default=0)}


def summarize(fl: Any, complete: bool, price: float, slo_ttft_ms: float | None, slo_tpot_ms: float | None,
              request_rate: float | None) -> FleetResult:
    arr, first, done = fl.arr, fl.first, fl.done
    osl = np.asarray(fl.osl, dtype=float)
    isl = np.asarray(fl.isl, dtype=float)
    n = len(arr)
    served = np.isfinite(done) & ~fl.rejected
    ttft = first - arr
    tpot = np.where(osl > 1, (done - first) / np.maximum(osl - 1, 1), np.nan)
    e2el = done - arr
    ok = served.copy()
    if slo_ttft_ms is not None:
        ok &= ttft * 1e3 <= slo_ttft_ms
    if slo_tpot_ms is not None:
        ok &= ~(tpot * 1e3 > slo_tpot_ms)
    horizon = float(np.nanmax(done)) if served.any() else float(arr[-1])
    horizon = max(horizon, float(arr[-1]), 1e-9)
    gpus = fl.dep.gpus
    life = np.array(list(fl.life.values()), dtype=float).reshape(-1, 2)
    life[:, 1] = np.where(np.isnan(life[:, 1]), horizon, np.minimum(life[:, 1], horizon))
    replica_s = float(np.sum(life[:, 1] - life[:, 0]))
    gpu_h = replica_s * gpus / units.HOUR_S
    cost = gpu_h * price
    busy_s = sum(r.busy_s for r in fl.all)
    peak16 = float(fl.dep.gpu.peak_tflops("bf16") or fl.dep.gpu.peak_tflops("fp16") or 0.0) * units.TFLOP
    eff = fl.dep.params.gemm_efficiency
    W = fl.window_s
    n_w = max(1, math.ceil(horizon / W))
    busy_w = np.zeros(n_w)
    flops_w = np.zeros(n_w)
    for r in fl.all:
        m = min(n_w, len(r.busy_w))
        busy_w[:m] += np.asarray(r.busy_w[:m])
        flops_w[:m] += np.asarray(r.flops_w[:m])
    itl_t = np.concatenate([np.asarray(r.itl_t) for r in fl.all]) if fl.all else np.zeros(0)
    itl_dt = np.concatenate([np.asarray(r.itl_dt) for r in fl.all]) if fl.all else np.zeros(0)
    itl_n = np.concatenate([np.asarray(r.itl_n) for r in fl.all]) if fl.all else np.zeros(0)
    out_tok = float(osl[served].sum())
    in_tok = float(isl[served].sum())
    sv = served
    tp_ok = sv & np.isfinite(tpot)
    m: dict[str, Any] = {
        "num_prompts": n, "request_rate": request_rate if request_rate is not None else
        ((n - 1) / float(arr[-1]) if n > 1 and arr[-1] > 0 else None),
        "max_concurrency": fl.pol.max_concurrency, "duration": horizon, "completed": int(sv.sum()),
        "rejected": int(fl.rejected.sum()), "total_input_tokens": int(in_tok), "total_output_tokens": int(out_tok),
        "request_throughput": float(sv.sum()) / horizon, "request_goodput": float(ok.sum()) / horizon,
        "output_throughput": out_tok / horizon, "total_token_throughput": (out_tok + in_tok) / horizon,
        **_stats("ttft", ttft[sv]), **_stats("tpot", tpot[tp_ok]), **_stats("itl", itl_dt, itl_n),
        **_stats("e2el", e2el[sv]),
        "slo_ttft_ms": slo_ttft_ms, "slo_tpot_ms": slo_tpot_ms, "slo_attainment": float(ok.sum()) / n,
        "gpu_busy_fraction": float(flops_w.sum()) / max(replica_s * gpus * peak16 * eff, 1e-12),
        "gpu_active_fraction": busy_s / max(replica_s, 1e-12),
        "mfu": float(flops_w.sum()) / max(replica_s * gpus * peak16, 1e-12),
        "mean_replicas": replica_s / horizon, "peak_replicas": 0, "gpu_hours": gpu_h, "cost_usd": cost,
        "usd_per_gpu_hour": price,
        "usd_per_million_output_tokens": cost / (out_tok / 1e6) if out_tok > 0 else None,
    }
    edges = np.minimum(np.arange(n_w + 1) * W, horizon)
    edges[-1] = horizon
    rep_w = _overlap(life[:, 0], life[:, 1], edges)
    lo = np.searchsorted(arr, edges[:-1], side="left")
    hi = np.searchsorted(arr, edges[1:], side="left")
    hi[-1] = n
    itl_w = np.minimum((itl_t // W).astype(np.int64), n_w - 1) if itl_t.size else itl_t.astype(np.int64)
    windows = []
    for w in range(n_w):
        sl = slice(int(lo[w]), int(hi[w]))
        span = max(edges[w + 1] - edges[w], 1e-12)
        s_ok = sv[sl]
        sel = itl_w == w
        itl = _stats("itl", itl_dt[sel], itl_n[sel])
        row = {"start_s": float(edges[w]), "requests": int(hi[w] - lo[w]), "rejected": int(fl.rejected[sl].sum()),
               "replicas": float(rep_w[w] / span),
               "gpu_busy_fraction": float(flops_w[w] / (rep_w[w] * gpus * peak16 * eff)) if rep_w[w] > 0 else 0.0,
               "gpu_active_fraction": float(busy_w[w] / rep_w[w]) if rep_w[w] > 0 else 0.0,
               "mfu": float(flops_w[w] / (rep_w[w] * gpus * peak16)) if rep_w[w] > 0 else 0.0,
               "slo_attainment": float(ok[sl].mean()) if hi[w] > lo[w] else None,
               "cost_usd": float(rep_w[w] * gpus / units.HOUR_S * price)}
        for name, x in (("ttft", ttft[sl][s_ok]), ("tpot", tpot[sl][s_ok & np.isfinite(tpot[sl])]),
                        ("e2el", e2el[sl][s_ok])):
            st = _stats(name, x)
            row[f"median_{name}_ms"], row[f"p99_{name}_ms"] = st[f"median_{name}_ms"], st[f"p99_{name}_ms"]
        row["median_itl_ms"], row["p99_itl_ms"] = itl["median_itl_ms"], itl["p99_itl_ms"]
        windows.append(row)
    m["peak_replicas"] = max((w_["replicas"] for w_ in windows), default=0.0)
    info = {**fleet_info(fl), "trace": fl.tr.report.to_dict(), "scale_events": len(fl.scale_log)}
    return FleetResult(m, windows, info, aborted=not complete, ttft_s=ttft, meets=ok)
