"""Racks: how many nodes fit a rack by power and by space, and how many racks the cluster needs.

``nodes_per_rack = min(floor(rack_kw_limit / node_kw), floor(rack_units / node_rack_units))``;
a node taller than the rack (GB200 NVL72: the node *is* the rack) or drawing more than the rack limit
gets a rack of its own (the latter with a warning). ``compute_racks = ceil(nodes / nodes_per_rack)``.
Switches and storage get racks of their own, each ``ceil(max(U needed / rack U, kW / rack kW limit))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from clustertwin.facility.power import ITPower, NetworkInventory
from clustertwin.specs import ClusterSpec


@dataclass(frozen=True)
class RackLayout:
    """Rack counts and the densest compute rack."""

    nodes_per_rack: int
    limited_by: str
    """power, space, rack-scale node (the node fills a rack) or node over limit."""
    compute_racks: int
    network_racks: int
    storage_racks: int
    kw_per_compute_rack: float
    """Power of a full compute rack at vendor maximum, kW (this decides the cooling)."""
    rack_kw_limit: float
    rack_units: int
    warnings: tuple[str, ...] = ()
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def total_racks(self) -> int:
        return self.compute_racks + self.network_racks + self.storage_racks

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes_per_rack": self.nodes_per_rack,
            "limited_by": self.limited_by,
            "compute_racks": self.compute_racks,
            "network_racks": self.network_racks,
            "storage_racks": self.storage_racks,
            "total_racks": self.total_racks,
            "kw_per_compute_rack": self.kw_per_compute_rack,
            "rack_kw_limit": self.rack_kw_limit,
            "rack_units": self.rack_units,
            "warnings": list(self.warnings),
            "breakdown": dict(self.breakdown),
        }


def _racks_for(units: float, kw: float, rack_units: int, rack_kw: float) -> int:
    """Racks for equipment of ``units`` U drawing ``kw`` kW: ``ceil(max(U / rack U, kW / rack kW))``."""
    if units <= 0 and kw <= 0:
        return 0
    return max(1, math.ceil(max(units / rack_units, kw / rack_kw)))


def rack_layout(cluster: ClusterSpec, power: ITPower, net: NetworkInventory) -> RackLayout:
    """Racks for ``cluster`` (formulas in the module docstring)."""
    fac = cluster.facility
    node = cluster.node
    node_kw = power.node_kw
    by_power = math.floor(fac.rack_kw_limit / node_kw)
    by_space = fac.rack_units // node.rack_units
    warnings: list[str] = []
    if by_space == 0:
        per_rack, limited_by = 1, "rack-scale node"
    elif by_power == 0:
        per_rack, limited_by = 1, "node over limit"
    else:
        per_rack = min(by_power, by_space)
        limited_by = "power" if by_power < by_space else "space"
    if by_power == 0:
        warnings.append(
            f"one node draws {node_kw:.1f} kW, above facility.rack_kw_limit {fac.rack_kw_limit:g} kW: "
            "one node per rack"
        )
    per_rack = min(per_rack, cluster.nodes)
    compute_racks = math.ceil(cluster.nodes / per_rack)
    switch_units = net.switch_count * (net.switch.rack_units if net.switch is not None else 0)
    network_racks = _racks_for(switch_units, power.network_kw, fac.rack_units, fac.rack_kw_limit)
    st = cluster.storage
    storage_units = st.capacity_pb * st.rack_units_per_pb
    storage_racks = _racks_for(storage_units, power.storage_kw, fac.rack_units, fac.rack_kw_limit)
    breakdown = {
        "nodes_per_rack_by_power": by_power,
        "nodes_per_rack_by_space": by_space,
        "node_rack_units": node.rack_units,
        "switch_rack_units": switch_units,
        "storage_rack_units": storage_units,
    }
    return RackLayout(
        nodes_per_rack=per_rack,
        limited_by=limited_by,
        compute_racks=compute_racks,
        network_racks=network_racks,
        storage_racks=storage_racks,
        kw_per_compute_rack=per_rack * node_kw,
        rack_kw_limit=fac.rack_kw_limit,
        rack_units=fac.rack_units,
        warnings=tuple(warnings),
        breakdown=breakdown,
    )
