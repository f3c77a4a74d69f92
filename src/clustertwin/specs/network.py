"""Scale-out network: fabric and topology."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from clustertwin.specs.base import PositiveInt, Spec, preset
from clustertwin.specs.hardware import FabricSpec, SwitchSpec

TopologyKind = Literal["single", "fat-tree", "rail-optimized", "torus3d", "dragonfly+"]


class NetworkSpec(Spec):
    """How nodes are connected."""

    fabric: Annotated[FabricSpec, preset("fabric")]
    """Fabric preset id (ib-ndr, roce-400g, eth-1g ...) or inline fabric spec."""
    topology: TopologyKind = "fat-tree"
    """single (one node or one switch), fat-tree, rail-optimized (DGX SuperPOD style),
    torus3d (direct 3D torus between nodes), dragonfly+."""
    tiers: Annotated[int, Field(ge=1, le=3)] = 2
    """Switch tiers of a fat-tree (1 = single switch, 2 = leaf-spine, 3 = leaf-spine-core)."""
    oversubscription: Annotated[float, Field(ge=1.0)] = 1.0
    """Leaf downlink:uplink bandwidth ratio (1.0 = non-blocking; 2.0 = 2:1)."""
    switch: Annotated[SwitchSpec, preset("switch")] | None = None
    """Switch preset id or inline spec; defaults to the fabric's default switch."""
    su_nodes: PositiveInt = 32
    """Nodes per scalable unit for rail-optimized designs (DGX SuperPOD H100: 32 incl. one UFM slot)."""
    torus_dims: tuple[PositiveInt, PositiveInt, PositiveInt] | None = None
    """3D torus shape (x, y, z) in nodes; defaults to the most cubic factorisation."""
    dragonfly_groups: PositiveInt | None = None
    """Dragonfly+ groups; defaults to the fewest groups that hold the nodes."""
    sharp: bool | None = None
    """Use in-network reduction (IB SHARP/CollNet); defaults to the fabric's capability."""
