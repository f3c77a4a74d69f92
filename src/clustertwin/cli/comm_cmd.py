"""``clustertwin comm OP``: an nccl-tests-style table of predicted collective performance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import typer

from clustertwin.cli.common import (
    ClusterOpt,
    ForceCalOpt,
    JsonOpt,
    console,
    load_calibration,
    load_cluster,
    print_json,
    require_gpus,
    table,
)
from clustertwin.cli.layout_options import (
    LayoutOpts,
    PrecOpt,
    SeqOpt,
    StackOpt,
    layout_options,
)
from clustertwin.comm import OPS, collective, nodes_placement
from clustertwin.comm.nccl_tests import fit, format_log, read_logs
from clustertwin.comm.placement import parse_index_list
from clustertwin.errors import SpecError
from clustertwin.ops.calibration.calibrate import write_calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.units import human_bytes, parse_size

FLOAT_BYTES = 4
"""nccl-tests' default data type is float (4 bytes)."""
MAX_SIZES = 4096
"""Upper bound on rows of one sweep (guards against a step factor of ~1)."""


def sweep_sizes(min_bytes: int, max_bytes: int, step_factor: float) -> np.ndarray:
    """nccl-tests ``-b MIN -e MAX -f FACTOR`` sizes: MIN, MIN x F, ... <= MAX, rounded down to whole floats."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise SpecError(f"need 1 <= --min-bytes <= --max-bytes (got {min_bytes} and {max_bytes})")
    if step_factor <= 1.0:
        raise SpecError(f"--step-factor must be > 1 (got {step_factor})")
    count = int(np.floor(np.log(max_bytes / min_bytes) / np.log(step_factor) + 1e-9)) + 1
    if count > MAX_SIZES:
        raise SpecError(f"{count} sizes requested; at most {MAX_SIZES} (raise --step-factor)")
    sizes = min_bytes * step_factor ** np.arange(count)
    sizes = np.maximum(np.floor(sizes / FLOAT_BYTES) * FLOAT_BYTES, FLOAT_BYTES)
    return np.unique(sizes)


def read_placement(value: str, cluster: ClusterSpec, ranks_per_node: int | None) -> np.ndarray:
    """GPU indices of ``--placement``: a file or an inline list of inclusive ranges (``0-7,64-71``).

    A file holds the same list (commas, spaces or newlines between entries). A leading ``nodes:`` lists
    node indices instead; each contributes its local GPUs ``0 .. ranks_per_node-1`` (default: all).
    Ranges are checked against the cluster before any index is listed (:func:`parse_index_list`); an
    error names the file, or ``--placement`` for an inline list."""
    try:
        is_file = len(value) <= 4096 and Path(value).is_file()
    except OSError:  # a long inline list is no file name
        is_file = False
    text = (Path(value).read_text() if is_file else value).strip()
    try:
        if text.startswith("nodes:"):
            nodes = parse_index_list(text[len("nodes:"):], cluster.nodes, "node")
            rpn = cluster.node.gpus if ranks_per_node is None else ranks_per_node
            return nodes_placement(cluster, nodes, rpn)
        return parse_index_list(text, cluster.total_gpus, "GPU")
    except SpecError as e:
        if is_file:
            raise SpecError(e.message, file=value) from None
        raise SpecError(e.message, path=("--placement",)) from None


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def comm_command(
    op: str = typer.Argument(..., help=f"Collective: {', '.join(OPS)}."),
    cluster: str = ClusterOpt,
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs in the group (default: all)."),
    ranks_per_node: int | None = typer.Option(None, "--ranks-per-node",
                                              help="Group members per node (default: min(gpus, GPUs/node))."),
    min_bytes: str = typer.Option("8", "--min-bytes", "-b", help="Smallest size (8, 64K, 8M, 8G)."),
    max_bytes: str = typer.Option("8G", "--max-bytes", "-e", help="Largest size."),
    step_factor: float = typer.Option(2.0, "--step-factor", "-f", help="Size multiplier between rows."),
    algorithm: str | None = typer.Option(None, "--algorithm", "-a", help="Force an algorithm (NCCL_ALGO)."),
    protocol: str | None = typer.Option(None, "--protocol", "-p", help="Force LL, LL128 or Simple (NCCL_PROTO)."),
    calibration: Path | None = typer.Option(None, "--calibration", help="Calibration YAML/JSON file."),
    force: bool = ForceCalOpt,
    placement: str | None = typer.Option(
        None, "--placement",
        help="Explicit GPU indices: FILE or LIST of ranges, e.g. 0-7,64-71 (nodes:0,8 for whole nodes)."),
    gpus_per_process: int = typer.Option(1, "--gpus-per-process",
                                         help="GPUs one process drives (nccl-tests -g; launches are serial)."),
    cuda_graph: bool = typer.Option(False, "--cuda-graph", "-G", help="Launch from CUDA graphs (nccl-tests -G)."),
    nccl_version: str | None = typer.Option(None, "--nccl-version",
                                            help="The run's NCCL release, e.g. 2.26.2 (default: current)."),
    nvls: bool = typer.Option(True, "--nvls/--no-nvls", help="NVLink SHARP on or off (NCCL_NVLS_ENABLE)."),
    log_format: bool = typer.Option(False, "--nccl-tests-log",
                                    help="Print the prediction as an nccl-tests log (both blocks)."),
    json_out: bool = JsonOpt,
) -> None:
    """Predict time, algbw and busbw of a collective over message sizes, as nccl-tests prints them."""
    require_gpus(gpus)
    spec = load_cluster(cluster)
    where = read_placement(placement, spec, ranks_per_node) if placement is not None else None
    if gpus is not None:
        n = gpus
    else:
        n = spec.total_gpus if where is None else int(where.size)
    sizes = sweep_sizes(parse_size(min_bytes), parse_size(max_bytes), step_factor)
    res = collective(spec, op, sizes, n, ranks_per_node=ranks_per_node, algorithm=algorithm, protocol=protocol,
                     calibration=load_calibration(calibration, spec, force), placement=where,
                     gpus_per_process=gpus_per_process, cuda_graph=cuda_graph, nccl_version=nccl_version,
                     nvls=nvls)
    summary = res.placement.to_dict() if res.placement is not None else None
    time_us = np.asarray(res.time_s) * 1e6
    if log_format:
        # the model has no in-place/out-of-place difference: both blocks print the same prediction
        print(format_log(res.op, sizes, time_us, time_us, res.gpus, res.nodes, gpus_per_process, cuda_graph,
                         device=spec.node.gpu.name or spec.node.gpu.id or "GPU", nccl_version=nccl_version),
              end="")
        return
    if json_out:
        lat_us = np.asarray(res.breakdown["latency_s"]) * 1e6
        fill_us = np.asarray(res.breakdown["fill_s"]) * 1e6
        rows = [{"size_bytes": int(s), "count": int(s) // FLOAT_BYTES, "type": "float", "time_us": float(t),
                 "algbw_gb_per_s": float(a), "busbw_gb_per_s": float(b), "algorithm": str(al),
                 "protocol": str(pr), "bottleneck": str(bn), "latency_us": float(lu), "fill_us": float(fu)}
                for s, t, a, b, al, pr, bn, lu, fu in zip(sizes, time_us, res.algbw_gb_per_s, res.busbw_gb_per_s,
                                                          res.algorithm, res.protocol, res.breakdown["bottleneck"],
                                                          lat_us, fill_us, strict=True)]
        print_json({"op": res.op, "cluster": spec.name or spec.id or str(cluster), "gpus": res.gpus,
                    "nodes": res.nodes, "ranks_per_node": res.ranks_per_node, "placement": summary,
                    "rows": rows})
        return
    rows = [[str(int(s)), str(int(s) // FLOAT_BYTES), "float", f"{t:.2f}", f"{a:.2f}", f"{b:.2f}", str(al), str(pr), str(bn)]
            for s, t, a, b, al, pr, bn in zip(sizes, time_us, res.algbw_gb_per_s, res.busbw_gb_per_s,
                                              res.algorithm, res.protocol, res.breakdown["bottleneck"],
                                              strict=True)]
    placed = ""
    if res.placement is not None and res.placement.kind == "explicit":
        sp = res.placement.span
        placed = (f", GPUs {_short(res.placement.gpu_ranges)}: {sp.leaves} lea{'ves' if sp.leaves != 1 else 'f'}, "
                  f"ring fraction {sp.ring_bw_fraction:.2f}")
    title = (f"{res.op} on {res.gpus:,} GPUs ({res.nodes} node{'s' if res.nodes != 1 else ''} x "
             f"{res.ranks_per_node}{placed}) of "
             f"{spec.name or spec.id or cluster}, {human_bytes(sizes[0])} .. {human_bytes(sizes[-1])}; "
             "algbw/busbw in GB/s")
    console.print(table(title, ["size", "count", "type", "time_us", "algbw", "busbw", "algo", "proto", "bound"],
                        rows))


@layout_options()
def calibrate_command(
    logs: list[Path] = typer.Argument(..., help="nccl-tests / rccl-tests output files, or with --profile "
                                      "PyTorch profiler / Nsight Systems traces (files or folders)."),
    nccl_tests: bool = typer.Option(False, "--nccl-tests", help="The files are nccl-tests/rccl-tests logs."),
    from_profile: bool = typer.Option(False, "--profile", help="The files are profiler traces of a training run: "
                                      "fit the training model's efficiency terms (needs --model, --global-batch)."),
    cluster: str = ClusterOpt,
    output: Path = typer.Option(Path("calibration.yaml"), "--output", "-o", help="Calibration file to write."),
    fit_names: str | None = typer.Option(None, "--fit", help="Parameters to fit, comma-separated "
                                         "(default: the ones the logs or traces exercise)."),
    model: str = typer.Option(None, "--model", "-m", help="Model catalog id or YAML/JSON file (--profile)."),
    global_batch: int = typer.Option(None, "--global-batch", "-b", help="Sequences per optimizer step (--profile)."),
    seq_len: int | None = SeqOpt,
    precision: str = PrecOpt,
    layout: dict[str, Any] = LayoutOpts,
    stack: str = StackOpt,
    calibration: str = typer.Option(None, "--calibration", help="Calibration file the fit starts from "
                                    "(--profile; its other figures are kept)."),
    json_out: bool = JsonOpt,
) -> None:
    """Fit the twin's named parameters to your own measurements: the collective model to nccl-tests logs
    (--nccl-tests), or the training model's efficiency terms to profiler traces of your run (--profile);
    writes a Calibration that every command accepts with --calibration."""
    names = [n.strip() for n in fit_names.split(",") if n.strip()] if fit_names else None
    if nccl_tests and from_profile:
        raise SpecError("calibrate takes one source: --nccl-tests or --profile, not both")
    if from_profile:
        from clustertwin.cli.calibrate_profile import calibrate_from_profile

        calibrate_from_profile(logs, cluster=cluster, model=model, global_batch=global_batch, seq_len=seq_len,
                               layout=layout, precision=precision, stack=stack, calibration=calibration, fit_names=names, output=output, json_out=json_out)
        return
    if not nccl_tests:
        raise SpecError("calibrate needs a source: --nccl-tests LOG... (node bench writes its own with "
                        "--calibration-out) or --profile TRACE...")
    spec = load_cluster(cluster)
    parsed = read_logs([str(p) for p in logs])
    res = fit(spec, parsed, names)
    write_calibration(res.calibration.model_copy(update={"gpu": spec.node.gpu.id or spec.node.gpu.name}),
                      str(output))
    summary = {"output": str(output), "logs": [{"file": lg.name, "op": lg.op, "ranks": lg.ranks, "hosts": lg.hosts,
                                                 "rows": len(lg.rows), "blocks": lg.blocks,
                                                 "rows_wrong": lg.wrong_rows, "malformed": len(lg.malformed),
                                                 "malformed_by_cause": dict(lg.damage.causes),
                                                 "cuda_graph": lg.cuda_graph, "nccl_version": lg.nccl_version, "nvls": lg.nvls,
                                                 "gpus_per_process": lg.gpus_per_process} for lg in parsed],
               "comm": res.params, "timings_used": res.blocks_used,
               "median_abs_time_error_before": res.median_abs_error_before,
               "median_abs_time_error_after": res.median_abs_error_after}
    if json_out:
        print_json(summary)
        return
    rows = [[Path(lg.name).name, lg.op, str(lg.ranks), str(lg.hosts), str(len(lg.rows)), str(lg.blocks),
             str(lg.wrong_rows), str(len(lg.malformed))] for lg in parsed]
    console.print(table("nccl-tests logs", ["file", "op", "ranks", "hosts", "rows", "timings", "#wrong rows",
                                            "malformed"], rows))
    for lg in parsed:  # every line left out is named by cause, never dropped silently
        if lg.malformed:
            console.print(f"{Path(lg.name).name}: {len(lg.malformed)} malformed line(s) left out: "
                          f"{lg.damage.summary()}", markup=False, highlight=False)
    console.print(table("fitted comm parameters", ["parameter", "value"],
                        [[k, f"{v:.4g}"] for k, v in res.params.items()]))
    console.print(f"median |time error| {res.median_abs_error_before:.1%} -> {res.median_abs_error_after:.1%} "
                  f"over {res.blocks_used} timings; calibration written to {output}")


def register(app: typer.Typer) -> None:
    app.command("comm")(comm_command)
    app.command("calibrate")(calibrate_command)
