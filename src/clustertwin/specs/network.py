"""Scale-out network: fabric and topology."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

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
    oversubscription: Annotated[float, Field(ge=1.0)] | tuple[Annotated[float, Field(ge=1.0)], ...] = 1.0
    """Downlink:uplink bandwidth ratio per switch tier, leaf first: a number (the leaf tier; 1.0 =
    non-blocking, 2.0 = 2:1) or a list such as ``[1.0, 7.0]`` (non-blocking leaves, 1:7 between the
    spines of a pod and the core: Meta's Llama 3 cluster). Tiers not listed are non-blocking."""
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

    @model_validator(mode="after")
    def _tiers_listed(self) -> NetworkSpec:
        o = self.oversubscription
        if not isinstance(o, int | float):
            if not o:
                raise ValueError("oversubscription list is empty; give a number or one ratio per tier")
            below_top = max(1, self.tiers - 1)
            if len(o) > below_top:
                raise ValueError(
                    f"oversubscription lists {len(o)} tiers, but a {self.tiers}-tier network has {below_top} "
                    f"tier(s) below the top; set tiers: {len(o) + 1} or list {below_top} ratio(s)"
                )
        return self

    @property
    def tier_oversubscription(self) -> tuple[float, ...]:
        """Ratio of every switch tier below the top, leaf first (length ``max(1, tiers - 1)``; tiers not
        listed are 1.0)."""
        o = self.oversubscription
        seq = (float(o),) if isinstance(o, int | float) else tuple(float(x) for x in o)
        n = max(1, self.tiers - 1)
        return seq + (1.0,) * (n - len(seq))

    @property
    def leaf_oversubscription(self) -> float:
        """The leaf tier's ratio (what a single number always meant)."""
        return self.tier_oversubscription[0]
