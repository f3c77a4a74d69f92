"""The report's content: typed sections (tables and figures) computed from the models. Pure functions of
specs and options; no HTML here (see :mod:`clustertwin.report.html`).

Sections: the cluster plan, the scaling curve with its losses attributed, the step-time and memory
breakdowns of the best layout, collective bus bandwidth against message size, the wall-time
distribution with failures, inference serving of the model on the cluster's node (per TP degree,
throughput and TPOT against batch, a sizing answer) and (given a job trace) the scheduler policies
compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clustertwin import comm
from clustertwin.errors import SpecError
from clustertwin.labels import term_label
from clustertwin.plan import Plan
from clustertwin.plan_rows import SECTIONS, plan_rows
from clustertwin.report import figures
from clustertwin.specs import ClusterSpec, ModelSpec
from clustertwin.train.estimate import TrainEstimate
from clustertwin.train.scale import ScaleResult, time_to_train
from clustertwin.units import DAY_S, HOUR_S

COMM_OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
"""Collectives plotted against message size."""
COMM_SIZES_BYTES = 2.0 ** np.arange(10, 34)
"""Message sizes of the bandwidth plot: 1 KiB to 8 GiB, doubling."""


@dataclass(frozen=True)
class Table:
    """A captioned table of already formatted cells."""

    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Figure:
    """One plot: an element id and the plotly figure as JSON text."""

    id: str
    title: str
    json: str


@dataclass(frozen=True)
class Section:
    """A titled part of the report."""

    id: str
    title: str
    intro: str
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()
    notes: tuple[str, ...] = ()
    path: tuple[Any, ...] = ()
    """Stages of a path diagram (:class:`clustertwin.report.path_view.PathBox`), drawn as a flow of boxes."""


@dataclass(frozen=True)
class Report:
    """Everything the HTML template renders."""

    title: str
    subtitle: str
    generator: str
    sections: tuple[Section, ...]
    omitted: tuple[str, ...] = field(default_factory=tuple)
    """Sections left out, each with the reason."""


def fmt(v: Any) -> str:
    """A cell: thousands separators, 3 significant digits below 1, '-' for None/NaN."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        a = abs(v)
        if a == 0:
            return "0"
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 1:
            return f"{v:,.2f}"
        return f"{v:.3g}"
    if isinstance(v, list | tuple):
        return ", ".join(fmt(x) for x in v) or "-"
    return str(v)


def plan_section(p: Plan) -> Section:
    """Bill of materials, peak compute, memory, network, storage, facility and cost tables, with the labels of
    ``clustertwin plan`` (one label map: :func:`clustertwin.plan_rows.plan_rows`)."""
    rows = plan_rows(p)
    tables = tuple(Table(name, ("item", "value"), tuple((label.strip(), fmt(v) if v != "" else "")
                                                         for label, v in rows[name]))
                   for name in SECTIONS if name in rows)
    return Section("plan", "Cluster plan", "Bill of materials, peak compute, memory, network, storage, power, "
                   "cooling and cost of the cluster (clustertwin plan).", tables, notes=p.warnings)


def _best(res: ScaleResult) -> TrainEstimate | None:
    fitted = [pt.estimate for pt in res.points if pt.estimate is not None]
    return fitted[-1] if fitted else None


def scaling_section(res: ScaleResult) -> Section:
    """Best layout at each doubling of the GPU count: efficiency and the step-time shares that explain it."""
    pts = [p for p in res.points if p.estimate is not None]
    gpus = [p.gpus for p in pts]
    eff = [p.efficiency for p in pts]
    per_gpu = [p.estimate.tokens_per_s_per_gpu for p in pts if p.estimate is not None]
    shares: dict[str, list[float]] = {}
    for p in pts:
        for k, v in p.fractions.items():
            shares.setdefault(k, []).append(v)
    rows = []
    for p in res.points:
        e = p.estimate
        if e is None:
            rows.append((fmt(p.gpus), "-", "-", "-", "-", p.note or "-"))
            continue
        lay = e.layout
        rows.append((fmt(p.gpus), fmt(e.tokens_per_s), fmt(e.mfu), fmt(p.efficiency),
                     f"tp{lay['tp']} pp{lay['pp']} dp{lay['dp']} cp{lay['cp']}", p.note or ""))
    figs = (Figure("fig-scaling", "Scaling efficiency", figures.scaling_figure(gpus, eff, per_gpu)),
            Figure("fig-losses", "Where the step time goes", figures.losses_figure(gpus, shares))) if pts else ()
    return Section("scaling", "Scaling curve",
                   f"Best fitting layout at each GPU count, global batch {res.global_batch:,} sequences, "
                   f"{res.precision}. Efficiency is tokens/s per GPU relative to the first point; the stacked "
                   "bars attribute the step time to compute, communication, pipeline bubble and imbalance.",
                   (Table("best layout per GPU count", ("GPUs", "tokens/s", "MFU", "efficiency", "layout",
                                                        "note"), tuple(rows)),), figs)


def breakdown_section(est: TrainEstimate) -> Section:
    """Step-time and memory breakdowns of one layout."""
    lay = est.layout
    layout = ", ".join(f"{k}={v}" for k, v in lay.items())
    step = {term_label(k): float(v) for k, v in est.breakdown.items()}
    mem_bd = {term_label(k): float(v) for k, v in est.memory.breakdown.items()}
    cap = float(est.memory.capacity_gib)
    rows = ((("step time, s", fmt(est.step_time_s)), ("tokens/s", fmt(est.tokens_per_s)), ("MFU", fmt(est.mfu)),
             ("HFU", fmt(est.hfu)), ("memory per GPU, GiB", fmt(est.memory_gib_per_gpu)),
             ("HBM per GPU, GiB", fmt(cap)), ("GPUs", fmt(est.gpus)), ("layout", layout)))
    return Section("breakdown", "Step time and memory",
                   f"The best layout on {est.gpus:,} GPUs: what one optimizer step spends its time on and what "
                   "fills each GPU's memory.",
                   (Table("layout", ("item", "value"), rows),
                    Table("step time by term", ("term", "seconds"),
                          tuple((k, fmt(v)) for k, v in step.items())),
                    Table("memory by term", ("term", "GiB"), tuple((k, fmt(v)) for k, v in mem_bd.items()))),
                   (Figure("fig-step", "Step time by term", figures.breakdown_figure("Step time by term", step,
                                                                                      "seconds per step")),
                    Figure("fig-memory", "Memory per GPU by term",
                           figures.breakdown_figure("Memory per GPU by term", mem_bd, "GiB", capacity=cap))))


def comm_section(cluster: ClusterSpec, gpus: int) -> Section:
    """Bus bandwidth of the main collectives over message sizes on ``gpus`` GPUs."""
    busbw: dict[str, np.ndarray] = {}
    rows = []
    for op in COMM_OPS:
        res = comm.collective(cluster, op, COMM_SIZES_BYTES, gpus)
        bw = np.asarray(res.busbw_gb_per_s, dtype=np.float64)
        busbw[op] = bw
        rows.append((op, fmt(float(bw[COMM_SIZES_BYTES.searchsorted(2.0 ** 20)])),
                     fmt(float(bw[COMM_SIZES_BYTES.searchsorted(2.0 ** 27)])), fmt(float(bw[-1])),
                     str(np.asarray(res.algorithm)[-1])))
    return Section("comm", "Collective bandwidth",
                   f"Predicted nccl-tests bus bandwidth on {gpus:,} GPUs, 1 KiB to 8 GiB messages.",
                   (Table("busbw, GB/s", ("collective", "1 MiB", "128 MiB", "8 GiB", "algorithm at 8 GiB"),
                          tuple(rows)),),
                   (Figure("fig-comm", "Collective bus bandwidth",
                           figures.bandwidth_figure(COMM_SIZES_BYTES, busbw, gpus)),))


def reliability_section(est: TrainEstimate, cluster: ClusterSpec, tokens: float, trials: int, seed: int,
                        reliability: Any) -> Section:
    """Time-to-train of ``tokens`` at the layout's throughput and its wall-time distribution with failures."""
    ttt = time_to_train(est, tokens, cluster)
    ideal_s = ttt.days * DAY_S
    res = reliability.with_failures(est.gpus, ideal_s, est.checkpoint_bytes, cluster,
                                    step_time_s=est.step_time_s, trials=trials, seed=seed)
    wall_days = np.asarray(res.monte_carlo.wall_s) / DAY_S
    pct = np.percentile(wall_days, [10, 50, 90])
    rows = (("token budget", f"{tokens:,.0f}"), ("failure-free time, days", fmt(ttt.days)),
            ("GPU-hours (failure-free)", fmt(ttt.gpu_hours)), ("energy (failure-free), MWh", fmt(ttt.energy_mwh)),
            ("energy cost (failure-free), USD, estimate", fmt(ttt.energy_cost_usd)),
            ("MTBF of the job, h", fmt(res.rates.mtbf_h)), ("checkpoint interval, s", fmt(res.interval_s)),
            ("expected wall time, days", fmt(res.analytic.wall_s / DAY_S)), ("expected ETTR", fmt(res.analytic.ettr)),
            ("wall time p10 / p50 / p90, days", " / ".join(fmt(float(v)) for v in pct)),
            ("expected interruptions", fmt(res.analytic.unexpected_interruptions)),
            ("restart policy", str(res.policy)), ("Monte Carlo trials", fmt(trials)))
    return Section("reliability", "Time to train with failures",
                   f"{tokens:,.0f} tokens on {est.gpus:,} GPUs: failure-free time from the training model, wall "
                   "time from the failure, checkpoint and restart model (analytical expectation and a Monte "
                   f"Carlo of {trials:,} runs).",
                   (Table("time to train", ("item", "value"), rows),),
                   (Figure("fig-walltime", "Wall time with failures",
                           figures.histogram_figure(wall_days, ttt.days, res.analytic.wall_s / DAY_S)),),
                   notes=(f"Hours lost to failures (expected): {fmt((res.analytic.wall_s - ideal_s) / HOUR_S)} h.",))


def sched_section(cluster: ClusterSpec, trace_path: Path, trace_format: str, policies: tuple[str, ...],
                  sched: Any) -> Section:
    """Scheduler policies replayed on a job trace: utilisation, queueing and completion metrics.
    ``sched`` provides ``read_trace``, ``from_spec``, ``simulate`` and ``compute`` (the scheduler layer)."""
    trace = sched.read_trace(trace_path, trace_format, cluster_gpus=cluster.total_gpus)
    sc = sched.from_spec(cluster)
    metrics = {pol: sched.compute(sched.simulate(sc, trace.jobs, pol)) for pol in policies}
    keys = ("gpu_utilization", "avg_queue_s", "p99_queue_s", "avg_jct_s", "bounded_slowdown", "completed",
            "fragmented_gpus")
    rows = tuple((term_label(k), *(fmt(getattr(m, k)) for m in metrics.values())) for k in keys)
    hours = {"avg queue, h": [m.avg_queue_s / HOUR_S for m in metrics.values()],
             "p99 queue, h": [m.p99_queue_s / HOUR_S for m in metrics.values()],
             "avg JCT, h": [m.avg_jct_s / HOUR_S for m in metrics.values()]}
    return Section("sched", "Scheduler comparison",
                   f"{trace.report.jobs:,} jobs of {trace_path.name} replayed on this cluster under each policy.",
                   (Table("metrics by policy", ("metric", *policies), rows),),
                   (Figure("fig-sched", "Queueing and completion by policy",
                           figures.grouped_bars_figure("Queueing and completion by policy", list(policies),
                                                       hours, "hours")),))


def model_label(model: ModelSpec) -> str:
    return str(model.name or model.id or "model")


def cluster_label(cluster: ClusterSpec) -> str:
    return str(cluster.name or cluster.id or "cluster")



@dataclass(frozen=True)
class InferSettings:
    """The serving workload of the inference section."""

    precision: str = "bf16"
    """Weight precision of the per-TP curves (KV precision follows the inference layer's default)."""
    input_len: int = 512
    """Prompt tokens per request."""
    output_len: int = 256
    """Generated tokens per request."""
    qps: float = 10.0
    """Request rate the sizing answer serves, requests/s."""
    slo_ttft_ms: float = 1000.0
    """Time-to-first-token SLO at ``percentile``, ms."""
    slo_tpot_ms: float = 50.0
    """Time-per-output-token SLO at ``percentile``, ms."""
    percentile: float = 0.9
    """SLO percentile of the sizing."""


INFER_TPS: tuple[int, ...] = (1, 2, 4, 8)
"""Tensor-parallel degrees of the inference section (those the node and the head count allow)."""
INFER_CURVE_POINTS = 28
"""Batch sizes per TP curve (geometric from 1 to the largest batch)."""


def _batch_grid(max_batch: int) -> np.ndarray:
    return np.unique(np.round(np.geomspace(1, max(max_batch, 1), INFER_CURVE_POINTS)))


def infer_section(model: ModelSpec, cluster: ClusterSpec, s: InferSettings, infer: Any) -> Section:
    """Serving ``model`` on the cluster's node: per TP degree the memory split, KV-cache capacity, largest
    batch and offline throughput; decode throughput and TPOT against batch (continuous-batching steady
    state); and the cheapest deployment on this node for ``s.qps`` within the SLOs.
    ``infer`` provides ``estimate``, ``size``, ``Deployment`` and ``steady_state`` (the inference layer)."""
    node = cluster.node
    tps = [t for t in INFER_TPS if t <= node.gpus and model.heads % t == 0]
    rows: list[tuple[str, ...]] = []
    tput: dict[str, tuple[list[float], list[float]]] = {}
    tpot: dict[str, tuple[list[float], list[float]]] = {}
    notes: list[str] = []
    for tp in tps:
        dep = infer.Deployment(model, node, tp, 1, s.precision)
        mem = dep.memory().to_dict()
        try:
            est = infer.estimate(model, node, tp=tp, precision=s.precision, input_len=s.input_len,
                                 output_len=s.output_len)
        except SpecError as e:
            rows.append((fmt(tp), fmt(mem["weights_gib"]), fmt(mem["kv_budget_gib"]), "-", "-", "-", "-", "-",
                         e.message))
            continue
        grid = _batch_grid(est.max_batch)
        ss = infer.steady_state(dep.step_model(), s.input_len, s.output_len, grid)
        label = f"TP {tp}"
        tput[label] = (grid.tolist(), (np.asarray(ss["output_tokens_per_s"]) / tp).tolist())
        tpot[label] = (grid.tolist(), (np.asarray(ss["iteration_s"]) * 1e3).tolist())
        rows.append((fmt(tp), fmt(mem["weights_gib"]), fmt(mem["kv_budget_gib"]), fmt(mem["kv_capacity_tokens"]),
                     fmt(est.max_batch), fmt(est.output_tokens_per_s_per_gpu), fmt(est.tpot_ms), fmt(est.ttft_ms),
                     est.bound))
    tables = [Table(f"one replica per TP degree, {s.precision} weights, {s.input_len:,} in / {s.output_len:,} out",
                    ("TP", "weights GiB/GPU", "KV cache GiB/GPU", "KV tokens/replica", "max batch",
                     "offline output tok/s per GPU", "TPOT, ms", "TTFT, ms", "bound"), tuple(rows))]
    sized = infer.size(model, [node], qps=s.qps, input_len=s.input_len, output_len=s.output_len,
                       slo_ttft_ms=s.slo_ttft_ms, slo_tpot_ms=s.slo_tpot_ms, percentile=s.percentile)
    q = f"p{round(s.percentile * 100)}"
    best = sized.best
    if best is None:
        notes.append(f"No deployment on {node.id or node.name} serves {s.qps:g} requests/s within TTFT "
                     f"{s.slo_ttft_ms:g} ms and TPOT {s.slo_tpot_ms:g} ms at {q}.")
    else:
        v = sized.verification
        tables.append(Table(f"cheapest deployment for {s.qps:g} requests/s (TTFT {s.slo_ttft_ms:g} ms, "
                            f"TPOT {s.slo_tpot_ms:g} ms at {q})", ("item", "value"), (
            ("deployment", f"TP {best.tp}, {best.precision}, {best.replicas:,} replica(s)"),
            ("GPUs", fmt(best.gpus)), ("requests/s per replica", fmt(best.replica_qps)),
            ("decode batch per replica", fmt(best.batch)),
            (f"TTFT / TPOT at {q} (model), ms", f"{fmt(best.ttft_ms)} / {fmt(best.tpot_ms)}"),
            (f"TTFT / TPOT at {q} (simulated), ms",
             f"{fmt(v.get(f'ttft_ms_{q}'))} / {fmt(v.get(f'tpot_ms_{q}'))}" if v else "-"),
            ("meets the SLOs in simulation", fmt(v.get("meets_slo")) if v else "-"),
            ("USD per hour", f"${best.usd_per_hour:,.2f}"),
            ("USD per million output tokens", f"${best.usd_per_million_output_tokens:,.3f}"))))
    cands = tuple((fmt(c.tp), c.precision, fmt(c.feasible), fmt(c.replica_qps), fmt(c.replicas), fmt(c.gpus),
                   f"${c.usd_per_hour:,.2f}" if math.isfinite(c.usd_per_hour) else "-", c.reason or "")
                  for c in sized.candidates)
    tables.append(Table("sizing candidates", ("TP", "precision", "feasible", "req/s per replica", "replicas",
                                              "GPUs", "USD/h", "reason"), cands))
    figs: tuple[Figure, ...] = ()
    if tput:
        figs = (Figure("fig-infer-throughput", "Decode throughput against batch",
                       figures.curves_figure("Decode throughput against batch", "decode batch (sequences)",
                                             "output tokens/s per GPU", tput, log_x=True)),
                Figure("fig-infer-tpot", "TPOT against batch",
                       figures.curves_figure("Time per output token against batch", "decode batch (sequences)",
                                             "TPOT, ms", tpot, log_x=True)))
    else:
        notes.append(f"{model_label(model)} at {s.precision} fits no TP degree of one {node.id or node.name} node.")
    gpu = node.gpu.id or node.gpu.name or "GPU"
    return Section("infer", "Inference serving",
                   f"{model_label(model)} served on {gpu} ({node.id or node.name}, up to {node.gpus} GPUs per "
                   f"replica), {s.input_len:,} prompt and {s.output_len:,} output tokens per request. Curves: "
                   "continuous-batching steady state (each iteration decodes the batch and prefills new "
                   "prompts at the same rate) up to the largest batch the KV cache holds; the table's offline "
                   "figures are those of clustertwin infer estimate, the sizing those of clustertwin infer size.",
                   tuple(tables), figs, notes=tuple(notes))


def hpc_section(cluster: ClusterSpec) -> Section:
    """FP64 science workloads on the cluster (clustertwin hpc estimate): HPL, HPCG and the default
    halo-exchange stencil, with what limits each."""
    from clustertwin.errors import SpecError as _SpecError
    from clustertwin.hpc.hpcg import hpcg
    from clustertwin.hpc.hpl import hpl
    from clustertwin.hpc.stencil import stencil

    h, g = hpl(cluster), hpcg(cluster)
    notes = ["HPCG and stencil power assume the devices at TDP (upper bound)."]
    try:
        s = stencil(cluster)
    except _SpecError as e:
        s = None
        notes.append(f"default stencil left out: {e}")
    d = h.device
    rows: tuple[tuple[str, str], ...] = (
        ("HPL Rpeak, PFLOP/s", fmt(h.rpeak_pflops)),
        ("HPL Rmax, PFLOP/s", fmt(h.rmax_pflops)),
        ("HPL Rmax / Rpeak", fmt(h.efficiency)),
        ("HPL N, NB, P x Q", f"{h.n:,}, {h.nb}, {h.p} x {h.q}"),
        ("HPL run time, s", fmt(h.time_s)),
        ("DGEMM per GPU, TFLOP/s", f"{fmt(d.dgemm_tflops)} ({d.limited_by}-bound; FP64 GEMM peak {fmt(d.peak_tflops)})"),
        ("HPL power, kW", fmt(h.power_kw)),
        ("HPL GFLOP/s per W", fmt(h.gflops_per_w)),
        ("HPCG, PFLOP/s", fmt(g.pflops)),
    )
    if s is not None:
        rows += (("stencil step, ms", f"{fmt(s.step_s * 1e3)} ({s.bound}-bound, "
                                      f"{'x'.join(map(str, s.decomposition))} split)"),
                 ("stencil run, hours", fmt(s.time_s / 3600)))
    return Section("hpc", "Science computing (FP64)",
                   "TOP500-style HPL, HPCG and a weather-style halo-exchange stencil on this cluster "
                   "(clustertwin hpc estimate; model and calibration in docs/hpc.md).",
                   (Table("FP64 workloads", ("quantity", "value"), rows),), notes=tuple(notes))
