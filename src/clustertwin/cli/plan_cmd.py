"""``clustertwin plan [--cluster CLUSTER | --node NODE --nodes N ...] [--compare OTHER ...] [--json]``: bill of
materials, peak compute, memory, network, storage, power, cooling and cost of a cluster, or several clusters side
by side.

The first cluster is a catalog cluster (or file), or one built from catalog parts (:func:`parts_spec`: a node,
its count, optionally another GPU, a fabric, a topology with its tiers and oversubscription, a storage system);
parts not given keep the spec's own defaults, so a cluster built from a catalog cluster's parts plans as it does."""

from __future__ import annotations

import enum
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from clustertwin.catalog import store
from clustertwin.cli.aliases import deprecated
from clustertwin.cli.common import (
    DEFAULT_CLUSTER,
    ClusterOpt,
    JsonOpt,
    console,
    literal_choices,
    load_cluster,
    print_json,
    spec_help,
    table,
)
from clustertwin.cli.option_errors import command_options
from clustertwin.cli.terminal import styled
from clustertwin.errors import SpecError
from clustertwin.plan import UNNAMED, Plan, plan
from clustertwin.plan_rows import SECTIONS, plan_rows
from clustertwin.specs import ClusterSpec, NetworkSpec
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


PART_KINDS: dict[str, str] = {"node": "node", "gpu": "gpu", "network_fabric": "fabric", "storage": "storage"}
"""Parts option -> the catalog kind of the id it takes."""
PARTS: tuple[str, ...] = ("node", "nodes", "gpu", "network_fabric", "topology", "tiers", "oversubscription", "storage")
"""The parameters of ``plan`` that build a cluster from catalog parts (:func:`parts_spec`)."""


def _option(name: str) -> str:
    """The long option of ``plan``'s parameter ``name`` (``network_fabric`` -> ``--network-fabric``)."""
    return command_options(plan_command)[name]


Topology = enum.Enum("Topology", {t: t for t in literal_choices(NetworkSpec, "topology")}, type=str)  # type: ignore[misc]
"""The topologies ``--topology`` takes: the choices of :attr:`NetworkSpec.topology`."""


def _part_id(option: str, kind: str, value: str) -> str:
    """``value`` if it is a catalog id of ``kind``, else the catalog's one-line error naming ``option`` and the
    nearest id (``--node: unknown node 'dgx-h10'; did you mean 'dgx-h100'?``)."""
    try:
        store.raw(kind, value)
    except SpecError as e:
        raise e.with_context(prefix=(option,)) from None
    return value


def parts_spec(parts: dict[str, Any]) -> ClusterSpec:
    """The cluster built from catalog parts (keys of :data:`PARTS`; None: not given). ``node`` is
    required; ``gpu`` replaces the node's GPU (its other figures, power and price included, stay the node's); the
    network options start from the network a cluster of that node gets by default (the fabric matching its NICs,
    rail-optimised), the spec's defaults fill everything else."""
    given = {k: v for k, v in parts.items() if v not in (None, [], ())}
    if "node" not in given:
        names = ", ".join(_option(k) for k in given)
        raise SpecError(f"{names}: the parts options build a cluster from catalog parts; give --node NODE too "
                        "(or --cluster alone)")
    for key, kind in PART_KINDS.items():
        if key in given:
            _part_id(_option(key), kind, given[key])
    node = given["node"]
    data: dict[str, Any] = {"node": node if "gpu" not in given else {"preset": node, "gpu": given["gpu"]}}
    data.update({k: given[k] for k in ("nodes", "storage") if k in given})
    topology = given.get("topology")
    net = {"fabric": given.get("network_fabric"), "topology": getattr(topology, "value", topology),
           "tiers": given.get("tiers"), "oversubscription": _ratios(given.get("oversubscription"))}
    net = {k: v for k, v in net.items() if v is not None}
    if net:
        default = _built(data).net
        base = default.model_dump(mode="python")
        data["network"] = {**{k: base[k] for k in default.model_fields_set}, **net}
    spec = _built(data)
    gpu = f" ({given['gpu']})" if "gpu" in given else ""
    return spec.model_copy(update={"name": f"{spec.nodes} x {node}{gpu}"})


_FIELD_PARTS = {("nodes",): "nodes", ("storage",): "storage", ("network", "fabric"): "network_fabric",
                ("network", "topology"): "topology", ("network", "tiers"): "tiers",
                ("network", "oversubscription"): "oversubscription", ("network",): "oversubscription"}
"""Spec field path -> the parts parameter that sets it, first match (the network's own check is the tier count of
the oversubscription list; an error elsewhere names --node)."""


def _built(data: dict[str, Any]) -> ClusterSpec:
    """``data`` as a ClusterSpec; an error names the parts option behind the field (``--tiers: ...``)."""
    try:
        return build(ClusterSpec, data)
    except SpecError as e:
        path = tuple(str(p) for p in e.path)
        part = next((name for f, name in _FIELD_PARTS.items() if path[:len(f)] == f), "node")
        raise SpecError(e.message, path=(_option(part),)) from None


def _ratios(values: list[float] | None) -> float | tuple[float, ...] | None:
    """``--oversubscription`` as the spec takes it: one number (the leaf tier) or one ratio per tier."""
    if not values:
        return None
    return float(values[0]) if len(values) == 1 else tuple(float(v) for v in values)


def plan_command(
    old_cluster: str | None = typer.Argument(None, hidden=True, metavar="CLUSTER",
                                             help="Old spelling of --cluster (deprecated)."),
    cluster: str = ClusterOpt,
    compare: list[str] | None = typer.Option(None, "--compare",
                                             help="Another cluster to show side by side (repeat for more)."),
    fabric: list[str] | None = typer.Option(None, "--fabric",
                                            help="Show the (first) cluster with this catalog fabric instead, side "
                                                 "by side (repeat to compare fabrics)."),
    node: str | None = typer.Option(None, "--node", help="Build the cluster from catalog parts, starting with "
                                    "this catalog node (instead of --cluster)."),
    nodes: int | None = typer.Option(None, "--nodes", help=spec_help(ClusterSpec, "nodes") + " With --node."),
    gpu: str | None = typer.Option(None, "--gpu", help="With --node: the node with this catalog GPU instead of "
                                   "its own (its power and price stay the node's)."),
    network_fabric: str | None = typer.Option(None, "--network-fabric", help="With --node: the scale-out "
                                              "fabric, a catalog id (default: the fabric matching the node's NICs)."),
    topology: Topology | None = typer.Option(None, "--topology", help="With --node: " + spec_help(NetworkSpec, "topology",
                                                                     not_given="default rail-optimized")),
    tiers: int | None = typer.Option(None, "--tiers", help="With --node: " + spec_help(NetworkSpec, "tiers")),
    oversubscription: list[float] | None = typer.Option(
        None, "--oversubscription", help="With --node: " + spec_help(NetworkSpec, "oversubscription")
        + " Repeat for one ratio per tier."),
    storage: str | None = typer.Option(None, "--storage", help="With --node: the shared storage, a catalog id "
                                       "(default: the spec's default storage)."),
    json_out: bool = JsonOpt,
) -> None:
    """Bill of materials, peak compute, memory, network, storage, power, cooling and cost."""
    if old_cluster is not None:
        if cluster != DEFAULT_CLUSTER:
            raise SpecError("give the cluster once: --cluster (the positional CLUSTER is its old spelling)")
        cluster = old_cluster
        deprecated("plan CLUSTER", "plan --cluster CLUSTER")
    given = locals()
    parts = {name: given[name] for name in PARTS}
    plans = plans_of(cluster, compare, fabric, parts)
    if json_out:
        print_json(plan_json(plans))
        return
    _render(plans)


def plans_of(cluster: str, compare: list[str] | None, fabric: list[str] | None,
             parts: dict[str, Any] | None = None) -> list[Plan]:
    """The plans ``clustertwin plan`` shows for its arguments (shared with the web API); ``parts``: the parts
    options (:func:`parts_spec`), which replace ``cluster`` when any is given."""
    built = any(v not in (None, [], ()) for v in (parts or {}).values())
    if built and cluster != DEFAULT_CLUSTER:
        raise SpecError("give --cluster or a cluster built from parts (--node ...), not both")
    refs = [cluster, *(compare or [])]
    first = [parts_spec(parts or {})] if built else [load_cluster(cluster)]
    specs = first + [load_cluster(ref) for ref in refs[1:]]  # every input is validated before any work
    plans = [plan(specs[0]) if built else _named(plan(specs[0]), cluster)]
    plans += [_named(plan(spec), ref) for spec, ref in zip(specs[1:], refs[1:], strict=True)]
    return plans + [plan(with_fabric(specs[0], f)) for f in fabric or []]


def plan_json(plans: list[Plan]) -> dict[str, Any]:
    """``clustertwin plan --json`` of :func:`plans_of`."""
    return plans[0].to_dict() if len(plans) == 1 else {"compare": [p.to_dict() for p in plans]}


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
