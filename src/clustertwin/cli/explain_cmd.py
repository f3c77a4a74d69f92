"""``clustertwin explain``: storage -> network -> HBM/compute -> collectives -> scheduler for one training
workload on one cluster, each stage's capacity and demand, and the bottleneck named with numbers."""

from __future__ import annotations

import typing
from typing import Any

import typer

from clustertwin.cli.common import (
    ClusterOpt,
    JsonOpt,
    console,
    load_cluster,
    load_model,
    print_json,
    require_gpus,
    table,
)
from clustertwin.cli.layout_options import (
    DatasetOpt,
    GlobalBatchOpt,
    LayoutOpts,
    PrecOpt,
    SeqOpt,
    StackOpt,
    StrictLayoutOpt,
    command_args,
    layout_from_params,
    layout_options,
    resolve_layout,
)
from clustertwin.cli.train_run import searched_note
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.explain import explain
from clustertwin.topology.traffic import PlacementKind

PLACEMENTS = typing.get_args(PlacementKind)
"""What explain places a job on (node lists are train estimate's alone)."""


@layout_options()
def explain_command(
    cluster: str = ClusterOpt,
    model: str = typer.Option("llama3-8b", "--model", "-m", help="Model catalog id or YAML/JSON file."),
    global_batch: int = GlobalBatchOpt,
    gpus: int = typer.Option(None, "--gpus", "-g", help="GPUs of the job (default: the whole cluster)."),
    seq_len: int = SeqOpt,
    layout: dict[str, Any] = LayoutOpts,
    precision: str = PrecOpt,
    stack: str = StackOpt,
    dataset: str = DatasetOpt,
    storage_read: float = typer.Option(None, "--storage-read", help="Override the storage read GB/s."),
    placement: str = typer.Option(PLACEMENTS[0], "--placement", help=f"Job nodes: {', '.join(PLACEMENTS)}."),
    strict_layout: bool = StrictLayoutOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Walk the path of one training job and name the bottleneck. With no layout option the best layout of
    the layout search is explained; with some, the layout they describe, its other fields chosen by search
    as train estimate does (--strict-layout: their literal defaults)."""
    e, chosen = explain_result(**command_args(locals(), "json_out"))
    if json_out:
        print_json({**e.to_dict(), "searched_fields": chosen})
        return
    if chosen:
        console.print(searched_note(chosen), markup=False, highlight=False)
    rows = [[s.name, s.capacity, s.demand, s.unit, s.cost_s, s.detail] for s in e.stages]
    console.print(table(f"{e.model} on {e.cluster}: {e.gpus} GPUs, step {e.step_time_s:.3g} s, "
                        f"{e.tokens_per_s:,.0f} tokens/s",
                        ["stage", "capacity", "demand", "unit", "s/step", "why"], rows))
    console.print(f"bottleneck: {e.verdict}")
    for note in e.notes:
        console.print(f"note: {note}")


def explain_result(*, cluster: str, model: str, global_batch: int, gpus: int | None, seq_len: int | None,
                   precision: str, stack: str, dataset: str, storage_read: float | None,
                   placement: str, strict_layout: bool = False, **layout: Any) -> tuple[Any, dict[str, Any]]:
    """(the explanation ``clustertwin explain`` prints for its arguments, the layout fields the search chose);
    ``e.to_dict()`` is its ``--json``, shared with the web API."""
    args = layout
    require_gpus(gpus)
    c = load_cluster(cluster)
    if storage_read is not None:
        if not storage_read > 0:
            raise SpecError(f"--storage-read must be > 0 GB/s (got {storage_read})")
        c = c.model_copy(update={"storage": c.storage.model_copy(update={"read_gb_per_s": float(storage_read)})})
    if placement not in PLACEMENTS:
        raise SpecError(f"--placement must be one of {', '.join(PLACEMENTS)} (got {placement[:40]!r})"
                        f"{did_you_mean(placement, PLACEMENTS)}")
    m = load_model(model)
    if seq_len:
        m = m.model_copy(update={"seq_len": seq_len})
    fields = layout_from_params(args)
    par = resolve_layout(fields, c, m, gpus=gpus or c.total_gpus, global_batch=global_batch, precision=precision,
                         stack=stack, searched=not strict_layout) if fields else None
    if dataset in ("none", ""):
        raise SpecError("--dataset none: explain walks the path from storage, it needs what the job reads")
    chosen: dict[str, Any] = {}
    if par is not None and not strict_layout:
        from clustertwin.train.complete import complete_layout

        _, chosen = complete_layout(m, c, par, gpus or c.total_gpus, set(fields), placement=placement,
                                    dataset=dataset)
        par = par.model_copy(update=chosen)
    return explain(m, c, global_batch=global_batch, gpus=gpus, parallelism=par, data=dataset, placement=placement,
                   precision=precision), chosen


def register(app: typer.Typer) -> None:
    app.command("explain")(explain_command)
