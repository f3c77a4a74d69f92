"""``clustertwin infer estimate|size``: latency/throughput of one deployment, and the cheapest
deployment serving a request rate under TTFT/TPOT SLOs."""

from __future__ import annotations

from typing import Any

import typer

from clustertwin.cli import infer_fleet_cmd as _fleet
from clustertwin.cli.common import (
    JsonOpt,
    console,
    load_calibration,
    load_model,
    print_json,
    require_gpus,
    table,
)
from clustertwin.errors import SpecError

infer_app = typer.Typer(help="LLM inference: latency, throughput, KV cache, sizing under SLOs.",
                        no_args_is_help=True)

ModelOpt = typer.Option("llama3-8b", "--model", "-m", help="Model catalog id or YAML/JSON file.")
CalOpt = typer.Option(None, "--calibration", help="Calibration file (infer: overrides of InferParams).")
PERCENT_RANGE = (50.0, 100.0)
"""``--percentile`` and ``--attainment``, in percent: [50, 100), the sizing model's ``[0.5, 1)``
(``clustertwin.infer.sizing.size``)."""


def _node(node: str | None, gpu: str | None, gpus: int):
    from clustertwin.infer.validation import node_for

    if node is None and gpu is None:
        node = "dgx-h100"
    return node_for(node, gpu, gpus)


@infer_app.command("estimate")
def estimate_command(
    model: str = ModelOpt,
    node: str = typer.Option(None, "--node", "-n", help="Node catalog id or file (default dgx-h100)."),
    gpu: str = typer.Option(None, "--gpu", help="GPU catalog id (a node of that GPU), instead of --node."),
    gpus: int = typer.Option(None, "--gpus", help="GPUs in total (replicas = gpus / (tp x pp)); default tp x pp."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree."),
    precision: str = typer.Option("bf16", "--precision", "-p", help="Weights: fp16, bf16, fp8, int8, int4, fp4."),
    kv_precision: str = typer.Option(None, "--kv-precision", help="KV cache: bf16, fp16, fp8, int8 (default by weights)."),
    input_len: int = typer.Option(512, "--input-len", help="Prompt tokens."),
    output_len: int = typer.Option(256, "--output-len", help="Generated tokens."),
    batch: int = typer.Option(None, "--batch", help="Static batch size."),
    concurrency: int = typer.Option(None, "--concurrency", "--max-concurrency",
                                    help="Closed-loop concurrent requests (vLLM --max-concurrency)."),
    request_rate: float = typer.Option(None, "--request-rate", help="Poisson arrivals, requests/s."),
    num_requests: int = typer.Option(1000, "--num-requests",
                                     help="Requests in a --request-rate run (vLLM --num-prompts)."),
    length_cv: float = typer.Option(0.0, "--length-cv", help="Coefficient of variation of lengths (lognormal)."),
    chunked: bool = typer.Option(True, "--chunked-prefill/--no-chunked-prefill", help="Split prompts over iterations."),
    calibration: str = CalOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Latency (TTFT, TPOT) and throughput of one deployment; no load option = offline maximum throughput."""
    est = estimate_result(**{k: v for k, v in locals().items() if k != "json_out"})
    if json_out:
        print_json(est)
        return
    _print_estimate(est)


def estimate_result(*, model: str, node: str | None, gpu: str | None, gpus: int | None, tp: int, pp: int,
                    precision: str, kv_precision: str | None, input_len: int, output_len: int, batch: int | None,
                    concurrency: int | None, request_rate: float | None, num_requests: int, length_cv: float,
                    chunked: bool, calibration: str | None) -> Any:
    """The estimate ``infer estimate`` prints for its arguments (``jsonable`` of it is its ``--json``; shared
    with the web API)."""
    from clustertwin.infer import estimate

    require_gpus(gpus)
    m = load_model(model)
    nd = _node(node, gpu, gpus or tp * pp)
    return estimate(m, nd, gpus=gpus, tp=tp, pp=pp, precision=precision, kv_precision=kv_precision,
                    input_len=input_len, output_len=output_len, batch=batch, concurrency=concurrency,
                    request_rate=request_rate, num_requests=num_requests, length_cv=length_cv,
                    chunked_prefill=chunked, calibration=load_calibration(calibration))


def _print_estimate(est: Any) -> None:
    rows = [
        ["mode", est.mode], ["deployment", f"{est.replicas} x tp{est.tp} pp{est.pp} {est.gpu} ({est.gpus} GPUs)"],
        ["precision (weights / KV)", f"{est.precision} / {est.kv_precision}"],
        ["batch per replica (mean / simulated max)",
         f"{est.batch:,.1f} / {est.simulated_max_batch if est.simulated_max_batch is not None else '-'}"],
        ["KV-cache batch limit per replica", est.max_batch],
        ["output tokens/s", est.output_tokens_per_s], ["output tokens/s per GPU", est.output_tokens_per_s_per_gpu],
        ["total tokens/s", est.throughput_tokens_per_s], ["requests/s", est.request_throughput_per_s],
        ["TTFT mean ms", est.ttft_ms], ["TTFT p99 ms", est.ttft_ms_p99],
        ["TPOT mean ms", est.tpot_ms], ["TPOT p99 ms", est.tpot_ms_p99], ["bound", est.bound],
        ["weights GiB/GPU", est.memory["weights_gib"]], ["KV budget GiB/GPU", est.memory["kv_budget_gib"]],
        ["KV capacity tokens/replica", est.memory["kv_capacity_tokens"]],
    ]
    console.print(table(f"infer estimate: {est.model}, {est.input_len} in / {est.output_len} out",
                        ["quantity", "value"], rows))


@infer_app.command("size")
def size_command(
    request_rate: float = typer.Option(None, "--request-rate", help="Requests per second to serve; with --trace, "
                                       "the mean rate the trace's times are rescaled to (default: the trace's)."),
    input_len: int = typer.Option(None, "--input-len", help="Prompt tokens (synthetic trace: mean)."),
    output_len: int = typer.Option(None, "--output-len", help="Generated tokens (synthetic trace: mean)."),
    slo_ttft_ms: float = typer.Option(..., "--slo-ttft-ms", help="TTFT SLO at the percentile, ms."),
    slo_tpot_ms: float = typer.Option(None, "--slo-tpot-ms", help="TPOT SLO at the percentile, ms "
                                      "(optional with --trace)."),
    model: str = ModelOpt,
    node: list[str] = typer.Option(["dgx-h100"], "--node", "-n", help="Node types to consider (repeatable)."),
    tp: list[int] = typer.Option([], "--tp", help="TP degrees to consider (repeatable; default 1,2,4,8)."),
    precision: list[str] = typer.Option(["bf16", "fp8"], "--precision", "-p", help="Weight precisions (repeatable)."),
    percentile: float = typer.Option(90.0, "--percentile", help=f"SLO percentile, in [{PERCENT_RANGE[0]:g}, "
                                     f"{PERCENT_RANGE[1]:g}); with --trace the default attainment is 99."),
    disaggregated: bool = typer.Option(False, "--disaggregated", help="Separate prefill and decode pools."),
    usd_per_gpu_hour: float = typer.Option(None, "--usd-per-gpu-hour", help="Override the GPU-hour price."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check the winner with the simulator."),
    trace: str = _fleet.TraceOpt, fmt: str = _fleet.FormatOpt, num_requests: int = _fleet.NumRequestsOpt,
    attainment: float = typer.Option(None, "--attainment", help="With --trace: share of requests (%) that "
                                     f"must meet the SLOs, in [{PERCENT_RANGE[0]:g}, {PERCENT_RANGE[1]:g}) "
                                     "(default 99)."),
    router: str = _fleet.policy_option("router", "--router", help=f"With --trace: {', '.join(_fleet.fleet.ROUTERS)}."),
    batching: str = _fleet.policy_option("batching", "--batching", help="With --trace: continuous or static."),
    weights_from: str = _fleet.policy_option("weights_from", "--weights-from", help="With --trace: cold start path, "
                                       f"{', '.join(_fleet.fleet.WEIGHT_PATHS)}."),
    autoscale: bool = typer.Option(True, "--autoscale/--no-autoscale", help="With --trace: also size an "
                                   "autoscaled policy."),
    duration_s: float = _fleet.DurationOpt, peak_to_mean: float = _fleet.PeakOpt,
    burst_fraction: float = _fleet.BurstFracOpt, burstiness: float = _fleet.BurstinessOpt,
    period_s: float = _fleet.PeriodOpt, length_cv: float = _fleet.CvOpt, prefix_groups: int = _fleet.GroupsOpt,
    prefix_tokens: int = _fleet.PrefixOpt, seed: int = _fleet.SeedOpt, window_s: float = _fleet.WindowOpt,
    calibration: str = CalOpt,
    json_out: bool = JsonOpt,
) -> None:
    """GPUs, TP and precision that serve QPS within the TTFT/TPOT SLOs at least cost; cost per 1M tokens."""
    m, nodes = size_inputs(model, node, percentile)
    if trace is not None:
        if disaggregated:
            raise SpecError("--trace sizes for the trace's own arrivals: disaggregated pools are simulated by "
                            "'infer simulate --disaggregated'")
        with _fleet.option_names(size_command):
            tr = _fleet.load_trace(trace, fmt, num_requests, request_rate, duration_s, peak_to_mean, burst_fraction,
                                   burstiness, period_s, input_len or 1024, output_len or 256, length_cv,
                                   prefix_groups, prefix_tokens, seed, window_s)
        _size_trace(m, nodes, tr, slo_ttft_ms, slo_tpot_ms, 99.0 if attainment is None else attainment, tp,
                    precision, router, batching, weights_from, autoscale, usd_per_gpu_hour, window_s, calibration,
                    json_out)
        return
    res = size_result(m, nodes, request_rate=request_rate, input_len=input_len, output_len=output_len, slo_ttft_ms=slo_ttft_ms,
                      slo_tpot_ms=slo_tpot_ms, tp=tp, precision=precision, percentile=percentile,
                      disaggregated=disaggregated, usd_per_gpu_hour=usd_per_gpu_hour, verify=verify,
                      calibration=calibration)
    if json_out:
        print_json(res)
        return
    rows = [[c.node, c.tp, c.precision, c.replica_qps, c.replicas, c.gpus, c.usd_per_hour,
             c.usd_per_million_output_tokens, c.batch, c.ttft_ms, c.tpot_ms, "yes" if c.feasible else c.reason]
            for c in res.candidates]
    console.print(_fleet.whole_table(f"infer size: {m.id or m.name}, {request_rate:g} req/s, {input_len} in / {output_len} out, "
                        f"p{percentile:g} TTFT <= {slo_ttft_ms:g} ms, TPOT <= {slo_tpot_ms:g} ms",
                        ["node", "tp", "precision", "req/s per replica", "replicas", "GPUs", "USD/h",
                         "USD/1M out tok", "batch", "TTFT ms", "TPOT ms", "feasible"], rows))
    if res.best is None:
        console.print("no candidate meets the SLOs")
        return
    b = res.best
    console.print(f"best: {b.replicas} x tp{b.tp} {b.precision} on {b.node} = {b.gpus} GPUs, "
                  f"${b.usd_per_hour:,.2f}/h, ${b.usd_per_million_output_tokens:,.3f} per 1M output tokens")
    if res.verification:
        v = res.verification
        q = f"p{round(percentile)}"
        console.print(f"simulated check ({v['requests']} requests on one replica): TTFT {q} "
                      f"{v[f'ttft_ms_{q}']:.0f} ms, TPOT {q} {v[f'tpot_ms_{q}']:.1f} ms, "
                      f"{'meets' if v['meets_slo'] else 'MISSES'} the SLO"
                      + (f" ({v['replicas_added']} replicas added to the analytic optimum after simulation)"
                         if v.get("replicas_added") else ""))


def size_inputs(model: str, node: list[str], percentile: float) -> tuple[Any, list[Any]]:
    """The model and node specs of ``infer size``, the percentile checked first."""
    from clustertwin import specs

    if not PERCENT_RANGE[0] <= percentile < PERCENT_RANGE[1]:
        raise SpecError(f"--percentile must be in [{PERCENT_RANGE[0]:g}, {PERCENT_RANGE[1]:g})")
    return load_model(model), [specs.load(specs.NodeSpec, n, kind="node") for n in node]


def size_result(m: Any, nodes: list[Any], *, request_rate: float | None, input_len: int | None, output_len: int | None,
                slo_ttft_ms: float, slo_tpot_ms: float | None, tp: list[int], precision: list[str],
                percentile: float, disaggregated: bool, usd_per_gpu_hour: float | None, verify: bool,
                calibration: str | None) -> Any:
    """``infer size`` without a trace (``jsonable`` of it is its ``--json``; shared with the web API)."""
    from clustertwin.infer import size

    if request_rate is None or input_len is None or output_len is None or slo_tpot_ms is None:
        raise SpecError("without --trace, give --request-rate, --input-len, --output-len and --slo-tpot-ms")
    return size(m, nodes, qps=request_rate, input_len=input_len, output_len=output_len, slo_ttft_ms=slo_ttft_ms,
                slo_tpot_ms=slo_tpot_ms, tps=tp or None, precisions=precision, percentile=percentile / 100,
                disaggregated=disaggregated, usd_per_gpu_hour_override=usd_per_gpu_hour, verify=verify,
                calibration=load_calibration(calibration))


def _size_trace(m, nodes, tr, slo_ttft_ms, slo_tpot_ms, attainment, tp, precision, router, batching, weights_from,
                autoscale, usd_per_gpu_hour, window_s, calibration, json_out) -> None:
    from clustertwin.infer.sizing_trace import size_for_trace

    if not PERCENT_RANGE[0] <= attainment < PERCENT_RANGE[1]:
        raise SpecError(f"--attainment must be in [{PERCENT_RANGE[0]:g}, {PERCENT_RANGE[1]:g})")
    with _fleet.option_names(size_command):  # validate everything before printing anything
        res = size_for_trace(m, nodes, tr, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
                             attainment=attainment / 100, tps=tp or None, precisions=precision, router=router,
                             batching=batching, weights_from=weights_from, autoscale=autoscale,
                             usd_per_gpu_hour_override=usd_per_gpu_hour, window_s=window_s,
                             calibration=load_calibration(calibration))
    _fleet.report_trace(tr)
    if json_out:
        print_json(res)
        return
    st = res.trace
    slo = f"TTFT <= {slo_ttft_ms:g} ms" + (f", TPOT <= {slo_tpot_ms:g} ms" if slo_tpot_ms else "")
    console.print(f"trace: {st['requests']:,} requests over {st['duration_s']:,.0f} s, {st['mean_rate']:.2f} req/s "
                  f"mean, peak-to-mean {st['peak_to_mean_60s']:.2f} (60 s windows); mean {st['input_len']['mean']:,.0f} "
                  f"in / {st['output_len']['mean']:,.0f} out", markup=False, highlight=False)
    fleets = [(label, c) for label, c in (("sized for the mean", res.mean_sized), ("cheapest fixed", res.fixed),
                                          ("cheapest autoscaled", res.autoscaled)) if c is not None]

    def policy(c) -> str:
        if c.policy.get("autoscale"):
            return f"min {c.policy['min_replicas']}, {c.policy['target_value']:g}/replica"
        return f"{c.replicas} replica" + ("s" if c.replicas != 1 else "")

    rows = [["deployment"] + [f"tp{c.tp} {c.precision}" for _, c in fleets],
            ["policy"] + [policy(c) for _, c in fleets],
            ["mean GPUs"] + [c.metrics["mean_replicas"] * c.tp for _, c in fleets],
            ["USD/h"] + [c.usd_per_hour for _, c in fleets],
            ["TTFT p99 ms"] + [c.metrics["p99_ttft_ms"] for _, c in fleets],
            ["TPOT p99 ms"] + [c.metrics["p99_tpot_ms"] for _, c in fleets],
            ["SLO attainment"] + [c.slo_attainment for _, c in fleets],
            ["headroom (capacity / mean)"] + [c.headroom for _, c in fleets],
            ["GPU busy fraction"] + [c.metrics["gpu_busy_fraction"] for _, c in fleets],
            ["GPU active fraction"] + [c.metrics["gpu_active_fraction"] for _, c in fleets]]
    if fleets:
        console.print(table(f"infer size --trace: {m.id or m.name} on {fleets[0][1].node}, {slo}, "
                            f"{attainment:g}% of requests", ["fleet"] + [label for label, _ in fleets], rows))
    if res.fixed is None:
        console.print("no candidate meets the SLOs")
    skipped = [c for c in res.candidates if c.get("reason")]
    for c in skipped:
        console.print(f"  tp{c['tp']} {c['precision']} {c['node']}: {c['reason']}", markup=False, highlight=False)
    console.print(f"{res.simulations} fleet simulations", markup=False, highlight=False)


_fleet.register(infer_app)


def register(app: typer.Typer) -> None:
    app.add_typer(infer_app, name="infer")
