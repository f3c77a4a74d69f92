"""Named efficiency and latency parameters of the collective model, with documented defaults.

Every number the model uses beyond the hardware specs and NCCL's own tables
(:mod:`clustertwin.comm.constants`) is a field here. A :class:`~clustertwin.specs.Calibration`
overrides fields by name (``calibration.comm``); ``clustertwin node bench`` fills one from measurements.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from clustertwin.errors import SpecError, did_you_mean

Fraction = Annotated[float, Field(gt=0, le=1)]
NonNeg = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]


class CommParams(BaseModel):
    """Collective-model parameters. Efficiencies are fractions of a link's per-direction bandwidth."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    nvlink_efficiency: Fraction = 0.80
    """Fraction of NVSwitch/NVLink per-GPU bandwidth NCCL's ring reaches: NCCL's own per-link figures are
    20/25 GB/s (SM80) and 20.6/25 (SM90) (topo.h); the maintainer attributes ~20% protocol overhead
    (8xH100 ring busbw ~367 of 450 GB/s, nccl#1455; 8xA100 232.5 of 300, nccl-tests#175)."""
    mesh_efficiency: Fraction = 0.80
    """Same fraction for direct GPU meshes (Infinity Fabric, HCCS, NVLink mesh); no separate public
    ring measurement was found, so the NVLink protocol overhead is assumed."""
    pcie_efficiency: Fraction = 0.76
    """Fraction of a PCIe x16 link NCCL reaches: NCCL's PCI_BW 12 GB/s for Gen3 x16 (15.75 raw), topo.h."""
    network_efficiency: Positive = 1.0
    """Multiplier on the fabric's ``achievable_fraction`` (a calibration knob; 1.0 = the catalog's
    per-NIC NCCL ceiling)."""
    ll_bw_factor: Fraction = 0.5
    """LL protocol bandwidth factor: 4 B payload per 8 B store (tuning.cc ring LL busBw x 0.5)."""
    ll128_bw_factor: Fraction = 0.92
    """LL128 bandwidth factor: 120 B payload per 128 B line (tuning.cc x 0.92)."""
    tree_efficiency: Fraction = 0.92
    """Tree all-reduce pipeline efficiency (tuning.cc tree busBw x 0.92)."""
    tree_ll_factor: Fraction = 1.0 / 3.8
    """Tree LL bandwidth relative to tree Simple (tuning.cc x 1/3.8)."""
    tree_ll128_factor_single_node: Fraction = 7.0 / 9.0
    """Tree LL128 relative to Simple on one node (tuning.cc x 7/9)."""
    tree_ll128_factor_multi_node: Fraction = 120.0 / 128.0
    """Tree LL128 relative to Simple across nodes (tuning.cc x 120/128)."""
    nvls_efficiency: Fraction | None = None
    """NVLink SHARP efficiency; None -> NCCL's per-generation value (Hopper 0.85, Blackwell 0.74)."""
    collnet_efficiency: Fraction = 0.90
    """In-network (SHARP) reduction efficiency (tuning.cc CollNet busBw x 0.9)."""
    pat_efficiency: Fraction = 0.75
    """PAT all-gather/reduce-scatter bandwidth factor (tuning.cc x 0.75)."""
    pat_per_rank_us: NonNeg = 2.8
    """PAT linear latency term per rank, µs (tuning.cc, nRanks x 2.8)."""
    collnet_arity_us: NonNeg = 0.4
    """CollNet-Direct arity serialization latency per local rank, µs (tuning.cc 0.4)."""
    net_overhead_us_intel: NonNeg = 1.0
    """Host network-post overhead per ring step on Intel hosts, µs (tuning.cc getNetOverhead)."""
    net_overhead_us_amd: NonNeg = 2.0
    """Same on AMD hosts, µs."""
    simple_net_overhead_factor: Positive = 3.0
    """Multiplier of the net-post overhead for the Simple protocol (tuning.cc x 3)."""
    ll_intra_factor: Positive = 1.0
    """Multiplier of intra-node LL hop latency on multi-node rings (NCCL >= 2.19 floors it at the net
    overhead instead of the older x 1.8)."""
    ring_plateau_factor: Positive = 1.4
    """Multi-node ring/Simple all-reduce latency multiplier on Ampere and later (1.9 before): NCCL's
    'plateau effect of ring' (tuning.cc ncclTopoGetAlgoTime)."""
    channels: Positive = 16.0
    """NCCL channels per communicator, used for per-channel caps and the ring plateau threshold
    (NCCL picks 16-32 on 8-GPU NVSwitch nodes with 8 NICs)."""
    reference_hop_latency_us: NonNeg = 5.0
    """Network hop latency that NCCL's table already assumes (IB/RoCE, Tree LL); a fabric whose
    ``hop_latency_us`` exceeds it (TCP sockets) adds the excess to every network step."""
    nvlink_latency_scale: Positive = 1.0
    """Multiplier on NCCL's NVLink hop latencies (calibration knob)."""
    pcie_latency_scale: Positive = 1.0
    """Multiplier on NCCL's PCIe hop latencies (calibration knob)."""
    net_latency_scale: Positive = 1.0
    """Multiplier on NCCL's network hop latencies (calibration knob)."""
    base_latency_scale: Positive = 1.0
    """Multiplier on NCCL's base (launch) latencies (calibration knob)."""

    def with_overrides(self, overrides: dict[str, Any] | None) -> CommParams:
        """A copy with fields replaced by name; unknown names raise SpecError with the nearest name."""
        if not overrides:
            return self
        fields = list(type(self).model_fields)
        for key in overrides:
            if key not in fields:
                raise SpecError(f"unknown comm parameter '{key}'{did_you_mean(key, fields)}",
                                path=("comm", key))
        data = self.model_dump()
        data.update(overrides)
        from pydantic import ValidationError

        try:
            return type(self).model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            raise SpecError(str(err["msg"]), path=("comm", *[str(p) for p in err["loc"]])) from None


DEFAULT_PARAMS = CommParams()
"""The documented defaults."""
