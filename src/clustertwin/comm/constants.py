"""NCCL's own tuning constants and hardware link tables used by the collective model.

The latency and protocol tables are NCCL's tuning model (``src/graph/tuning.cc`` of NVIDIA/nccl,
v2.2x-2.30, ``ncclTunerConstantsDefaults``). They are NCCL's *model inputs*, in microseconds and GB/s; the
cost model in :mod:`clustertwin.comm.model` composes them with the cluster's hardware.
Indexing: ``TABLE[algorithm][protocol]`` with protocols ``LL``, ``LL128``, ``Simple``.
"""

from __future__ import annotations

from typing import Final

PROTOCOLS: Final[tuple[str, ...]] = ("LL", "LL128", "Simple")
"""NCCL protocols: LL (8-byte stores: 4 B data + 4 B flag), LL128 (128-byte lines, 120 B payload),
Simple (bulk copies with memory fences)."""

BASE_LATENCY_US: Final[dict[str, dict[str, float]]] = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "collnet": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "nvlstree": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "pat": {"LL": 8.0, "LL128": 8.0, "Simple": 8.0},
}
"""Base (launch) latency per algorithm and protocol, µs (tuning.cc ``baseLatencies``)."""

# hop types of NCCL's hwLatencies table
NVLINK: Final = "nvlink"
PCI: Final = "pci"
NET: Final = "net"

HW_LATENCY_US: Final[dict[str, dict[str, dict[str, float]]]] = {
    NVLINK: {
        "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
        "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
        "collnet_direct": {"Simple": 3.7},
        "collnet_chain": {"Simple": 2.8},
        "nvls": {"Simple": 25.0},
        "nvlstree": {"Simple": 25.0},
        "pat": {"Simple": 4.0},
    },
    PCI: {
        "tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0},
        "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
        "collnet_direct": {"Simple": 3.7},
        "collnet_chain": {"Simple": 2.8},
        "nvls": {"Simple": 0.0},
        "nvlstree": {"Simple": 0.0},
        "pat": {"Simple": 4.0},
    },
    NET: {
        "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
        "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
        "collnet_direct": {"Simple": 31.0},
        "collnet_chain": {"Simple": 30.0},
        "nvls": {"Simple": 18.0},
        "nvlstree": {"Simple": 20.9},
        "pat": {"Simple": 14.0},
    },
}
"""Per-hop hardware latency, µs, by hop type (NVLink, PCIe, network), algorithm and protocol
(tuning.cc ``hwLatencies``; NVLSTree network 20.9 µs as in v2.30)."""

LL_MAX_GB_PER_S_SINGLE_NODE: Final[dict[str, float]] = {
    "volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0,
}
"""Ceiling of the LL protocol's bus bandwidth on one node, GB/s, by GPU generation (``llMaxBws``)."""

LL_MAX_GB_PER_S_MULTI_NODE: Final[dict[str, tuple[float, float]]] = {
    "intel": (39.0, 20.4), "amd": (22.5, 19.0),
}
"""LL ceiling across nodes, GB/s, by host CPU vendor: (2 nodes, 3+ nodes) (``llMaxBws`` rows N2/N4)."""

PER_CHANNEL_RING_LL128_GB_PER_S: Final[dict[str, float]] = {
    "volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 73.4,
}
"""Per-channel ceiling of ring LL128 bandwidth, GB/s (``perChMaxRingLL128Bws``)."""

PER_CHANNEL_TREE_GB_PER_S: Final[dict[str, tuple[float, float, float]]] = {
    "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0),
}
"""Per-channel ceiling of tree all-reduce bus bandwidth, GB/s, for (1, 2, >= 3 nodes) (tuning.cc
``perChMaxTreeBws``; Hopper and Blackwell rows as in the research notes, older generations uncapped here).
Tree algbw <= 0.5 x channels x this (NCCL's tree busBw -> algBw ratio 0.5)."""

NVLS_EFFICIENCY: Final[dict[str, float]] = {"hopper": 0.85, "blackwell": 0.74}
"""NVLink SHARP efficiency per generation (tuning.cc ``nvlsEfficiency``); other NVLS-capable parts
default to the Hopper value."""

TREE_CORRECTION: Final[dict[str, tuple[float, ...]]] = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0,
              1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
"""NCCL's medium-size tree bandwidth correction (``treeCorrectionFactor``): entry k applies to
all-reduce sizes with floor(log2(bytes / 64)) = k, i.e. 64 B .. 256 MiB; 1.0 above."""

TREE_CORRECTION_UNIT_BYTES: Final = 64
"""Size unit of the tree correction buckets (bytes >> 6 in tuning.cc)."""

GPU_GENERATIONS: Final[dict[str, str]] = {
    "kepler": "volta", "maxwell": "volta", "pascal": "volta", "volta": "volta", "turing": "volta",
    "ampere": "ampere", "ada lovelace": "ampere", "ada": "ampere",
    "hopper": "hopper", "blackwell": "blackwell", "rubin": "blackwell",
}
"""GPU architecture name -> row of NCCL's per-generation tables (older parts use the Volta row; Ada
uses Ampere's; other vendors' parts fall back by release year, see model._generation)."""

PAT_LOG_LATENCY_DIVISOR: Final = 3.5
"""PAT's logarithmic latency term is log2(nNodes) x (network latency / 3.5) (tuning.cc)."""

PLATEAU_MIN_BYTES_PER_CHANNEL_RANK: Final = 64
"""NCCL applies the ring plateau latency factor once bytes / (channels x ranks) >= 64 (tuning.cc)."""

NVLINK_LINK_GB_PER_S: Final[dict[str, float]] = {
    "volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1,
}
"""NCCL's bandwidth of one NVLink link, GB/s, by generation (topo.h ``SM70/SM80/SM90/SM100_NVLINK_BW``)."""

NVLINK_LINK_RAW_GB_PER_S: Final[dict[str, float]] = {
    "volta": 25.0, "ampere": 25.0, "hopper": 25.0, "blackwell": 50.0,
}
"""Line rate of one NVLink link per direction, GB/s (NVLink 2-4: 25; NVLink 5: 50); the scale-up bandwidth
divided by this is the link count NCCL sees (A100 12, H100 18, B200 18)."""

P2P_MAX_CHANNELS: Final = 32
"""p2p channels of a communicator (``comm->p2pnChannels``: the collective channel count, <= MAXCHANNELS 32,
rounded up to a power of two; 32 on NVSwitch nodes)."""

P2P_NVL_CHUNK_BYTES: Final = 524288
"""p2p step size over NVLink (``NCCL_P2P_NVL_CHUNKSIZE`` default 512 KiB)."""
