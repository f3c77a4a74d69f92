"""Human labels for a cluster plan: one label map, with the unit in each label, shared by ``clustertwin plan``
and the HTML report (so the two never disagree, and neither shows a raw key such as ``hbm_tb_per_s_per_gpu``)."""

from __future__ import annotations

from typing import Any

from clustertwin.facility.cost import price_note
from clustertwin.plan import Plan

SECTIONS = ("compute", "memory", "network", "storage", "facility", "cost")
"""The plan's sections, in print order."""

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


def plan_rows(p: Plan) -> dict[str, list[tuple[str, Any]]]:
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
