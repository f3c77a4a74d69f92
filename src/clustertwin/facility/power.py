"""IT power: nodes, switches, optics and storage.

``IT kW = nodes x node.system_power_kw + sum_tier(switches) x switch.power_w / 1000
+ switch-side transceivers x P_xcvr / 1000 + storage.power_kw_per_pb x capacity_pb``

* Node power is the vendor maximum system power (:attr:`NodeSpec.system_power_kw`: DGX H100 10.2 kW,
  NVIDIA DGX H100 User Guide, system specifications). It already includes the node's NICs and the optics plugged into the node, so
  those are reported (``nics_kw_within_nodes``) but not added again.
* Switch power is the catalog's per-box figure; transceivers in switch ports are added on top at
  ``P_xcvr = max(TRANSCEIVER_MIN_W, port Gbit/s x TRANSCEIVER_W_PER_GBIT)`` (17 W per twin-port 800G
  OSFP, i.e. 8.5 W per 400G port end; see :mod:`clustertwin.facility.assumptions`).
* Storage power is ``power_kw_per_pb x capacity_pb`` from the storage spec (estimate per catalog entry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.facility.assumptions import TRANSCEIVER_MIN_W, TRANSCEIVER_W_PER_GBIT
from clustertwin.specs import ClusterSpec, SwitchSpec

W_PER_KW = 1000.0


@dataclass(frozen=True)
class NetworkInventory:
    """The scale-out network's countable parts, as a topology builder reports them."""

    switches: dict[str, int]
    """Switch boxes per tier (``{"leaf": 32, "spine": 16}``); empty for a direct network (torus)."""
    switch: SwitchSpec | None
    """The switch model used for every tier (None when there are no switches)."""
    cables: int
    """Cables between ports (node-switch, switch-switch, node-node)."""
    transceivers: int
    """Optical transceivers, all port ends (node side included)."""
    node_transceivers: int
    """Of ``transceivers``, those plugged into nodes (powered within the node's system power)."""
    port_gbit_per_s: float
    """Line rate of one network port, Gbit/s."""

    def __post_init__(self) -> None:
        for tier, n in self.switches.items():
            if n < 0:
                raise SpecError(f"switch count must be >= 0 (got {n})", path=("network", "switches", tier))
        for name in ("cables", "transceivers", "node_transceivers"):
            if getattr(self, name) < 0:
                raise SpecError(f"{name} must be >= 0 (got {getattr(self, name)})", path=("network", name))
        if self.node_transceivers > self.transceivers:
            raise SpecError(
                f"node_transceivers ({self.node_transceivers}) exceed transceivers ({self.transceivers})",
                path=("network", "node_transceivers"),
            )
        if self.port_gbit_per_s <= 0:
            raise SpecError(f"port rate must be > 0 Gbit/s (got {self.port_gbit_per_s})",
                            path=("network", "port_gbit_per_s"))
        if self.switch_count > 0 and self.switch is None:
            raise SpecError("switches are counted but no switch model is given", path=("network", "switch"))
        object.__setattr__(self, "switches", dict(self.switches))

    @property
    def switch_count(self) -> int:
        """Total switch boxes over all tiers."""
        return sum(self.switches.values())

    @property
    def switch_transceivers(self) -> int:
        """Transceivers in switch ports (powered by the switch-side budget counted here)."""
        return self.transceivers - self.node_transceivers


def transceiver_power_w(port_gbit_per_s: float) -> float:
    """Power of one optical transceiver (one port end), W:
    ``max(TRANSCEIVER_MIN_W, port_gbit_per_s x TRANSCEIVER_W_PER_GBIT)`` (estimate scaled from the
    17 W twin-port 800G OSFP)."""
    if port_gbit_per_s <= 0:
        raise SpecError(f"port rate must be > 0 Gbit/s (got {port_gbit_per_s})", path=("port_gbit_per_s",))
    return max(TRANSCEIVER_MIN_W, port_gbit_per_s * TRANSCEIVER_W_PER_GBIT)


@dataclass(frozen=True)
class ITPower:
    """IT (critical) power at vendor maximum, kW, by component."""

    nodes_kw: float
    switches_kw: float
    transceivers_kw: float
    storage_kw: float
    nics_kw_within_nodes: float
    """NIC power already inside ``nodes_kw`` (reported, not added)."""
    node_kw: float
    """One node's maximum system power, kW."""
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def network_kw(self) -> float:
        """Switches plus switch-side optics, kW."""
        return self.switches_kw + self.transceivers_kw

    @property
    def total_kw(self) -> float:
        """Total IT power, kW."""
        return self.nodes_kw + self.network_kw + self.storage_kw

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_kw": self.node_kw,
            "nodes_kw": self.nodes_kw,
            "switches_kw": self.switches_kw,
            "transceivers_kw": self.transceivers_kw,
            "network_kw": self.network_kw,
            "storage_kw": self.storage_kw,
            "nics_kw_within_nodes": self.nics_kw_within_nodes,
            "it_kw": self.total_kw,
            "breakdown": dict(self.breakdown),
        }


def it_power(cluster: ClusterSpec, net: NetworkInventory) -> ITPower:
    """IT power of ``cluster`` with the network parts ``net`` (formula in the module docstring)."""
    node_kw = cluster.node.system_power_kw
    nodes_kw = cluster.nodes * node_kw
    switch_w = net.switch.power_w if net.switch is not None else 0.0
    switches_kw = net.switch_count * switch_w / W_PER_KW
    xcvr_w = transceiver_power_w(net.port_gbit_per_s)
    transceivers_kw = net.switch_transceivers * xcvr_w / W_PER_KW
    storage = cluster.storage
    storage_kw = storage.power_kw_per_pb * storage.capacity_pb
    nic_ports = cluster.nodes * cluster.node.nics.count
    nics_kw = nic_ports * cluster.fabric.nic_power_w / W_PER_KW
    breakdown = {
        "nodes": f"{cluster.nodes} nodes x {node_kw:.2f} kW "
        + ("(vendor maximum)" if cluster.node.power_kw is not None
           else f"(estimate from {cluster.node.gpus} x {cluster.node.gpu.tdp_w:.0f} W GPU TDP)"),
        "switches": f"{net.switch_count} switches x {switch_w:.0f} W"
        + (f" ({net.switch.id or net.switch.name})" if net.switch is not None else ""),
        "transceivers": f"{net.switch_transceivers} switch-side transceivers x {xcvr_w:.1f} W (estimate); "
        f"{net.node_transceivers} node-side ones are inside node power",
        "storage": f"{storage.capacity_pb:g} PB x {storage.power_kw_per_pb:g} kW/PB ({storage.kind})",
        "nics": f"{nic_ports} NIC ports x {cluster.fabric.nic_power_w:g} W, inside node power",
    }
    return ITPower(
        nodes_kw=nodes_kw,
        switches_kw=switches_kw,
        transceivers_kw=transceivers_kw,
        storage_kw=storage_kw,
        nics_kw_within_nodes=nics_kw,
        node_kw=node_kw,
        breakdown=breakdown,
    )
