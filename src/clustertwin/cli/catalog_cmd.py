"""``clustertwin catalog [KIND] [ID]``: list and show catalog entries with their sources."""

from __future__ import annotations

import typer

from clustertwin import catalog
from clustertwin.cli.common import JsonOpt, console, fmt, print_json, table

_SUMMARY_FIELDS = {
    "gpu": ["bf16_tflops", "fp8_tflops", "fp64_tflops", "hbm_gb", "hbm_gb_per_s", "tdp_w", "price_usd",
            "price_confidence"],
    "cpu": ["cores", "memory_gb_per_s", "tdp_w"],
    "node": ["gpus", "power_kw", "price_usd", "price_confidence"],
    "fabric": ["kind", "gbit_per_s", "achievable_fraction", "sharp"],
    "switch": ["ports", "port_gbit_per_s", "power_w"],
    "storage": ["kind", "read_gb_per_s", "write_gb_per_s", "capacity_pb"],
    "ssd": ["interface", "seq_read_gb_per_s", "seq_write_gb_per_s", "rand_read_iops"],
    "model": ["layers", "hidden", "heads", "kv_heads", "vocab"],
    "cluster": ["nodes"],
}


def catalog_command(
    kind: str | None = typer.Argument(None, help="gpu, cpu, node, fabric, switch, storage, ssd, model, cluster"),
    entry_id: str | None = typer.Argument(None, metavar="ID", help="Entry id to show in full."),
    json_out: bool = JsonOpt,
) -> None:
    """List catalog entries (all kinds, or one kind) or show one entry with its source."""
    if kind is None:
        counts = {k: len(catalog.ids(k)) for k in catalog.kinds()}
        if json_out:
            print_json({k: catalog.ids(k) for k in catalog.kinds()})
            return
        console.print(table("clustertwin catalog", ["kind", "entries", "ids"],
                            [[k, n, ", ".join(catalog.ids(k))] for k, n in counts.items()]))
        return
    k = catalog.canonical_kind(kind)
    if entry_id is None:
        items = [catalog.get(k, i) for i in catalog.ids(k)]
        if json_out:
            print_json([it.model_dump(mode="json", exclude_none=True) for it in items])
            return
        fields = _SUMMARY_FIELDS.get(k, [])
        rows = [[it.id, it.name, *[getattr(it, f, None) for f in fields]] for it in items]
        console.print(table(f"{k} catalog", ["id", "name", *fields], rows))
        return
    item = catalog.get(k, entry_id)
    data = item.model_dump(mode="json", exclude_none=True)
    if json_out:
        print_json(data)
        return
    rows = [[key, _short(val)] for key, val in data.items()]
    console.print(table(f"{k} {entry_id}", ["field", "value"], rows))


def _short(v: object) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={_short(x)}" for k, x in v.items() if k not in ("source", "notes"))
    if isinstance(v, list):
        return "; ".join(_short(x) for x in v)
    return fmt(v)


def register(app: typer.Typer) -> None:
    app.command("catalog")(catalog_command)
