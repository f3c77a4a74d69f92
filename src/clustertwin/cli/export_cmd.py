"""``clustertwin export chakra``: one predicted training step as MLCommons Chakra execution traces (one
``.et`` per rank) plus the communicator groups ASTRA-sim 2.0 reads (:mod:`clustertwin.deploy.chakra`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

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
    DatasetOpt,
    GlobalBatchOpt,
    LayoutOpts,
    PlacementOpt,
    PrecOpt,
    SeqOpt,
    StackOpt,
    command_args,
    layout_from_params,
    layout_options,
    resolve_layout,
)
from clustertwin.errors import SpecError

export_app = typer.Typer(help="Export a predicted step for other tools.", no_args_is_help=True)


@export_app.command("chakra")
@layout_options()
def chakra_command(
    cluster: str = ClusterOpt,
    model: str = typer.Option("llama3-8b", "--model", "-m", help="Model catalog id or YAML/JSON file."),
    gpus: int = typer.Option(None, "--gpus", "-g", help="GPUs to use (default: the whole cluster)."),
    global_batch: int = GlobalBatchOpt,
    seq_len: int = SeqOpt,
    layout: dict[str, Any] = LayoutOpts,
    precision: str = PrecOpt,
    stack: str = StackOpt,
    placement: str = PlacementOpt,
    dataset: str = DatasetOpt,
    calibration: str = typer.Option(None, "--calibration", help="Calibration file (train: overrides of TrainParams)."),
    force: bool = ForceCalOpt,
    out: str = typer.Option(..., "--out", help="Folder to write PREFIX.RANK.et and PREFIX.json into."),
    prefix: str = typer.Option("workload", "--prefix", help="File name prefix (ASTRA-sim's workload path)."),
    ranks: int = typer.Option(64, "--ranks", help="Most ranks to write; above it DP replicas are dropped."),
    json_out: bool = JsonOpt,
) -> None:
    """Write one predicted training step as Chakra execution traces and ASTRA-sim communicator groups."""
    res = chakra_result(**command_args(locals(), "json_out"))
    if json_out:
        print_json(asdict(res))
        return
    rows: list[list[Any]] = [["folder", res.out_dir], ["files", f"{res.prefix}.0.et to {res.prefix}.{res.ranks - 1}.et"
                                                                 f" + {res.prefix}.json"],
                             ["ranks written", res.ranks], ["DP modelled | exported", f"{res.dp_modelled} | {res.dp_exported}"],
                             ["communicator groups", res.comm_groups], ["bytes written", res.bytes_written]]
    console.print(table("Chakra execution traces", ["quantity", "value"], rows))
    kinds = sorted({k for c in res.nodes.values() for k in c})
    shown = sorted({0, res.ranks - 1})
    console.print(table("nodes per rank", ["node", *[f"rank {r}" for r in shown]],
                        [[k, *[res.nodes[r].get(k, 0) for r in shown]] for k in kinds]))


def chakra_result(*, cluster: str, model: str, gpus: int | None, global_batch: int, seq_len: int | None,
                  precision: str, stack: str, placement: str, dataset: str, calibration: str | None, force: bool,
                  out: str, prefix: str, ranks: int, **layout: Any) -> Any:
    """The :class:`~clustertwin.deploy.chakra.ChakraExport` of ``export chakra``'s arguments."""
    from clustertwin.cli.train_run import path_inputs, seq_model
    from clustertwin.deploy.chakra import export_chakra
    from clustertwin.train import estimate

    require_gpus(gpus)
    if ranks < 1:
        raise SpecError(f"--ranks must be >= 1 (got {ranks})")
    c = load_cluster(cluster)
    m = seq_model(model, seq_len)
    cal = load_calibration(calibration, c, force)
    fields = layout_from_params(layout)
    if fields.get("pipeline_layout"):
        raise SpecError("export chakra: --pipeline-layout is not supported (use --first/--last-stage-layers)")
    par = resolve_layout(fields, c, m, gpus=gpus or c.total_gpus, global_batch=global_batch, precision=precision,
                         stack=stack, calibration=cal)
    where = path_inputs(placement, dataset, c.nodes)
    e = estimate(m, c, par, calibration=cal, **where)
    return export_chakra(m, c, par, e, out, prefix=prefix, max_ranks=ranks, calibration=cal,
                         placement=where["placement"])


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
