"""A cluster: nodes of one kind, a network, storage and a facility."""

from __future__ import annotations

from typing import Annotated

from pydantic import ValidationInfo, field_validator, model_validator

from clustertwin.specs.base import PositiveInt, Sourced, preset
from clustertwin.specs.facility import FacilitySpec
from clustertwin.specs.hardware import FabricSpec, StorageSpec
from clustertwin.specs.network import NetworkSpec
from clustertwin.specs.node import NodeSpec


def _default_network(nics_gbit: float) -> NetworkSpec:
    from clustertwin.catalog import store

    table = {"ib-ndr": 400, "ib-hdr": 200, "ib-xdr": 800}
    best = min(table, key=lambda k: abs(table[k] - nics_gbit))
    return NetworkSpec(fabric=store.raw("fabric", best), topology="rail-optimized")


PORT_RATE_MISMATCH_MAX = 2.0
"""NIC and fabric port rates may differ by this factor (a 400G NIC on a 200G fabric trains at 200G);
beyond it the spec is an error rather than a silent substitution (a DGX H100 on eth-1g is not 8 x 1 GbE)."""


def _check_port_rates(node: NodeSpec, network: NetworkSpec) -> None:
    """Error when the fabric's ports are more than 2x slower than the node's NICs (the NICs cannot be
    served: a DGX H100 on eth-1g); a faster fabric or a smaller gap is a :attr:`ClusterSpec.warnings`."""
    nic, fab = node.nics.gbit_per_s, network.fabric.gbit_per_s
    if nic / fab > PORT_RATE_MISMATCH_MAX:
        name = network.fabric.id or network.fabric.kind
        raise ValueError(
            f"fabric '{name}' has {fab:g} Gbit/s ports but the node has {node.nics.count} x {nic:g} Gbit/s "
            f"NICs; give the node the fabric's NICs (node: {{preset: {node.id or '...'}, nics: {{count: 1, "
            f"gbit_per_s: {fab:g}}}}}) or a fabric of {nic:g} Gbit/s"
        )


class ClusterSpec(Sourced):
    """A homogeneous cluster."""

    node: Annotated[NodeSpec, preset("node")]
    """Node preset id or inline node spec."""
    nodes: PositiveInt = 1
    """Number of nodes."""
    gpus: PositiveInt | None = None
    """Total GPUs, if declared: must equal nodes x node.gpus."""
    network: NetworkSpec | None = None
    """Scale-out network; defaults to an InfiniBand rail-optimised fat-tree matching the NIC rate."""
    storage: Annotated[StorageSpec, preset("storage")] = StorageSpec()
    """Shared storage."""
    facility: FacilitySpec = FacilitySpec()
    """Facility assumptions."""

    @field_validator("gpus")
    @classmethod
    def _gpus_divisible(cls, gpus: int | None, info: ValidationInfo) -> int | None:
        node, nodes = info.data.get("node"), info.data.get("nodes")
        if gpus is not None and node is not None and nodes is not None and gpus != nodes * node.gpus:
            raise ValueError(
                f"expected nodes x node.gpus = {nodes} x {node.gpus} = {nodes * node.gpus}, got {gpus}"
            )
        return gpus

    @field_validator("network")
    @classmethod
    def _torus_fits(cls, network: NetworkSpec | None, info: ValidationInfo) -> NetworkSpec | None:
        """A torus3d's ``torus_dims`` hold exactly ``nodes`` nodes (checked here, while the file is known;
        :func:`clustertwin.topology.torus.torus3d` checks again for specs built in code)."""
        nodes = info.data.get("nodes")
        if network is None or network.topology != "torus3d" or network.torus_dims is None or nodes is None:
            return network
        x, y, z = network.torus_dims
        if x * y * z != nodes:
            raise ValueError(f"torus_dims {x}x{y}x{z} = {x * y * z} nodes, but nodes = {nodes}")
        return network

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.network is None:
            object.__setattr__(self, "network", _default_network(self.node.nics.gbit_per_s))
        else:
            _check_port_rates(self.node, self.network)
        return self

    @property
    def warnings(self) -> list[str]:
        """Inconsistencies that are not errors: NIC and fabric port rates that differ (the link trains at
        the lower rate; the network model uses the fabric's)."""
        nic, fab = self.node.nics.gbit_per_s, self.fabric.gbit_per_s
        if nic != fab:
            return [f"node NICs run {nic:g} Gbit/s but fabric '{self.fabric.id or self.fabric.kind}' ports "
                    f"{fab:g} Gbit/s: links train at {min(nic, fab):g} Gbit/s; the network model uses {fab:g}"]
        return []

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.node.gpus

    @property
    def fabric(self) -> FabricSpec:
        assert self.network is not None
        return self.network.fabric

    @property
    def net(self) -> NetworkSpec:
        assert self.network is not None
        return self.network
