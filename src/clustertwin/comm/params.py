"""Named efficiency and latency parameters of the collective model, with documented defaults.

Every number the model uses beyond the hardware specs and NCCL's own tables
(:mod:`clustertwin.comm.constants`) is a field here. A :class:`~clustertwin.specs.Calibration`
overrides fields by name (``calibration.comm``); ``clustertwin node bench`` fills one from measurements.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.calibration import SECTION_CHECKS

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
    mesh_efficiency: Fraction = 0.71
    """Same fraction for direct GPU meshes (Infinity Fabric, HCCS, NVLink mesh): the large-message RCCL
    all-reduce busbw of 8 MI300X over 7 x 64 GB/s xGMI links, 316.8 GB/s at 8 GiB (Azure ND MI300X v5
    RCCL table) and 319.0 GB/s at 16 GiB (AMD ROCm blog 'Understanding RCCL Bandwidth and xGMI Performance
    on AMD Instinct MI300X', 2025), is 0.71 of the 448 GB/s per GPU; the mesh spends more than NVLink's
    ~20% protocol overhead (every peer a separate link, no switch to aggregate)."""
    pcie_efficiency: Fraction = 0.76
    """Fraction of a PCIe x16 link NCCL reaches: NCCL's PCI_BW 12 GB/s for Gen3 x16 (15.75 raw), topo.h."""
    network_efficiency: Fraction = 1.0
    """Multiplier on the fabric's ``achievable_fraction`` (a calibration knob; 1.0 = the catalog's
    per-NIC NCCL ceiling). At most 1, like every efficiency here: the catalog ceiling is already the
    NIC's share NCCL reaches, and a fit above it means the logs ran faster than the cluster spec's links
    (a damaged log, or a spec with slower NICs than the measured hosts)."""
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
    """Tuner only: host network-post overhead per ring step on Intel hosts, µs (tuning.cc getNetOverhead)."""
    net_overhead_us_amd: NonNeg = 2.0
    """Tuner only: same on AMD hosts, µs."""
    simple_net_overhead_factor: Positive = 3.0
    """Tuner only: multiplier of the net-post overhead for the Simple protocol (tuning.cc x 3)."""
    ring_plateau_factor: Positive = 1.4
    """Tuner only: multi-node ring/Simple all-reduce latency multiplier on Ampere and later (tuning.cc
    'plateau effect of ring'); it steers NCCL's choice, the physical time does not use it."""
    channels: Positive = 16.0
    """NCCL channels of a ring/tree communicator on NVLink nodes, for the per-channel caps and the chunk
    count of pipelined phases (NCCL picks 16-32 on 8-GPU NVSwitch nodes; 2 per NIC across nodes)."""
    reference_hop_latency_us: NonNeg = 5.0
    """Network hop latency of an RDMA fabric (the catalog's ``hop_latency_us`` of IB/RoCE); a fabric above
    it (TCP sockets, TCPXO) adds the excess to every network step, tuner and physical alike."""

    # ---- physical latency model (comm.latency), separate from NCCL's tuner tables. The defaults below are
    # a least-squares fit (log time, soft-L1) of these global terms to validation/collective_tables.yaml +
    # collective.yaml within physical bounds; the docstrings give the magnitudes' sources.
    launch_us: NonNeg = 5.0
    """Host cost of launching one collective kernel on one GPU without CUDA graphs (cudaLaunchKernel plus
    NCCL's enqueue, ~3-6 µs on current drivers); a process driving G GPUs (nccl-tests ``-g G``) pays it G
    times in series. Fitted on validation/collective_tables.yaml (Azure -g 8 rows vs mpirun rows)."""
    graph_launch_us: NonNeg = 0.3
    """Per-collective launch cost inside a CUDA/HIP graph (nccl-tests ``-G``): the graph node's kernel
    start, ~1-2 µs (ROCm blog MI300X: 64 B all-reduce 6 µs with graphs vs ~13 µs without)."""
    nvlink_hop_us_ll: NonNeg = 0.56
    """One NVLink/NVSwitch ring step with LL (8-byte flag+data stores, the receiver polls): store latency
    through the switch, ~0.5 µs (NCCL tuner NVLink ring LL 0.6)."""
    nvlink_hop_us_ll128: NonNeg = 3.0
    """Same with LL128 (128-byte lines with a flag word per line). Fitted at its upper bound, above the
    Simple row: the LL128 sizes (~1-32 MiB) are where per-channel chunking costs show, which this term
    absorbs (a known compromise, docs/comm.md Limits)."""
    nvlink_hop_us_simple: NonNeg = 1.25
    """Same with Simple (bulk copy, __threadfence_system, then a flag in the peer's FIFO)."""
    blackwell_hop_scale: Positive = 2.7
    """NVLink-5 (Blackwell, incl. NVL72 multi-node NVLink) step latency relative to the rows above: 8x B200
    ring LL ~23 µs at 32 KiB with graphs (nccl-tests#333), 8 GB200 over two trays 21.6 µs at 8 B (OKE)."""
    pcie_hop_us_ll: NonNeg = 1.0
    """One PCIe peer-to-peer (or host-bounce) ring step with LL (NCCL tuner PCI ring LL 1.0)."""
    pcie_hop_us_simple: NonNeg = 4.0
    """Same with Simple (NCCL tuner PCI ring Simple 5.7, tree 4.0)."""
    nic_latency_us: NonNeg = 3.0
    """One-way NIC latency (doorbell, DMA read, wire serialisation) per NIC traversed; a network step
    crosses two (ConnectX-7 RDMA write ~1-2 µs end to end)."""
    proxy_step_us_ll: NonNeg = 1.0
    """NCCL proxy/progress cost of one network step with LL/LL128 beyond the two NIC traversals: the CPU
    proxy thread notices the GPU's FIFO and posts ibv_post_send (NCCL tuner net ring LL 2.7 µs in total,
    of which the NICs take most)."""
    proxy_step_us_simple: NonNeg = 14.0
    """Same with Simple, which adds the GPUDirect flush and clear-to-send round trip (NCCL tuner net
    Simple 14 µs; held at that value, the fit moves little: median 9.2% free vs 9.5%)."""
    ring_sync_us: NonNeg = 3.9
    """Multi-node rings: every step, NVLink ones too, waits for the proxy's progress of the ring's
    network steps, so a step costs at least this (the physical side of NCCL's net-overhead floor)."""
    nvls_phase_us: NonNeg = 1.0
    """One NVLink-SHARP phase (multimem.ld_reduce or multimem.st plus the NVSwitch barrier); an NVLS
    all-reduce is two phases. The fit puts it at its lower bound: NVLS's cost at 1-16 MiB is its pipeline
    fill (``fill_stages``), not a fixed latency."""
    chunk_bytes: Positive = 524288.0
    """Pipeline chunk per channel of hierarchical (two-phase) algorithms: NCCL_BUFFSIZE 4 MiB / NCCL_STEPS
    8 = 512 KiB. A message of S bytes runs k = S / (chunk x channels) chunks, so two phases of t1 and t2
    take max(t1, t2) + min(t1, t2) / k: sequential for one chunk, overlapped for many. Largest chunk of the
    pipeline fill (:func:`clustertwin.comm.hierarchical.fill_s`)."""
    fill_stages: NonNeg = 6.0
    """Pipeline fill of multi-stage Simple pipelines (NVLS, tree with a scale-up chain, NVLSTree, CollNet; LL and
    LL128 stream at fine granularity and pay none): before the pipeline
    streams, the first chunks cross this many stages, adding ``fill_stages x min(S, chunk_bytes x
    channels) / algbw``. Fitted on validation/collective_tables.yaml; a per-depth fill (stages = the
    pipeline's depth, chunk shrunk for deep pipelines) fitted worse there (median 11% vs 9%)."""
    tree_stage_gb_per_s: Positive = 25.0
    """Rate of one store-and-forward stage of a Simple tree per channel, GB/s: one CTA forwarding a 512 KiB
    step to the next rank of the chain (NVLink) or tree (network). The first step crosses all ``D = 2 (ppn
    - 1 + log2 nodes)`` stages before the tree streams (:func:`clustertwin.comm.hierarchical.chain_fill_s`),
    which is the size-independent ~4 ms of a 20-rack NVL72 tree (72-GPU chains). Fitted on
    validation/collective_tables.yaml (20-30 GB/s fit equally; NCCL's per-channel tree busBw caps are
    24-42 GB/s on Blackwell)."""
    nvls_fill_stages: NonNeg = 1.23
    """The same fill for a two-stage pipeline (single-node NVLS: reduce, then multicast), x
    ``blackwell_hop_scale`` on NVLink 5 (fitted: Hopper ~1.2 stages, Blackwell ~3.3)."""
    nvls_chunk_bytes: Positive = 131072.0
    """NVLS chunk per (channel, head) before NCCL shrinks it for smaller messages (NCCL_NVLS_CHUNKSIZE,
    default 128 KiB)."""
    nvls_fill_loops: NonNeg = 2.0
    """Loops (``channels x heads x chunk`` bytes each) that fill NVLS's three-stage pipeline of scatter,
    switch reduce + multicast and gather before it streams: 2 for three stages; NVLSTree's deeper pipeline
    pays ``depth / 2`` times as many (:func:`clustertwin.comm.hierarchical.nvls_fill_s`). The fill is
    at least the handshake fill of ``nvls_fill_stages`` / ``fill_stages``."""
    nvls_fanin_gb_per_s: Positive = 31500.0
    """NVLink-SHARP reduction ceiling of an NVLS group: every output byte reads one input from each of the
    ``ppn`` members, so the switches' reduce input rate caps algbw at ``nvls_fanin_gb_per_s / ppn`` (438
    GB/s on a 72-GPU rack; 3,900 GB/s on 8 GPUs, where the links bind first). Fitted on the one
    full-rack NVL72 table (CoreWeave, NCCL 2.25.1, 438 GB/s algbw asymptote); NVIDIA publishes no SHARP
    reduction rate for the NVLink Switch."""
    p2p_channel_link_fraction: Fraction = 0.665
    """Bandwidth one p2p channel (one CTA copying through NVLink) moves, as a fraction of one NVLink link's
    NCCL bandwidth (``constants.NVLINK_LINK_GB_PER_S``: 20 GB/s on A100 -> 13.3 GB/s per channel). NCCL
    splits a send/recv over 4-32 channels by size (:func:`clustertwin.comm.p2p.p2p_channels`), so
    moderate messages run on fewer CTAs than the link needs. Fitted on validation/collective_tables.yaml
    (8x A100 sendrecv_perf: 110.8 GB/s at 128 MiB on 8 channels, 195 GB/s at 1 GiB on 16)."""
    deepep_ll_overhead_us: NonNeg = 30.0
    """DeepEP low-latency kernels: fixed cost beyond launch and data (IBGDA atomics for the per-expert
    counters, the receiver's spin on them, the round trip), ~30-40 µs from DeepEP's V1 tables (EP8-256)."""

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
            got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
            raise SpecError(f"{err['msg']}{got}", path=("comm", *[str(p) for p in err["loc"]])) from None


DEFAULT_PARAMS = CommParams()
SECTION_CHECKS['comm'] = DEFAULT_PARAMS.with_overrides  # range and name checks of a calibration section
"""The documented defaults."""
