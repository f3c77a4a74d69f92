"""``clustertwin plan [CLUSTER] [--compare OTHER] [--json]``: bill of materials, peak compute, memory,
network, storage, power, cooling and cost of a cluster, or two clusters side by side."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from clustertwin.cli.common import DEFAULT_CLUSTER, JsonOpt, console, load_cluster, print_json, table
from clustertwin.facility.cost import price_note
from clustertwin.plan import UNNAMED, Plan, plan

SECTIONS = ("compute", "memory", "network", "storage", "facility", "cost")

_PRECISION_LABELS = {
    "fp64": "FP64 vector",
    "fp64_tensor": "FP64 tensor",
    "fp32": "FP32 vector",
    "tf32": "TF32 tensor",
    "bf16": "BF16 tensor",
    "fp16": "FP16 tensor",
    "fp8": "FP8 tensor",
    "fp4": "FP4 tensor",
    "int8": "INT8 tensor (TOP/s | POP/s)",
}
PEAK_HEADER = "dense peak: TFLOP/s per GPU | PFLOP/s total"


def _usd(v: float | None) -> str:
    return "no price" if v is None else f"${v:,.0f}"


def _rows(p: Plan) -> dict[str, list[tuple[str, Any]]]:
    """Label -> value rows of each section (labels carry the unit)."""
    c, m, n, s, f = p.compute, p.memory, p.network, p.storage, p.facility
    compute: list[tuple[str, Any]] = [
        ("GPU", f"{c.gpu_name} ({c.gpu_id})"),
        ("node", f"{c.node_id} ({c.gpus_per_node} GPUs)"),
        ("nodes", c.nodes),
        ("GPUs", c.gpus),
        ("host CPU cores", c.cpu_cores),
    ]
    compute.append((PEAK_HEADER, ""))
    for peak in c.peaks:
        label = "  " + _PRECISION_LABELS.get(peak.precision, peak.precision)
        if peak.per_gpu_tflops is None:
            compute.append((label, "-"))
        else:
            compute.append((label, f"{peak.per_gpu_tflops:,.1f} | {peak.total_pflops:,.1f}"))
    memory = [
        ("HBM per GPU, GB", m.hbm_gb_per_gpu),
        ("HBM total, TB", m.hbm_total_tb),
        ("HBM bandwidth per GPU, TB/s", m.hbm_tb_per_s_per_gpu),
        ("HBM bandwidth total, TB/s", m.hbm_total_tb_per_s),
        ("host DRAM per node, GB", m.host_dram_gb_per_node),
        ("host DRAM total, TB", m.host_dram_total_tb),
        ("local NVMe total, TB", m.local_nvme_total_tb),
    ]
    network: list[tuple[str, Any]] = [
        ("fabric", f"{n.fabric} ({n.fabric_kind})"),
        ("port rate, Gbit/s", n.port_gbit_per_s),
        ("topology", n.topology),
        ("switch model", n.switch),
    ]
    network += [(f"switches: {tier}", count) for tier, count in n.switches.items() if count]
    network += [("switches total", n.switch_count)]
    network += [(f"links: {kind}", count) for kind, count in n.links.items() if count]
    network += [
        ("cables", n.cables),
        ("transceivers", n.transceivers),
        ("bisection, TB/s", n.bisection_tb_per_s),
        ("diameter, hops", n.diameter_hops),
        ("average hops", n.avg_hops),
        ("oversubscription", n.oversubscription),
        ("nodes per leaf", n.nodes_per_leaf),
        ("nodes per pod", n.nodes_per_pod),
        ("injection per GPU, GB/s", n.injection_gb_per_s_per_gpu),
        ("injection per node, GB/s", n.injection_gb_per_s_per_node),
        ("scale-up", n.scale_up_kind),
        ("scale-up domain, GPUs", n.scale_up_domain_gpus),
        ("scale-up per GPU, GB/s", n.scale_up_gb_per_s_per_gpu),
    ]
    storage = [
        ("kind", s.kind),
        ("read, GB/s", s.read_gb_per_s),
        ("write, GB/s", s.write_gb_per_s),
        ("read per GPU, GB/s", s.read_gb_per_s_per_gpu),
        ("write per GPU, GB/s", s.write_gb_per_s_per_gpu),
        ("capacity, PB", s.capacity_pb),
        ("meets 1 GB/s-per-GPU guidance", s.meets_per_gpu_guidance),
    ]
    pw, rk, co, en = f.power, f.racks, f.cooling, f.energy
    fac = [
        ("node max power, kW", pw.node_kw),
        ("nodes, kW", pw.nodes_kw),
        ("switches, kW", pw.switches_kw),
        ("switch-side transceivers, kW", pw.transceivers_kw),
        ("storage, kW", pw.storage_kw),
        ("IT power, kW", pw.total_kw),
        ("nodes per rack", f"{rk.nodes_per_rack} ({'by ' if rk.limited_by in ('power', 'space') else ''}"
                           f"{rk.limited_by})"),
        ("racks: compute | network | storage", f"{rk.compute_racks} | {rk.network_racks} | {rk.storage_racks}"),
        ("racks total", rk.total_racks),
        ("kW per compute rack", rk.kw_per_compute_rack),
        ("cooling recommended", co.recommended),
        ("cooling applied", co.applied),
        ("PUE", f"{co.pue:.2f} ({co.pue_source})"),
        ("facility power, kW", en.facility_kw),
        ("annual energy, MWh", en.annual_mwh),
        ("annual energy cost, USD", _usd(en.annual_energy_usd)),
        ("annual CO2e, t", en.annual_co2_t),
    ]
    # a zero-cost item says why (included in the node price, no switches)
    cost: list[tuple[str, Any]] = [(f"capex: {i.component}", i.basis if i.usd == 0 else _usd(i.usd))
                                   for i in f.capex.items]
    t = f.tco
    cost += [
        ("capex total" + ("" if f.capex.complete else " (priced items only)"), _usd(f.capex.total_usd)),
        ("hardware depreciation / yr", _usd(t.hardware_depreciation_usd_per_year)),
        ("facility depreciation / yr", _usd(t.facility_depreciation_usd_per_year)),
        ("support / yr", _usd(t.support_usd_per_year)),
        ("energy / yr", _usd(t.energy_usd_per_year)),
        ("TCO / yr", _usd(t.total_usd_per_year)),
        ("USD per GPU-hour", f"${t.usd_per_gpu_hour:.2f}" + ("" if t.complete else " (lower bound)")),
        ("unpriced components", ", ".join(f.capex.missing) or "none"),
        ("price confidence", price_note(f.capex)),
    ]
    return {"compute": compute, "memory": memory, "network": network, "storage": storage,
            "facility": fac, "cost": cost}


def _render(plans: list[Plan]) -> None:
    all_rows = [_rows(p) for p in plans]
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
            console.print(f"[yellow]warning[/yellow] ({p.name}): {w}", highlight=False)
    console.print("Prices and facility figures are estimates; each carries its source in --json output.",
                  style="dim")


def _named(p: Plan, ref: str) -> Plan:
    """Name an unnamed cluster after its file (``clusters/a.yaml`` -> ``a``) for column headers."""
    if p.name != UNNAMED:
        return p
    return replace(p, name=Path(ref).stem)


def plan_command(
    cluster: str = typer.Argument(DEFAULT_CLUSTER, help="Cluster catalog id or YAML/JSON file."),
    compare: str | None = typer.Option(None, "--compare", help="A second cluster to show side by side."),
    json_out: bool = JsonOpt,
) -> None:
    """Bill of materials, peak compute, memory, network, storage, power, cooling and cost."""
    refs = [cluster] if compare is None else [cluster, compare]
    specs = [load_cluster(ref) for ref in refs]  # every input is validated before any work
    plans = [_named(plan(spec), ref) for spec, ref in zip(specs, refs, strict=True)]
    if json_out:
        print_json(plans[0].to_dict() if len(plans) == 1 else {"compare": [p.to_dict() for p in plans]})
        return
    _render(plans)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
