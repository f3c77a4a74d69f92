"""A server (node): GPUs, scale-up domain, NICs, CPUs, memory, power."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import model_validator

from clustertwin.specs.base import NonNegFloat, NonNegInt, PositiveFloat, PositiveInt, Sourced, Spec, preset
from clustertwin.specs.hardware import CPUSpec, GPUSpec, PriceConfidence

ScaleUpKind = Literal["nvswitch", "nvlink-mesh", "infinity-fabric", "hccs", "pcie", "none"]


class ScaleUpSpec(Spec):
    """The intra-node (scale-up) interconnect."""

    kind: ScaleUpKind = "nvswitch"
    """nvswitch (all-to-all through switches), nvlink-mesh / infinity-fabric / hccs (direct full
    mesh: per-pair bandwidth = total / (gpus-1)), pcie (through the host), none."""
    gb_per_s: NonNegFloat | None = None
    """Per-GPU bandwidth per direction, GB/s; defaults to the GPU's scale_up_gb_per_s."""
    switches: NonNegInt = 0
    """NVSwitch chips in the node (for power and bill of materials)."""


class NICSpec(Spec):
    """The node's scale-out NICs (compute fabric only; storage/management NICs are not counted)."""

    count: PositiveInt = 8
    """Compute NIC ports per node."""
    gbit_per_s: PositiveFloat = 400.0
    """Port rate, Gbit/s."""
    model: str | None = None
    """NIC model (ConnectX-7 ...)."""


class NodeSpec(Sourced):
    """One server. For GB200 NVL72 the 'node' is the rack-scale NVLink domain of 72 GPUs."""

    gpu: Annotated[GPUSpec, preset("gpu")]
    """GPU preset id or inline GPU spec."""
    gpus: PositiveInt = 8
    """GPUs per node."""
    scale_up: ScaleUpSpec = ScaleUpSpec()
    """Scale-up interconnect."""
    nics: NICSpec = NICSpec()
    """Compute-fabric NICs."""
    cpu: Annotated[CPUSpec, preset("cpu")] | None = None
    """CPU preset id or inline CPU spec."""
    cpus: NonNegInt = 2
    """CPU sockets per node."""
    memory_gb: NonNegFloat = 1024.0
    """Host DRAM, GB."""
    local_nvme_tb: NonNegFloat = 0.0
    """Local NVMe cache capacity, TB."""
    power_kw: PositiveFloat | None = None
    """Maximum system power, kW (vendor figure). Defaults to GPU TDP x gpus / 0.65."""
    rack_units: PositiveInt = 8
    """Height, U (per node; for NVL72 the whole rack)."""
    price_usd: PositiveFloat | None = None
    """Price estimate, USD."""
    price_confidence: PriceConfidence | None = None
    """How ``price_usd`` is known: list, street, cloud or estimate (method in ``source``/``notes``)."""
    cooling: Literal["air", "liquid", "any"] = "any"
    """Cooling the node requires."""

    @model_validator(mode="after")
    def _defaults(self) -> NodeSpec:
        if self.scale_up.gb_per_s is None:
            su = self.scale_up.model_copy(update={"gb_per_s": self.gpu.scale_up_gb_per_s})
            object.__setattr__(self, "scale_up", su)
        return self

    @property
    def scale_up_gb_per_s(self) -> float:
        """Per-GPU scale-up bandwidth per direction, GB/s."""
        return float(self.scale_up.gb_per_s or 0.0)

    @property
    def system_power_kw(self) -> float:
        """Vendor maximum system power, or GPU TDP x gpus / 0.65 (GPUs ~65% of an 8-GPU server's
        maximum: DGX H100 5.6 of 10.2 kW, DGX A100 3.2 of 6.5 kW)."""
        if self.power_kw is not None:
            return self.power_kw
        return self.gpu.tdp_w * self.gpus / 0.65 / 1000.0
