"""Shared CLI helpers: loading specs from ids or files, JSON output, rich console."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from clustertwin import specs

console = Console()
err_console = Console(stderr=True)

DEFAULT_CLUSTER = "ref-1k-h100"

ClusterOpt = typer.Option(DEFAULT_CLUSTER, "--cluster", "-c", help="Cluster catalog id or YAML/JSON file.")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")


def load_cluster(ref: str | Path) -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, str(ref), kind="cluster")


def load_model(ref: str | Path) -> specs.ModelSpec:
    return specs.load(specs.ModelSpec, str(ref), kind="model")


def load_calibration(ref: str | Path | None) -> specs.Calibration | None:
    if ref is None:
        return None
    return specs.load(specs.Calibration, str(ref))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return _jsonable(obj.model_dump(mode="json"))
    if hasattr(obj, "to_dict"):
        return _jsonable(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _jsonable(obj.item())
    if isinstance(obj, Path):
        return str(obj)
    return obj


def print_json(obj: Any) -> None:
    """Print stable JSON (numpy scalars and specs converted) to stdout."""
    typer.echo(json.dumps(_jsonable(obj), indent=2))


def table(title: str | None, columns: list[str], rows: list[list[Any]], **kw: Any) -> Table:
    t = Table(title=title, title_justify="left", **kw)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[fmt(v) for v in r])
    return t


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if isinstance(v, float):
        if v == 0:
            return "0"
        a = abs(v)
        if a >= 1e5:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:,.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)
