"""``clustertwin report --cluster C --model M -b GLOBAL_BATCH [--tp ...] [--trace F] --output report.html``: one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from clustertwin.cli.common import (
    ClusterOpt,
    JsonOpt,
    echo,
    err_console,
    load_cluster,
    print_json,
)
from clustertwin.cli.layout_options import (
    GlobalBatchOpt,
    LayoutOpts,
    PrecOpt,
    SeqOpt,
    StackOpt,
    StrictLayoutOpt,
    completed_layout,
    layout_from_params,
    layout_options,
    resolve_layout,
)
from clustertwin.cli.train_run import searched_note, seq_model
from clustertwin.errors import SpecError
from clustertwin.report import InferSettings, ReportOptions, build_report, write_report
from clustertwin.report.html import DEFAULT_POLICIES


@layout_options()
def report_command(
    cluster: str = ClusterOpt,
    model: str = typer.Option("llama3-70b", "--model", "-m", help="Model catalog id or YAML/JSON file."),
    output: Path = typer.Option(Path("report.html"), "--output", "-o", help="HTML file to write."),
    global_batch: int = GlobalBatchOpt,
    seq_len: int = SeqOpt,
    precision: str = PrecOpt,
    layout: dict[str, Any] = LayoutOpts,
    stack: str = StackOpt,
    strict_layout: bool = StrictLayoutOpt,
    tokens: float = typer.Option(15e12, "--tokens", help="Training token budget for time-to-train."),
    trials: int = typer.Option(1000, "--trials", help="Monte Carlo runs of the wall-time distribution."),
    seed: int = typer.Option(0, "--seed", help="Seed of the Monte Carlo."),
    trace: Path | None = typer.Option(None, "--trace", help="Job trace: adds the scheduler comparison."),
    trace_format: str = typer.Option("swf", "--format", "-f", help="Format of --trace (one of sched "
                                     "simulate --format's)."),
    policy: list[str] = typer.Option(list(DEFAULT_POLICIES), "--policy", help="Scheduler policy to compare (repeat)."),
    infer: bool = typer.Option(True, "--infer/--no-infer", help="Include the inference serving section."),
    infer_precision: str = typer.Option("bf16", "--infer-precision", help="Inference weight precision."),
    input_len: int = typer.Option(512, "--input-len", help="Inference: prompt tokens per request."),
    output_len: int = typer.Option(256, "--output-len", help="Inference: generated tokens per request."),
    request_rate: float = typer.Option(10.0, "--request-rate", help="Inference sizing: requests/s to serve."),
    slo_ttft_ms: float = typer.Option(1000.0, "--slo-ttft-ms", help="Inference sizing: p90 TTFT SLO, ms."),
    slo_tpot_ms: float = typer.Option(50.0, "--slo-tpot-ms", help="Inference sizing: p90 TPOT SLO, ms."),
    json_out: bool = JsonOpt,
) -> None:
    """Write a self-contained HTML report: plan, scaling, breakdowns, collectives, reliability, inference,
    scheduling. The breakdowns are of the layout the layout options give (the fields not given chosen by
    search as train estimate does; --strict-layout: their literal defaults), or of the scaling sweep's best
    layout when none is given."""
    fields = layout_from_params(layout)
    spec = load_cluster(cluster)
    mdl = seq_model(model, seq_len)
    if global_batch < 1:
        raise SpecError(f"--global-batch must be >= 1 (got {global_batch})")
    if tokens <= 0:
        raise SpecError(f"--tokens must be > 0 (got {tokens})")
    if trials < 1:
        raise SpecError(f"--trials must be >= 1 (got {trials})")
    if input_len < 1 or output_len < 1:
        raise SpecError(f"--input-len and --output-len must be >= 1 (got {input_len}, {output_len})")
    if request_rate <= 0 or slo_ttft_ms <= 0 or slo_tpot_ms <= 0:
        raise SpecError("--request-rate, --slo-ttft-ms and --slo-tpot-ms must be > 0")
    if infer:  # checked before the (slow) training sections are built
        from clustertwin.errors import did_you_mean
        from clustertwin.infer.roofline import WEIGHT_PRECISIONS

        if infer_precision not in WEIGHT_PRECISIONS:
            raise SpecError(f"unsupported precision '{infer_precision}'{did_you_mean(infer_precision, WEIGHT_PRECISIONS)} "
                            f"(choose from {', '.join(WEIGHT_PRECISIONS)})", path=("--infer-precision",))
    settings = InferSettings(precision=infer_precision, input_len=input_len, output_len=output_len, qps=request_rate,
                             slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms) if infer else None
    par, chosen = None, {}
    if fields:
        par = resolve_layout(fields, spec, mdl, gpus=spec.total_gpus, global_batch=global_batch,
                             precision=precision, stack=stack, searched=not strict_layout)
        par, chosen = completed_layout(par, fields, spec, mdl, gpus=spec.total_gpus, strict=strict_layout)
    opts = ReportOptions(global_batch=global_batch, precision=precision, tokens=tokens, trials=trials, seed=seed,
                         trace=trace, trace_format=trace_format, policies=tuple(policy), infer=settings,
                         parallelism=par)
    with err_console.status("building report", spinner="dots"):
        report = build_report(spec, mdl, opts)
        path = write_report(report, output)
    summary = {"out": str(path), "bytes": path.stat().st_size, "sections": [s.id for s in report.sections],
               "figures": sum(len(s.figures) for s in report.sections), "omitted": list(report.omitted)}
    if json_out:
        print_json(summary)
        return
    if chosen:
        echo(searched_note(chosen))
    echo(f"wrote {path} ({summary['bytes'] / 1e6:.1f} MB, {len(report.sections)} sections, "
         f"{summary['figures']} plots)")
    for why in report.omitted:
        echo(f"not included: {why}")


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
