"""Capital cost by component and total cost of ownership per year.

Capex items (each carrying its source and a price confidence: ``list``, ``street``, ``cloud`` or
``estimate``, as the catalog entry says; an item whose price the catalog lacks has ``usd = None`` and is left
out of the total, which then says it is incomplete - a lower bound):

* compute: ``nodes x node.price_usd``, else ``gpus x gpu.price_usd`` (GPUs only: a lower bound);
* NICs: ``nodes x nic ports x fabric.nic_usd`` when the node price is unknown (a node price includes its
  NICs);
* switches: ``switches x switch.price_usd``; transceivers: ``transceivers x fabric.transceiver_usd``;
  cables: ``cables x CABLE_USD`` (all estimates);
* storage: ``capacity_pb x storage.usd_per_pb``, else ``x STORAGE_USD_PER_PB`` (estimate);
* facility build-out: ``it_kw x facility.usd_per_kw_capex`` (estimate).

:func:`price_note` turns the confidences into the one line every cost output prints.

TCO per year = hardware capex / ``HARDWARE_LIFETIME_YEARS`` + facility capex / ``FACILITY_LIFETIME_YEARS``
+ support (``SUPPORT_FRACTION_PER_YEAR`` x compute capex) + annual energy cost;
``usd_per_gpu_hour = TCO per year / (gpus x 8760 h)`` (every GPU-hour of the year, idle ones included).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.facility.assumptions import (
    CABLE_USD,
    FACILITY_LIFETIME_YEARS,
    HARDWARE_LIFETIME_YEARS,
    STORAGE_USD_PER_PB,
    SUPPORT_FRACTION_PER_YEAR,
)
from clustertwin.facility.power import NetworkInventory
from clustertwin.specs import ClusterSpec
from clustertwin.units import YEAR_H

FACILITY_COMPONENT = "facility"
COMPUTE_COMPONENT = "compute"
ESTIMATE = "estimate"
"""Price confidence of a figure without a direct quote (the catalog default)."""


@dataclass(frozen=True)
class CapexItem:
    """One line of the bill of materials' cost."""

    component: str
    usd: float | None
    """Cost, USD; None when the catalog has no price."""
    basis: str
    """How it was computed (count x unit price)."""
    source: str
    """Where the unit price comes from."""
    confidence: str = ESTIMATE
    """How the unit price is known: list, street, cloud or estimate (catalog ``price_confidence``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"component": self.component, "usd": self.usd, "basis": self.basis, "source": self.source,
                "confidence": self.confidence, "estimate": self.confidence == ESTIMATE}


@dataclass(frozen=True)
class Capex:
    """Capital cost by component."""

    items: tuple[CapexItem, ...]

    @property
    def total_usd(self) -> float:
        """Sum of the priced items, USD."""
        return sum(i.usd for i in self.items if i.usd is not None)

    @property
    def complete(self) -> bool:
        """True when every component has a price."""
        return all(i.usd is not None for i in self.items)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(i.component for i in self.items if i.usd is None)

    def usd(self, component: str) -> float | None:
        for i in self.items:
            if i.component == component:
                return i.usd
        return None

    @property
    def estimated(self) -> tuple[str, ...]:
        """Priced, non-zero components whose price is an estimate."""
        return tuple(i.component for i in self.items if i.usd and i.confidence == ESTIMATE)

    @property
    def hardware_usd(self) -> float:
        """Priced items other than the facility build-out, USD."""
        return sum(i.usd for i in self.items if i.usd is not None and i.component != FACILITY_COMPONENT)

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": [i.to_dict() for i in self.items],
            "total_usd": self.total_usd,
            "complete": self.complete,
            "missing": list(self.missing),
            "estimated": list(self.estimated),
            "price_note": price_note(self),
        }


def price_note(cost: Capex) -> str:
    """One line on how far the total can be trusted: the confidence of the compute price, which priced
    components are estimates, and which have no price (then the total is a lower bound)."""
    compute = next((i for i in cost.items if i.component == COMPUTE_COMPONENT), None)
    parts = []
    if compute is not None and compute.usd is not None:
        parts.append(f"compute price: {compute.confidence}")
    est = [c for c in cost.estimated if c != COMPUTE_COMPONENT]
    if est:
        parts.append("estimates: " + ", ".join(est))
    if cost.missing:
        parts.append("no price: " + ", ".join(cost.missing) + " (total is a lower bound)")
    return "; ".join(parts) if parts else "all prices quoted"


def node_price_confidence(node: Any) -> str | None:
    """Confidence of what a node costs: the node's price confidence, else its GPUs' (then a lower bound),
    else None (unpriced)."""
    if node.price_usd is not None:
        return node.price_confidence or ESTIMATE
    if node.gpu.price_usd is not None:
        return f"{node.gpu.price_confidence or ESTIMATE}, GPUs only: lower bound"
    return None


def _src(spec: Any, fallback: str) -> str:
    s = getattr(spec, "source", None)
    if isinstance(s, list | tuple):
        s = "; ".join(s)
    ident = getattr(spec, "id", None) or getattr(spec, "name", None)
    if s:
        return f"{ident}: {s}" if ident else str(s)
    return fallback


def _priced(component: str, count: float, unit_usd: float | None, what: str, source: str,
            confidence: str | None = None) -> CapexItem:
    conf = confidence or ESTIMATE
    if count == 0:
        return CapexItem(component, 0.0, f"no {what}", source, conf)
    if unit_usd is None:
        return CapexItem(component, None, f"{count:,.0f} {what}; no price in the catalog", source, conf)
    return CapexItem(component, count * unit_usd, f"{count:,.0f} {what} x ${unit_usd:,.0f}", source, conf)


def capex(cluster: ClusterSpec, net: NetworkInventory, it_kw: float) -> Capex:
    """Capex by component (formulas in the module docstring)."""
    if it_kw < 0:
        raise SpecError(f"IT power must be >= 0 kW (got {it_kw})", path=("it_kw",))
    node, fabric = cluster.node, cluster.fabric
    items: list[CapexItem] = []
    if node.price_usd is not None:
        items.append(_priced(COMPUTE_COMPONENT, cluster.nodes, node.price_usd, "nodes", _src(node, "node spec"),
                             node.price_confidence))
        items.append(CapexItem("nics", 0.0, "included in the node price", _src(node, "node spec"),
                               node.price_confidence or ESTIMATE))
    else:
        gpu_item = _priced(COMPUTE_COMPONENT, cluster.total_gpus, node.gpu.price_usd, "GPUs (GPUs only, "
                           "server excluded: a lower bound)", _src(node.gpu, "GPU spec"), node.gpu.price_confidence)
        items.append(gpu_item)
        nic_ports = cluster.nodes * node.nics.count
        items.append(_priced("nics", nic_ports, fabric.nic_usd, "NIC ports", _src(fabric, "fabric spec")))
    sw = net.switch
    items.append(_priced("switches", net.switch_count, sw.price_usd if sw else None, "switches",
                         _src(sw, "switch spec") if sw else "no switches"))
    items.append(_priced("transceivers", net.transceivers, fabric.transceiver_usd, "transceivers",
                         _src(fabric, "fabric spec")))
    items.append(_priced("cables", net.cables, CABLE_USD, "cables",
                         "estimate: facility.assumptions.CABLE_USD"))
    st = cluster.storage
    if st.usd_per_pb is None:
        items.append(_priced("storage", st.capacity_pb, STORAGE_USD_PER_PB, "PB (storage spec names no price: "
                             "all-flash estimate)", "estimate: facility.assumptions.STORAGE_USD_PER_PB"))
    else:
        items.append(_priced("storage", st.capacity_pb, st.usd_per_pb, "PB", _src(st, "storage spec")))
    fac = cluster.facility
    items.append(CapexItem(FACILITY_COMPONENT, it_kw * fac.usd_per_kw_capex,
                           f"{it_kw:,.0f} kW IT x ${fac.usd_per_kw_capex:,.0f}/kW",
                           "facility.usd_per_kw_capex (estimate)"))
    return Capex(tuple(items))


@dataclass(frozen=True)
class TCO:
    """Yearly cost of owning and running the cluster."""

    hardware_depreciation_usd_per_year: float
    facility_depreciation_usd_per_year: float
    support_usd_per_year: float
    energy_usd_per_year: float
    gpus: int
    complete: bool
    """False when some capex item had no price (the TCO is then a lower bound)."""
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def total_usd_per_year(self) -> float:
        return (self.hardware_depreciation_usd_per_year + self.facility_depreciation_usd_per_year
                + self.support_usd_per_year + self.energy_usd_per_year)

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.total_usd_per_year / (self.gpus * YEAR_H)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hardware_depreciation_usd_per_year": self.hardware_depreciation_usd_per_year,
            "facility_depreciation_usd_per_year": self.facility_depreciation_usd_per_year,
            "support_usd_per_year": self.support_usd_per_year,
            "energy_usd_per_year": self.energy_usd_per_year,
            "tco_usd_per_year": self.total_usd_per_year,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "complete": self.complete,
            "breakdown": dict(self.breakdown),
        }


def tco(
    cost: Capex,
    energy_usd_per_year: float,
    gpus: int,
    *,
    hardware_lifetime_years: float = HARDWARE_LIFETIME_YEARS,
    facility_lifetime_years: float = FACILITY_LIFETIME_YEARS,
    support_fraction_per_year: float = SUPPORT_FRACTION_PER_YEAR,
) -> TCO:
    """TCO per year and $/GPU-hour (formula in the module docstring)."""
    if gpus <= 0:
        raise SpecError(f"GPU count must be > 0 (got {gpus})", path=("gpus",))
    if hardware_lifetime_years <= 0 or facility_lifetime_years <= 0:
        raise SpecError("lifetimes must be > 0 years", path=("lifetime_years",))
    if support_fraction_per_year < 0 or energy_usd_per_year < 0:
        raise SpecError("support fraction and energy cost must be >= 0", path=("tco",))
    facility_usd = cost.usd(FACILITY_COMPONENT) or 0.0
    compute_usd = cost.usd(COMPUTE_COMPONENT) or 0.0
    return TCO(
        hardware_depreciation_usd_per_year=cost.hardware_usd / hardware_lifetime_years,
        facility_depreciation_usd_per_year=facility_usd / facility_lifetime_years,
        support_usd_per_year=support_fraction_per_year * compute_usd,
        energy_usd_per_year=energy_usd_per_year,
        gpus=gpus,
        complete=cost.complete,
        breakdown={
            "hardware_lifetime_years": hardware_lifetime_years,
            "facility_lifetime_years": facility_lifetime_years,
            "support_fraction_per_year": support_fraction_per_year,
            "gpu_hours_per_year": gpus * YEAR_H,
        },
    )


def time_to_train_cost_label(usd_per_gpu_hour: float) -> str:
    """Honest label for a time-to-train cost: energy only (``usd_per_gpu_hour == 0``: facility kWh price x
    energy, an estimate) or energy plus rented GPU-hours at the given rate."""
    if usd_per_gpu_hour <= 0:
        return "energy cost (USD, estimate; no GPU-hour price given)"
    return f"energy + GPU-hour cost (USD, GPU-hours at ${usd_per_gpu_hour:,.2f}; energy is an estimate)"


def time_to_train_cost_rows(energy_usd: float, total_usd: float, gpu_hours: float) -> list[list[Any]]:
    """The cost rows of a time-to-train table: the energy cost (facility kWh price x energy, an estimate)
    and, where a GPU-hour price was given, energy + GPU-hours x that price under
    :func:`time_to_train_cost_label`; with no GPU-hour price the one energy row says so."""
    rate = (total_usd - energy_usd) / gpu_hours if gpu_hours > 0 else 0.0
    if rate <= 0:
        return [[time_to_train_cost_label(0.0), energy_usd]]
    return [["energy cost (USD, estimate)", energy_usd], [time_to_train_cost_label(rate), total_usd]]


def cost_cell(usd: float | None, complete: bool) -> str:
    """A cost for a table: ``$1,234`` or ``$1,234 (lower bound)`` when some component has no price."""
    if usd is None:
        return "no price"
    return f"${usd:,.0f}" + ("" if complete else " (lower bound)")


def sweep_price_note(table: Any) -> str:
    """The line a sweep prints under its fronts: how many designs rank on incomplete prices, and how the
    prices of the node types in the sweep are known (a pyarrow table with ``node`` and ``price_complete``)."""
    from clustertwin import catalog
    from clustertwin.errors import ClusterTwinError

    nodes = sorted({n for n in table["node"].to_pylist() if n})
    incomplete = table["price_complete"].to_pylist().count(False)
    conf: dict[str, str] = {}
    for n in nodes:
        try:
            conf[n] = node_price_confidence(catalog.get("node", n)) or "no price"
        except ClusterTwinError:
            conf[n] = "inline node"
    est = [n for n, c in conf.items() if c != "list" and c != "street"]
    parts = []
    if incomplete:
        parts.append(f"{incomplete:,} points rank on incomplete prices (cost shown as a lower bound)")
    if est:
        parts.append("estimated node prices: " + ", ".join(f"{n} ({conf[n]})" for n in est))
    parts.append("network, storage, facility and energy prices are estimates")
    return "cost: " + "; ".join(parts)
