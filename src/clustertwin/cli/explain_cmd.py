"""``clustertwin explain``: storage -> network -> HBM/compute -> collectives -> scheduler for one training
workload on one cluster, each stage's capacity and demand, and the bottleneck named with numbers."""

from __future__ import annotations

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
from clustertwin.datapath import DATASETS
from clustertwin.errors import SpecError
from clustertwin.explain import explain


def explain_command(
    cluster: str = ClusterOpt,
    model: str = typer.Option("llama3-8b", "--model", "-m", help="Model catalog id or YAML/JSON file."),
    global_batch: int = typer.Option(1024, "--global-batch", "-b", help="Sequences per optimizer step."),
    gpus: int = typer.Option(None, "--gpus", "-g", help="GPUs of the job (default: the whole cluster)."),
    data: str = typer.Option("tokenized-text", "--data", help=f"Dataset preset: {', '.join(DATASETS)}."),
    storage_read: float = typer.Option(None, "--storage-read", help="Override the storage read GB/s."),
    placement: str = typer.Option("contiguous", "--placement", help="contiguous, scattered or random."),
    tp: int = typer.Option(None, "--tp", help="Tensor-parallel degree (default: layout search)."),
    pp: int = typer.Option(None, "--pp", help="Pipeline stages (with --tp: a fixed layout)."),
    json_out: bool = JsonOpt,
) -> None:
    """Walk the path of one training job and name the bottleneck."""
    from clustertwin.specs import ParallelismSpec

    require_gpus(gpus)
    c = load_cluster(cluster)
    if storage_read is not None:
        if not storage_read > 0:
            raise SpecError(f"--storage-read must be > 0 GB/s (got {storage_read})")
        c = c.model_copy(update={"storage": c.storage.model_copy(update={"read_gb_per_s": float(storage_read)})})
    if placement not in ("contiguous", "scattered", "random"):
        raise SpecError(f"--placement must be contiguous, scattered or random (got {placement!r})")
    m = load_model(model)
    par = None
    if tp is not None or pp is not None:
        n = gpus or c.total_gpus
        t, p = tp or 1, pp or 1
        if n % (t * p):
            raise SpecError(f"--gpus {n} is not divisible by tp x pp = {t * p}")
        par = ParallelismSpec(tp=t, pp=p, dp=n // (t * p), global_batch=global_batch)
    e = explain(m, c, global_batch=global_batch, gpus=gpus, parallelism=par, data=data, placement=placement)
    if json_out:
        print_json(e.to_dict())
        return
    rows = [[s.name, s.capacity, s.demand, s.unit, s.cost_s, s.detail] for s in e.stages]
    console.print(table(f"{e.model} on {e.cluster}: {e.gpus} GPUs, step {e.step_time_s:.3g} s, "
                        f"{e.tokens_per_s:,.0f} tokens/s",
                        ["stage", "capacity", "demand", "unit", "s/step", "why"], rows))
    console.print(f"bottleneck: {e.verdict}")
    for note in e.notes:
        console.print(f"note: {note}")


def register(app: typer.Typer) -> None:
    app.command("explain")(explain_command)
