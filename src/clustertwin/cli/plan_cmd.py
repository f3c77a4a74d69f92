"""``clustertwin plan [--cluster CLUSTER] [--compare OTHER ...] [--json]``: bill of materials, peak compute, memory,
network, storage, power, cooling and cost of a cluster, or several clusters side by side."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from clustertwin.cli.aliases import deprecated
from clustertwin.cli.common import (
    DEFAULT_CLUSTER,
    ClusterOpt,
    JsonOpt,
    console,
    load_cluster,
    print_json,
    table,
)
from clustertwin.cli.terminal import styled
from clustertwin.errors import SpecError
from clustertwin.plan import UNNAMED, Plan, plan
from clustertwin.plan_rows import SECTIONS, plan_rows
from clustertwin.specs import ClusterSpec
from clustertwin.specs.loading import build


def _render(plans: list[Plan]) -> None:
    all_rows = [plan_rows(p) for p in plans]
    for section in SECTIONS:
        labels: list[str] = []
        values: list[dict[str, Any]] = []
        for rows in all_rows:
            values.append(dict(rows[section]))
            at = 0  # a label only one plan has goes right after the label it follows there
            for label, _ in rows[section]:
                if label in labels:
                    at = labels.index(label) + 1
                else:
                    labels.insert(at, label)
                    at += 1
        body = [[label, *[v.get(label) for v in values]] for label in labels]
        columns = [section, *[p.name for p in plans]]
        console.print(table(section, columns, body))
    for p in plans:
        for w in p.warnings:
            console.print(styled(("warning", "yellow"), f" ({p.name}): {w}"), highlight=False)
    console.print("Prices and facility figures are estimates; each carries its source in --json output.",
                  style="dim")


def _named(p: Plan, ref: str) -> Plan:
    """Name an unnamed cluster after its file (``clusters/a.yaml`` -> ``a``) for column headers."""
    if p.name != UNNAMED:
        return p
    return replace(p, name=Path(ref).stem)


def with_fabric(spec: ClusterSpec, fabric: str) -> ClusterSpec:
    """``spec`` with its scale-out fabric replaced by catalog fabric ``fabric`` (the switch then defaults to the
    fabric's own unless the network named one of that fabric's kind); every other field as given."""
    net = spec.network
    keep = {k: net.model_dump(mode="python")[k] for k in net.model_fields_set if k not in ("fabric", "switch")}
    data = spec.model_dump(mode="python")
    data["network"] = {**keep, "fabric": fabric}
    out = build(ClusterSpec, data, prefix=("--fabric",))
    return out.model_copy(update={"name": f"{spec.name or spec.id or 'cluster'} + {fabric}"})


def plan_command(
    old_cluster: str | None = typer.Argument(None, hidden=True, metavar="CLUSTER",
                                             help="Old spelling of --cluster (deprecated)."),
    cluster: str = ClusterOpt,
    compare: list[str] | None = typer.Option(None, "--compare",
                                             help="Another cluster to show side by side (repeat for more)."),
    fabric: list[str] | None = typer.Option(None, "--fabric",
                                            help="Show the (first) cluster with this catalog fabric instead, side "
                                                 "by side (repeat to compare fabrics)."),
    json_out: bool = JsonOpt,
) -> None:
    """Bill of materials, peak compute, memory, network, storage, power, cooling and cost."""
    if old_cluster is not None:
        if cluster != DEFAULT_CLUSTER:
            raise SpecError("give the cluster once: --cluster (the positional CLUSTER is its old spelling)")
        cluster = old_cluster
        deprecated("plan CLUSTER", "plan --cluster CLUSTER")
    plans = plans_of(cluster, compare, fabric)
    if json_out:
        print_json(plan_json(plans))
        return
    _render(plans)


def plans_of(cluster: str, compare: list[str] | None, fabric: list[str] | None) -> list[Plan]:
    """The plans ``clustertwin plan`` shows for its arguments (shared with the web API)."""
    refs = [cluster, *(compare or [])]
    specs = [load_cluster(ref) for ref in refs]  # every input is validated before any work
    plans = [_named(plan(spec), ref) for spec, ref in zip(specs, refs, strict=True)]
    return plans + [plan(with_fabric(specs[0], f)) for f in fabric or []]


def plan_json(plans: list[Plan]) -> dict[str, Any]:
    """``clustertwin plan --json`` of :func:`plans_of`."""
    return plans[0].to_dict() if len(plans) == 1 else {"compare": [p.to_dict() for p in plans]}


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
