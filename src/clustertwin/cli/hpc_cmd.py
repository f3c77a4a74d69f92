"""``clustertwin hpc estimate|compare``: FP64 science workloads (HPL, HPCG, halo-exchange stencil) on a
cluster, and the FP64-work-per-dollar comparison of GPU types at one budget."""

from __future__ import annotations

from typing import Any

import typer

from clustertwin.cli.common import ClusterOpt, JsonOpt, console, fmt, load_cluster, print_json, table
from clustertwin.errors import SpecError
from clustertwin.facility.cost import price_note
from clustertwin.hpc.compare import CompareResult, compare
from clustertwin.hpc.estimate import run
from clustertwin.hpc.workloads import KINDS, load_workload, workload_error
from clustertwin.plan import plan

hpc_app = typer.Typer(help="Science computing (FP64): HPL, HPCG, halo-exchange stencils; GPU choice per dollar.",
                      no_args_is_help=True)

WorkloadArg = typer.Argument(..., metavar="WORKLOAD",
                             help=f"{', '.join(KINDS)} (defaults) or a workload YAML/JSON file.")
GpusOpt = typer.Option(None, "--gpus", help="GPUs that run the workload (default: all).")
REFERENCE = "l40s-8"
"""The node every comparison is also expressed against (the FP64-weak part of the course's example)."""


def _with_gpus(workload: Any, gpus: int | None) -> Any:
    if gpus is None:
        return workload
    if gpus < 1:
        raise SpecError(f"--gpus must be >= 1 (got {gpus})")
    return workload.model_copy(update={"gpus": gpus})


def _rows(d: dict[str, Any]) -> list[list[Any]]:
    skip = {"breakdown", "device", "kind"}
    rows = [[k, v] for k, v in d.items() if k not in skip and not isinstance(v, dict | list)]
    for k, v in (d.get("device") or {}).items():
        rows.append([f"device {k}", v])
    for k, v in (d.get("breakdown") or {}).items():
        if not isinstance(v, dict | list):
            rows.append([f"  {k}", v])
    return rows


@hpc_app.command("estimate")
def estimate_command(workload: str = WorkloadArg, cluster: str = ClusterOpt, gpus: int | None = GpusOpt,
                     json_out: bool = JsonOpt) -> None:
    """Predict an FP64 workload on a cluster, with its breakdown (HPL: Rmax, Rpeak, power; HPCG; stencil)."""
    c = load_cluster(cluster)
    w = _with_gpus(load_workload(workload), gpus)
    try:
        res = run(c, w)
    except SpecError as e:  # name the workload file (or --gpus) the offending value came from
        raise workload_error(e, workload, ("gpus",) if gpus is not None else ()) from None
    cost = plan(c).facility.capex
    out = {**res.to_dict(), "cluster": c.name or c.id, "price_note": price_note(cost)}
    if json_out:
        print_json(out)
        return
    console.print(table(f"hpc estimate: {w.kind} on {c.name or c.id} ({res.detail.gpus} GPUs)",
                        ["quantity", "value"], _rows(res.to_dict())))
    console.print(f"cluster capex ${cost.total_usd:,.0f} ({price_note(cost)})", highlight=False)


def _render_compare(res: CompareResult, title: str) -> None:
    best = res.rows[0] if res.rows else None
    rows = []
    for i, r in enumerate(res.rows, 1):
        rel = best.result.tflops / r.result.tflops if best else None
        rows.append([i, r.node, r.gpus, f"${r.spent_usd:,.0f}", r.price_confidence, r.result.tflops,
                     r.tflops_per_musd, r.gflops_per_w, f"{rel:.1f}x" if rel else "-", r.reason])
    console.print(table(title, ["#", "node", "GPUs", "spent", "price", "FP64 TFLOP/s", "TFLOP/s per $M",
                                "GFLOP/s per W", "best is", "why"], rows))
    ref = next((r for r in res.rows if r.node == REFERENCE), None)
    if best and ref and best.node != ref.node:
        console.print(f"{best.node} ({best.gpu}) gives {best.result.tflops / ref.result.tflops:.1f}x the FP64 work "
                      f"of {ref.node} ({ref.gpu}) for the same budget "
                      f"({best.gflops_per_w / ref.gflops_per_w:.1f}x per watt).", highlight=False)
    est = sorted({r.node for r in res.rows if r.price_confidence == "estimate"})
    if est:
        console.print(f"prices are estimates for: {', '.join(est)}; network prices are estimates for every row "
                      f"(storage and facility build-out are outside the budget).", highlight=False)
    for node, why in res.skipped.items():
        console.print(f"skipped {node}: {why}", highlight=False)


@hpc_app.command("compare")
def compare_command(
    workload: str = typer.Option("hpl", "--workload", "-w", help=f"{', '.join(KINDS)} or a workload file."),
    budget: float = typer.Option(..., "--budget", help="Hardware budget, USD (nodes + network)."),
    nodes: str | None = typer.Option(None, "--nodes", help="Comma-separated node catalog ids (default: all priced "
                                                           "nodes with FP64 units)."),
    fabric: str | None = typer.Option(None, "--fabric", help="Fabric catalog id for every candidate (default: "
                                                             "InfiniBand at each node's NIC rate)."),
    json_out: bool = JsonOpt,
) -> None:
    """Which GPU type and count gives the most FP64 work for a budget, per dollar and per watt, and why."""
    w = load_workload(workload)
    ids = [s.strip() for s in nodes.split(",") if s.strip()] if nodes else None
    res = compare(w, budget, ids, fabric=fabric)
    if json_out:
        print_json(res)
        return
    _render_compare(res, f"hpc compare: {w.kind}, budget ${budget:,.0f} (ranked by FP64 work)")


def register(app: typer.Typer) -> None:
    app.add_typer(hpc_app, name="hpc")


__all__ = ["fmt", "register"]
