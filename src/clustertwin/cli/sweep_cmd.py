"""``clustertwin sweep SPACE.yaml --output results.parquet [--executor local|ray] [--address ADDR]``: evaluate
a design space, write Parquet, print the Pareto fronts of time-to-train vs cost and vs energy."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from clustertwin.cli.common import JsonOpt, check_output_path, console, err_console, fmt, print_json, table
from clustertwin.errors import SpecError
from clustertwin.facility.cost import cost_cell, sweep_price_note

EXECUTORS = ("local", "ray")

FRONT_COLUMNS = ("point_id", "model", "node", "nodes", "fabric", "topology", "precision", "layout", "checkpoint",
                 "wall_days", "cost_usd", "energy_mwh", "mfu", "price_complete")


def _front_rows(tbl, limit: int) -> list[dict]:
    return tbl.select(list(FRONT_COLUMNS)).slice(0, limit).to_pylist()


def sweep_command(
    space_file: Path = typer.Argument(..., metavar="SPACE", help="Space YAML/JSON file."),
    output: Path | None = typer.Option(None, "--output", "-o",
                                       help="Parquet file to write (default: SPACE name .parquet)."),
    executor: str = typer.Option("local", "--executor", "-e", help=f"Executor: {', '.join(EXECUTORS)}."),
    processes: int | None = typer.Option(None, "--processes", "-p",
                                         help="Worker processes (local) or CPUs of a local Ray; default all CPUs."),
    address: str | None = typer.Option(None, "--address", help="Ray cluster to use (auto, host:port, ray://...)."),
    batch_points: int | None = typer.Option(None, "--batch-points", help="Points per task (default: balanced)."),
    top: int = typer.Option(10, "--top", help="Rows of each Pareto front to print."),
    max_points: int | None = typer.Option(None, "--max-points", help="Refuse spaces evaluating more points "
                                          "than this (work cap; default sweep.space.DEFAULT_MAX_POINTS, 1,000,000)."),
    json_out: bool = JsonOpt,
) -> None:
    """Evaluate a design space (training, reliability, facility per point) and print its Pareto fronts."""
    try:  # pyarrow is an optional extra: import it only when a sweep runs
        from clustertwin.sweep import FRONTS, fronts_by, load_space, run
        from clustertwin.sweep.space import DEFAULT_MAX_POINTS
        from clustertwin.sweep.stream import ParquetStream
    except ImportError as e:
        raise SpecError(f"the sweep needs pyarrow ({e.name} is missing): pip install 'clustertwin[sweep]'") from None
    space = load_space(space_file, max_points=DEFAULT_MAX_POINTS if max_points is None else max_points)
    if executor not in EXECUTORS:
        raise SpecError(f"unknown executor '{executor}' (choose from: {', '.join(EXECUTORS)})")
    if top < 0:
        raise SpecError(f"--top must be >= 0 (got {top})")
    target = output or Path(f"{space_file.stem}.parquet")
    check_output_path(target, "--output")
    show = err_console.is_terminal and not json_out
    if getattr(space, "kind", "design") == "cluster":
        from clustertwin.cli.sweep_cluster import cluster_sweep

        cluster_sweep(space, target, executor=executor, processes=processes, address=address,
                      batch_points=batch_points, progress=_bar(show), json_out=json_out)
        return
    with Progress(TextColumn("sweep {task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err_console, disable=not show, transient=True) as bar, \
            ParquetStream(target, space.model_dump_json()) as sink:  # rows stream to disk: memory stays flat
        task = bar.add_task(space.name, total=space.size)
        result = run(space, executor, processes=processes, address=address, batch_points=batch_points,
                     progress=lambda done, total: bar.update(task, completed=done), sink=sink)
    statuses = Counter(sink.status)
    # one front per model (the stream's running fronts mix models): read back only the columns a front needs
    import pyarrow.parquet as pq

    cols = sorted({*FRONT_COLUMNS, "model", "node", "nodes", "fabric", "topology", "precision", "layout",
                   "checkpoint", "price_complete", "status", *(c for xy in FRONTS.values() for c in xy)})
    points = pq.read_table(target, columns=cols)
    by_model = {name: fronts_by(points, x, y) for name, (x, y) in FRONTS.items()}
    summary = {"space": space.name, "out": str(target), "points": result.points, "executor": result.executor,
               "workers": result.workers, "batches": result.batches, "seconds": result.seconds,
               "points_per_s": result.points_per_s, "status": dict(sorted(statuses.items())),
               "pareto": {name: [r for f in fs.values() for r in _front_rows(f, top)] for name, fs in by_model.items()},
               "pareto_by_model": {name: {m: _front_rows(f, top) for m, f in fs.items()}
                                   for name, fs in by_model.items()}}
    if json_out:
        print_json(summary)
        return
    console.print(f"{space.name}: {result.points:,} points on {result.executor} ({result.workers} worker{'s' if result.workers != 1 else ''}, "
                  f"{result.batches} batches) in {result.seconds:.1f} s = {result.points_per_s:,.0f} points/s; "
                  f"wrote {target}", highlight=False)
    console.print("status: " + ", ".join(f"{k} {v:,}" for k, v in sorted(statuses.items())), highlight=False)
    for name, (x, y) in FRONTS.items():
        for model, f in by_model[name].items():
            rows = [[r["point_id"], f"{r['model']} on {r['node']} x{r['nodes']} {r['fabric']} {r['topology']} "
                                    f"{r['precision']}",
                     r["layout"], r["checkpoint"], r["wall_days"],
                     cost_cell(r[y], r["price_complete"]) if y == "cost_usd" else r[y]] for r in _front_rows(f, top)]
            shown = f", first {fmt(top)}" if f.num_rows > top else ""
            console.print(table(f"Pareto front: {x} vs {y}, {model} ({f.num_rows} points{shown})",
                                ["point", "design", "layout", "checkpoint", x, y], rows))
    console.print(sweep_price_note(points), highlight=False)


@contextlib.contextmanager
def _bar(show: bool) -> Iterator[tuple[Progress, Callable[[str, int], Any]]]:
    """The sweep's progress bar on stderr (off when not a terminal or with --json), and its task factory."""
    with Progress(TextColumn("sweep {task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err_console, disable=not show, transient=True) as bar:
        yield bar, lambda name, total: bar.add_task(name, total=total)


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_command)
