"""``clustertwin infer simulate``: a request trace (file or synthetic) served by a fleet of replicas,
and the trace options shared with ``infer size --trace``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import typer

from clustertwin.cli.common import console, err_console, load_calibration, load_model, print_json, table
from clustertwin.cli.option_errors import option_names as _option_names
from clustertwin.errors import SpecError
from clustertwin.infer import fleet

POLICY_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(fleet.FleetPolicy)}
"""FleetPolicy field -> its default: the fleet options of ``infer simulate`` and ``infer size --trace``."""

TraceOpt = typer.Option(None, "--trace", help="Trace file (Azure LLM CSV, BurstGPT CSV, Mooncake JSONL) or "
                        "synthetic:poisson|bursty|diurnal.")
FormatOpt = typer.Option(None, "--format", help="Trace format: azure, burstgpt, mooncake (default: detected).")
NumRequestsOpt = typer.Option(None, "--num-requests", help="Use the first N requests of the trace "
                               "(vLLM --num-prompts).")
RateOpt = typer.Option(None, "--request-rate", help="Mean requests/s: rescales a trace file's times; the "
                       "synthetic mean rate (default 10).")
DurationOpt = typer.Option(600.0, "--duration-s", help="Synthetic: trace length, s.")
PeakOpt = typer.Option(4.0, "--peak-to-mean", help="Synthetic bursty/diurnal: peak-to-mean window rate.")
BurstFracOpt = typer.Option(0.1, "--burst-fraction", help="Synthetic bursty: fraction of windows at the peak.")
BurstinessOpt = typer.Option(1.0, "--burstiness", help="Gamma shape of inter-arrivals (vLLM; 1 = Poisson).")
PeriodOpt = typer.Option(86400.0, "--period-s", help="Synthetic diurnal: period, s.")
InLenOpt = typer.Option(1024, "--input-len", help="Synthetic: mean prompt tokens.")
OutLenOpt = typer.Option(256, "--output-len", help="Synthetic: mean generated tokens.")
CvOpt = typer.Option(0.5, "--length-cv", help="Synthetic: coefficient of variation of lengths (lognormal).")
GroupsOpt = typer.Option(0, "--prefix-groups", help="Synthetic: groups sharing a prompt prefix (0: none).")
PrefixOpt = typer.Option(0, "--prefix-tokens", help="Synthetic: shared prefix tokens per group.")
SeedOpt = typer.Option(0, "--seed", help="Synthetic: random seed.")
WindowOpt = typer.Option(60.0, "--window-s", help="Reporting / burst window, s.")


def load_trace(trace: str | None, fmt: str | None, num_requests: int | None, request_rate: float | None,
               duration_s: float, peak_to_mean: float, burst_fraction: float, burstiness: float,
               period_s: float, input_len: int, output_len: int, length_cv: float, prefix_groups: int,
               prefix_tokens: int, seed: int, window_s: float):
    """The trace a command runs on. Its malformed-line counts are printed by :func:`report_trace` once the
    command has validated the rest of its input, so a run that exits 2 prints its error line alone."""
    from clustertwin.infer import inputs
    from clustertwin.infer.synthetic import SyntheticSpec, generate
    from clustertwin.infer.traces import read_trace

    if trace is None:
        raise SpecError("--trace is required (a trace file or synthetic:poisson|bursty|diurnal)")
    inputs.count("num_requests", num_requests)
    inputs.positive("request_rate", request_rate)
    if trace.startswith("synthetic:"):
        tr = generate(SyntheticSpec(kind=trace.split(":", 1)[1], rate=request_rate or 10.0, duration_s=duration_s,
                                    peak_to_mean=peak_to_mean, window_s=window_s, burst_fraction=burst_fraction,
                                    period_s=period_s, burstiness=burstiness, input_len=input_len,
                                    output_len=output_len, length_cv=length_cv, prefix_groups=prefix_groups,
                                    prefix_tokens=prefix_tokens, seed=seed))
    else:
        tr = read_trace(Path(trace), fmt)
        if request_rate is not None:
            tr = tr.with_rate(request_rate)
    if num_requests is not None:
        tr = tr.head(num_requests)
    return tr


def report_trace(tr: Any) -> None:
    """Malformed and excluded lines of a trace file on stderr (never silently dropped)."""
    if tr.report.bad or tr.report.excluded:
        err_console.print(f"trace: {tr.report.summary()}", markup=False, highlight=False)
        for line in tr.report.first_bad:  # one line each, in the one-line format (no indented continuation)
            err_console.print(f"trace: {line}", markup=False, highlight=False)


FIELD_OPTIONS = {"rate": "request_rate", "chunked_prefill": "chunked", "kind": "trace", "tps": "tp",
                 "precisions": "precision"}
"""Model fields whose command parameter has another name (SyntheticSpec.rate is ``--request-rate`` ...)."""


def option_names(command: Callable[..., Any]) -> AbstractContextManager[None]:
    """Errors of the block name ``command``'s options (:func:`clustertwin.cli.option_errors.option_names`)."""
    return _option_names(command, FIELD_OPTIONS)


def _deployment(model: str, node: str | None, gpu: str | None, tp: int, precision: str, kv_precision: str | None,
                calibration: str | None):
    from clustertwin.infer import Deployment, InferParams
    from clustertwin.infer.validation import node_for

    cal = load_calibration(calibration)
    nd = node_for(node if node or gpu else "dgx-h100", gpu, tp)
    return Deployment(load_model(model), nd, tp, 1, precision, kv_precision, InferParams.resolve(cal), cal)


def whole_table(title: str | None, columns: list[str], rows: list[list[Any]]):
    """A table whose number cells are never cut (:class:`clustertwin.cli.common.FitTable`: numeric columns keep
    their width; a table that cannot fit splits into parts that repeat the row labels)."""
    from clustertwin.cli.common import table

    return table(title, columns, rows)


def _summary_rows(m: dict[str, Any], info: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = [
        ["requests (completed / rejected)", f"{m['completed']:,} / {m['rejected']:,}"],
        ["duration s", m["duration"]], ["request throughput req/s", m["request_throughput"]],
        ["request goodput req/s", m["request_goodput"]], ["output token throughput tok/s", m["output_throughput"]],
        ["total token throughput tok/s", m["total_token_throughput"]],
    ]
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        rows.append([f"{label} ms mean / median / p90 / p99",
                     " / ".join("-" if m[f"{k}_{name}_ms"] is None else f"{m[f'{k}_{name}_ms']:,.1f}"
                                for k in ("mean", "median", "p90", "p99"))])
    rows += [["SLO attainment", m["slo_attainment"]], ["replicas mean / peak window",
             f"{m['mean_replicas']:.2f} / {m['peak_replicas']:.2f}"],
             ["GPU busy fraction (compute)", m["gpu_busy_fraction"]], ["MFU (vs 16-bit peak)", m["mfu"]],
             ["GPU active fraction (iterations running)", m["gpu_active_fraction"]],
             ["GPU-hours", m["gpu_hours"]], ["cost USD", m["cost_usd"]],
             ["USD per 1M output tokens", m["usd_per_million_output_tokens"]],
             ["prefix cache hit rate (blocks)", info.get("prefix_cache_hit_rate")],
             ["max batch per replica (simulated)", info.get("max_batch")]]
    return rows


def policy_option(name: str, *decls: str, help: str) -> Any:
    """The option that sets ``FleetPolicy.name``, with the policy's default (never a copy of it)."""
    return typer.Option(POLICY_DEFAULTS[name], *decls, help=help)


def simulate_command(
    trace: str = TraceOpt, fmt: str = FormatOpt, num_requests: int = NumRequestsOpt, request_rate: float = RateOpt,
    model: str = typer.Option("llama3-8b", "--model", "-m", help="Model catalog id or YAML/JSON file."),
    node: str = typer.Option(None, "--node", "-n", help="Node catalog id or file (default dgx-h100)."),
    gpu: str = typer.Option(None, "--gpu", help="GPU catalog id (a node of that GPU), instead of --node."),
    tp: int = typer.Option(2, "--tp", help="Tensor-parallel degree of one replica."),
    precision: str = typer.Option("fp8", "--precision", "-p", help="Weights: fp16, bf16, fp8, int8, int4, fp4."),
    kv_precision: str = typer.Option(None, "--kv-precision", help="KV cache precision (default by weights)."),
    replicas: int = policy_option("replicas", "--replicas", help="Fixed fleet size (initial size with --autoscale)."),
    router: str = policy_option("router", "--router", help=f"Router: {', '.join(fleet.ROUTERS)}."),
    autoscale: bool = policy_option("autoscale", "--autoscale", help="Scale replicas on a target metric."),
    min_replicas: int = policy_option("min_replicas", "--min-replicas", help="Autoscaling: warm minimum."),
    max_replicas: int = policy_option("max_replicas", "--max-replicas",
                                help=f"Autoscaling: maximum (at most {fleet.MAX_REPLICAS})."),
    target_metric: str = policy_option("target_metric", "--target-metric",
                                 help=f"Autoscaling metric: {', '.join(fleet.TARGETS)}."),
    target_value: float = policy_option("target_value", "--target-value", help="Outstanding requests per replica, or "
                                  "busy fraction."),
    scale_interval_s: float = policy_option("scale_interval_s", "--scale-interval-s", help="Autoscaler period, s."),
    scale_down_delay_s: float = policy_option("scale_down_delay_s", "--scale-down-delay-s",
                                        help="Scale-down stabilisation, s."),
    weights_from: str = policy_option("weights_from", "--weights-from",
                                help=f"Cold start path: {', '.join(fleet.WEIGHT_PATHS)}."),
    cold_start_s: float = policy_option("cold_start_s", "--cold-start-s", help="Override the modelled cold start, s."),
    max_queue: int = policy_option("max_queue", "--max-queue", help="Admission control: reject when a replica queues N."),
    max_concurrency: int = policy_option("max_concurrency", "--max-concurrency",
                                   help="Fleet-wide cap on requests in flight."),
    batching: str = policy_option("batching", "--batching", help="continuous or static."),
    chunked: bool = policy_option("chunked_prefill", "--chunked-prefill/--no-chunked-prefill",
                            help="Split prompts over iterations."),
    disaggregated: bool = policy_option("disaggregated", "--disaggregated", help="Separate prefill and decode pools, "
                                  "compared with co-located serving on as many GPUs."),
    prefill_replicas: int = policy_option("prefill_replicas", "--prefill-replicas", help="Disaggregated: prefill replicas."),
    decode_replicas: int = policy_option("decode_replicas", "--decode-replicas", help="Disaggregated: decode replicas."),
    kv_path: str = policy_option("kv_path", "--kv-path", help=f"Disaggregated KV transfer: {', '.join(fleet.KV_PATHS)}."),
    slo_ttft_ms: float = typer.Option(None, "--slo-ttft-ms", help="TTFT SLO, ms (for attainment)."),
    slo_tpot_ms: float = typer.Option(None, "--slo-tpot-ms", help="TPOT SLO, ms (for attainment)."),
    usd_per_gpu_hour: float = typer.Option(None, "--usd-per-gpu-hour", help="Override the GPU-hour price."),
    windows: bool = typer.Option(True, "--windows/--no-windows", help="Print the per-window table."),
    save_result: Path = typer.Option(None, "--save-result", help="Write the JSON result (vLLM keys) to a file."),
    duration_s: float = DurationOpt, peak_to_mean: float = PeakOpt, burst_fraction: float = BurstFracOpt,
    burstiness: float = BurstinessOpt, period_s: float = PeriodOpt, input_len: int = InLenOpt,
    output_len: int = OutLenOpt, length_cv: float = CvOpt, prefix_groups: int = GroupsOpt,
    prefix_tokens: int = PrefixOpt, seed: int = SeedOpt, window_s: float = WindowOpt,
    calibration: str = typer.Option(None, "--calibration", help="Calibration file (infer overrides)."),
    json_out: bool = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables."),
) -> None:
    """Serve a request trace with a fleet: router, autoscaling, cold starts, admission control,
    prefill/decode disaggregation; vLLM-style latency metrics, SLO attainment and cost per window."""
    from clustertwin.infer import FleetPolicy, simulate_fleet

    with option_names(simulate_command):  # validate everything before printing anything
        tr = load_trace(trace, fmt, num_requests, request_rate, duration_s, peak_to_mean, burst_fraction, burstiness,
                        period_s, input_len, output_len, length_cv, prefix_groups, prefix_tokens, seed, window_s)
        dep = _deployment(model, node, gpu, tp, precision, kv_precision, calibration)
        pol = FleetPolicy(replicas=replicas, router=router, autoscale=autoscale, min_replicas=min_replicas,
                          max_replicas=max_replicas, target_metric=target_metric, target_value=target_value,
                          scale_interval_s=scale_interval_s, scale_down_delay_s=scale_down_delay_s,
                          weights_from=weights_from, cold_start_s=cold_start_s, max_queue=max_queue,
                          max_concurrency=max_concurrency, batching=batching, chunked_prefill=chunked,
                          disaggregated=disaggregated, prefill_replicas=prefill_replicas,
                          decode_replicas=decode_replicas, kv_path=kv_path)
        kw = {"slo_ttft_ms": slo_ttft_ms, "slo_tpot_ms": slo_tpot_ms, "window_s": window_s,
              "usd_per_gpu_hour": usd_per_gpu_hour, "request_rate": request_rate}
        res = simulate_fleet(dep, tr, pol, **kw)
        colo = None
        if disaggregated:
            from dataclasses import replace

            colo = simulate_fleet(dep, tr, replace(pol, disaggregated=False, replicas=prefill_replicas + decode_replicas),
                                  **kw)
    out = {**res.to_dict(), "model_id": dep.model.id or dep.model.name, "tp": tp, "precision": precision,
           "gpu": dep.gpu.id or dep.gpu.name}
    if colo is not None:
        out["colocated"] = {k: v for k, v in colo.to_dict().items() if k != "windows"}
    if save_result is not None:
        try:
            save_result.write_text(json.dumps(_clean(out), indent=2))
        except OSError as e:
            raise SpecError(f"cannot write {save_result}: {e.strerror}") from None
    report_trace(tr)
    if json_out:
        print_json(out)
        return
    console.print(f"trace: {tr.report.summary()}; {tr.stats()['mean_rate']:.2f} req/s mean, peak-to-mean "
                  f"{tr.peak_to_mean(window_s):.2f} over {window_s:g} s windows", markup=False, highlight=False)
    m = res.metrics
    title = (f"infer simulate: {out['model_id']} tp{tp} {precision} on {out['gpu']}, "
             + (f"{prefill_replicas} prefill + {decode_replicas} decode replicas ({kv_path} KV)" if disaggregated
                else f"{'autoscaled' if autoscale else replicas} replica{'' if replicas == 1 and not autoscale else 's'}, {router}")
             + (f", cold start {res.info['cold_start_s']:.0f} s" if autoscale else ""))
    if colo is None:
        console.print(table(title, ["metric", "value"], _summary_rows(m, res.info)))
    else:
        a, b = _summary_rows(m, res.info), _summary_rows(colo.metrics, colo.info)
        console.print(table(title, ["metric", "disaggregated", "co-located"],
                            [[x[0], x[1], y[1]] for x, y in zip(a, b, strict=True)]))
        console.print(f"KV transfer mean {res.info['kv_transfer_ms_mean']:.2f} ms per request")
    if windows:
        console.print(_windows_table(res.windows, window_s))


def _windows_table(windows: list[dict[str, Any]], window_s: float):
    """Per-window rows, formatted to stay whole at 80 columns (every figure is in ``--json``)."""
    from rich import box
    from rich.table import Table

    def f(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    t = Table(title=f"per {window_s:g} s window (latencies: p99 ms)", title_justify="left", box=box.SIMPLE_HEAD,
              padding=(0, 0), pad_edge=False)
    for i, c in enumerate(["start s", "req", "repl", "busy", "act", "TTFT", "TPOT", "ITL", "E2EL", "SLO", "USD"]):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=True)
    for w in windows:
        t.add_row(f(w["start_s"], ",.0f"), f(w["requests"], ","), f(w["replicas"], ".1f"),
                  f(w["gpu_busy_fraction"], ".2f"), f(w["gpu_active_fraction"], ".2f"), f(w["p99_ttft_ms"], ",.0f"),
                  f(w["p99_tpot_ms"], ".0f"), f(w["p99_itl_ms"], ".0f"), f(w["p99_e2el_ms"], ",.0f"),
                  f(w["slo_attainment"], ".2f"), f(w["cost_usd"], ".2f"))
    return t


def _clean(obj: Any) -> Any:
    from clustertwin.cli.common import jsonable

    return jsonable(obj)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_command)
