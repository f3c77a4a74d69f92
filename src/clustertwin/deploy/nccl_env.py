"""NCCL environment for a cluster's fabric and scale-up domain.

Which variables and why (NCCL environment documentation; defaults read in the NCCL 2.2x source):

- ``NCCL_IB_HCA``: the compute NICs, as exact names (``=`` prefix: without it ``mlx5_1`` would also match
  ``mlx5_10``), port 1. The catalog knows the NIC count, not the device names; the default
  ``mlx5_0..mlx5_{n-1}`` holds where the compute NICs enumerate first, so check ``ibdev2netdev`` on the
  nodes and pass the real list (DGX systems interleave storage NICs).
- ``NCCL_SOCKET_IFNAME``: interfaces for bootstrap (and all data on plain Ethernet); the default excludes
  loopback and container bridges.
- RoCE: ``NCCL_IB_GID_INDEX`` (3 = RoCEv2 over IPv4 on most hosts; NCCL's own default -1 probes) and
  ``NCCL_IB_TC`` (106 = DSCP 26 << 2 with ECN, the lossless PFC class of common RoCE designs).
- Plain Ethernet: ``NCCL_IB_DISABLE=1`` and, at >= 100 Gbit/s, 4 socket threads x 4 sockets per thread
  (NCCL docs' suggestion for 100G networks; product at most 64).
- ``NCCL_NVLS_ENABLE``: NVLink SHARP through an NVSwitch (Hopper and later, needs Fabric Manager).
- ``NCCL_COLLNET_ENABLE``: in-network reduction on InfiniBand SHARP switches (needs the SHARP plugin).
- ``NCCL_MNNVL_ENABLE``: multi-node NVLink when one NVLink domain spans several hosts (GB200 NVL72; IMEX).
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.specs.cluster import ClusterSpec

DEFAULT_SOCKET_IFNAME = "^lo,docker,veth"
"""Exclude loopback, Docker bridges and container veth pairs (NCCL prefix syntax)."""
DEFAULT_ROCE_GID_INDEX = 3
"""RoCEv2 over IPv4 is GID index 3 on most Linux hosts (show_gids)."""
DEFAULT_ROCE_TRAFFIC_CLASS = 106
"""DSCP 26 shifted left by 2, plus ECN-capable transport (2): the lossless class of common PFC setups."""
SOCKET_THREADS_FAST = 4
"""NCCL_SOCKET_NTHREADS for >= 100 Gbit/s Ethernet (NCCL docs' value for generic 100G networks)."""
SOCKETS_PER_THREAD_FAST = 4
"""NCCL_NSOCKS_PERTHREAD for >= 100 Gbit/s Ethernet."""
FAST_ETHERNET_GBIT = 100.0
"""Line rate from which the socket transport needs several threads and sockets."""
HCA_PREFIX = {"infiniband": "mlx5", "roce": "mlx5", "omnipath": "hfi1"}
"""Verbs device name prefix of the fabric's usual NIC driver."""
NCCL_VENDORS = ("nvidia", "amd")
"""GPU vendors whose collective library reads NCCL_* variables (NCCL; AMD's RCCL keeps the names)."""


@dataclass(frozen=True)
class EnvVar:
    """One environment variable with the reason it is set."""

    name: str
    value: str
    why: str


def hca_list(count: int, prefix: str = "mlx5", port: int = 1) -> str:
    """``=mlx5_0:1,mlx5_1:1,...``: exact device names (``=``) so ``mlx5_1`` does not match ``mlx5_10``."""
    return "=" + ",".join(f"{prefix}_{i}:{port}" for i in range(count))


def nccl_env(cluster: ClusterSpec, *, ib_hca: str | None = None, socket_ifname: str | None = None,
             gid_index: int | None = None, traffic_class: int | None = None,
             gpus_per_host: int | None = None) -> list[EnvVar]:
    """NCCL variables for ``cluster``'s fabric, NICs and scale-up domain, each with its reason."""
    node = cluster.node
    gpu = node.gpu
    fabric = cluster.fabric
    kind = fabric.kind
    vendor = gpu.vendor.lower()
    if vendor not in NCCL_VENDORS:
        raise SpecError(f"GPU vendor '{gpu.vendor}' does not use NCCL (Ascend uses HCCL); deploy generates "
                        f"torchrun jobs for {', '.join(NCCL_VENDORS)} GPUs", path=("node", "gpu", "vendor"))
    rdma = kind in ("infiniband", "roce", "omnipath")
    if ib_hca is not None and not rdma:
        raise SpecError(f"ib_hca applies to RDMA fabrics; fabric '{fabric.id or fabric.name}' is {kind}",
                        path=("ib_hca",))
    if (gid_index is not None or traffic_class is not None) and kind != "roce":
        raise SpecError(f"gid_index and traffic_class apply to RoCE; fabric '{fabric.id or fabric.name}' is {kind}",
                        path=("gid_index",))
    out = [EnvVar("NCCL_DEBUG", "WARN", "warnings only in production (INFO/TRACE for debugging)"),
           EnvVar("NCCL_SOCKET_IFNAME", socket_ifname or DEFAULT_SOCKET_IFNAME,
                  "bootstrap interfaces" + ("" if rdma else " and the data path (TCP sockets)"))]
    nics = node.nics.count
    if rdma:
        hca = ib_hca or hca_list(nics, HCA_PREFIX[kind])
        out.append(EnvVar("NCCL_IB_HCA", hca, f"the node's {nics} compute NIC port(s) "
                          f"({fabric.gbit_per_s:g} Gbit/s {kind}); check names with ibdev2netdev"))
    if kind == "roce":
        gid = DEFAULT_ROCE_GID_INDEX if gid_index is None else gid_index
        tc = DEFAULT_ROCE_TRAFFIC_CLASS if traffic_class is None else traffic_class
        out.append(EnvVar("NCCL_IB_GID_INDEX", str(gid), "RoCEv2 GID (show_gids)"))
        out.append(EnvVar("NCCL_IB_TC", str(tc), "traffic class of the lossless (PFC/ECN) queue"))
    if kind == "ethernet":
        out.append(EnvVar("NCCL_IB_DISABLE", "1", "no RDMA on this fabric: TCP sockets"))
        if fabric.gbit_per_s >= FAST_ETHERNET_GBIT:
            out.append(EnvVar("NCCL_SOCKET_NTHREADS", str(SOCKET_THREADS_FAST),
                              f"one thread cannot fill {fabric.gbit_per_s:g} Gbit/s"))
            out.append(EnvVar("NCCL_NSOCKS_PERTHREAD", str(SOCKETS_PER_THREAD_FAST),
                              "sockets per thread (threads x sockets <= 64)"))
    if vendor == "nvidia":
        nvls = node.scale_up.kind == "nvswitch" and gpu.nvls and node.gpus > 1
        out.append(EnvVar("NCCL_NVLS_ENABLE", "1" if nvls else "0",
                          "NVLink SHARP in the NVSwitches (needs Fabric Manager)" if nvls
                          else "no NVLink SHARP on this node"))
        sharp = cluster.net.sharp if cluster.net.sharp is not None else fabric.sharp
        collnet = bool(sharp) and kind == "infiniband"
        out.append(EnvVar("NCCL_COLLNET_ENABLE", "1" if collnet else "0",
                          "SHARP in-network reduction (needs the NCCL SHARP plugin)" if collnet
                          else "no in-network reduction on this fabric"))
        if gpus_per_host is not None and gpus_per_host < node.gpus and node.scale_up.kind == "nvswitch":
            out.append(EnvVar("NCCL_MNNVL_ENABLE", "1",
                              f"one NVLink domain of {node.gpus} GPUs spans hosts of {gpus_per_host} (IMEX)"))
    return out
